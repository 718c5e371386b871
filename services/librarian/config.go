package librarian

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Config holds the librarian's own settings.
type Config struct {
	// AllowedRoots restricts where repositories may live; empty allows any
	// absolute path.
	AllowedRoots []string
	// MaxFileBytes skips larger files at index time.
	MaxFileBytes int64
	// MaxFiles fails an index that would hold more files.
	MaxFiles int
	// ChunkLines is the height of a chunk's line window.
	ChunkLines int
	// ChunkOverlap is how many lines consecutive chunks share.
	ChunkOverlap int
	// MaxQueryChars bounds a search query.
	MaxQueryChars int
	// DefaultPageSize and MaxPageSize bound search results.
	DefaultPageSize int
	MaxPageSize     int
	// InboxTimeout bounds the handling of one inbox message.
	InboxTimeout time.Duration
	// InboxRetryDelay is the wait before a message that failed is delivered
	// again.
	InboxRetryDelay time.Duration
}

// RegisterFlags registers the -librarian.* flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*rootList)(&c.AllowedRoots), "librarian.allowed-roots", "comma-separated absolute directories repositories must live under (empty allows any absolute path)")
	fs.Int64Var(&c.MaxFileBytes, "librarian.max-file-bytes", 1<<20, "files larger than this are not indexed")
	fs.IntVar(&c.MaxFiles, "librarian.max-files", 100000, "an index of a repository with more files than this fails")
	fs.IntVar(&c.ChunkLines, "librarian.chunk-lines", 40, "lines per indexed chunk")
	fs.IntVar(&c.ChunkOverlap, "librarian.chunk-overlap", 5, "lines shared by consecutive chunks")
	fs.IntVar(&c.MaxQueryChars, "librarian.max-query-chars", 1000, "longest accepted search query, in characters")
	fs.IntVar(&c.DefaultPageSize, "librarian.default-page-size", 10, "search hits returned when the request names no page size")
	fs.IntVar(&c.MaxPageSize, "librarian.max-page-size", 100, "most search hits one request may ask for")
	fs.DurationVar(&c.InboxTimeout, "librarian.inbox-timeout", 20*time.Second, "time allowed to answer one routed message")
	fs.DurationVar(&c.InboxRetryDelay, "librarian.inbox-retry-delay", 2*time.Second, "wait before retrying a routed message whose answer failed")
}

// Validate reports every problem with the settings.
func (c Config) Validate() error {
	var errs []error
	for _, r := range c.AllowedRoots {
		if !filepath.IsAbs(r) {
			errs = append(errs, fmt.Errorf("librarian.allowed-roots: %q is not an absolute path", r))
		}
	}
	if c.MaxFileBytes < 1 {
		errs = append(errs, errors.New("librarian.max-file-bytes: must be at least 1"))
	}
	if c.MaxFiles < 1 {
		errs = append(errs, errors.New("librarian.max-files: must be at least 1"))
	}
	if c.ChunkLines < 1 {
		errs = append(errs, errors.New("librarian.chunk-lines: must be at least 1"))
	}
	if c.ChunkOverlap < 0 || (c.ChunkLines >= 1 && c.ChunkOverlap >= c.ChunkLines) {
		errs = append(errs, errors.New("librarian.chunk-overlap: must be at least 0 and less than librarian.chunk-lines"))
	}
	if c.MaxQueryChars < 1 {
		errs = append(errs, errors.New("librarian.max-query-chars: must be at least 1"))
	}
	if c.MaxPageSize < 1 {
		errs = append(errs, errors.New("librarian.max-page-size: must be at least 1"))
	}
	if c.DefaultPageSize < 1 || c.DefaultPageSize > c.MaxPageSize {
		errs = append(errs, errors.New("librarian.default-page-size: must be between 1 and librarian.max-page-size"))
	}
	if c.InboxTimeout <= 0 {
		errs = append(errs, errors.New("librarian.inbox-timeout: must be positive"))
	}
	if c.InboxRetryDelay <= 0 {
		errs = append(errs, errors.New("librarian.inbox-retry-delay: must be positive"))
	}
	return errors.Join(errs...)
}

// rootList is a comma-separated list of directories, as a flag value.
type rootList []string

// String joins the list with commas.
func (r *rootList) String() string {
	if r == nil {
		return ""
	}
	return strings.Join(*r, ",")
}

// Set replaces the list with the comma-separated paths of v, cleaned.
func (r *rootList) Set(v string) error {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, filepath.Clean(p))
		}
	}
	*r = out
	return nil
}

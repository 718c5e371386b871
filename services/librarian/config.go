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
	// AllowedRoots are the directories repositories may be registered
	// under, for every tenant and per tenant (roots.go); empty allows no
	// paths, only git URLs.
	AllowedRoots Roots
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
	// MaxChunkLines is the longest declaration kept as one chunk; longer
	// ones are cut into ChunkLines windows.
	MaxChunkLines int
	// Ignore lists extra .gitignore-style patterns never indexed, on top of
	// each repository's .gitignore.
	Ignore []string
	// DeltaMaxFiles is the most changed files a delta index handles; more
	// fall back to a full pass.
	DeltaMaxFiles int
	// Embed selects and configures the embedder.
	EmbedProvider string
	EmbedDims     int
	EmbedURL      string
	EmbedModel    string
	EmbedAPIKey   string
	EmbedTimeout  time.Duration
	// SearchTokenBudget bounds the snippet tokens of one search (K-09).
	SearchTokenBudget int
	// CacheTTL is how long a search answer stays in the Redis intent cache;
	// 0 disables the cache.
	CacheTTL time.Duration
	// HNSW graph parameters.
	HNSWM              int
	HNSWEfConstruction int
	HNSWEfSearch       int
	// SemanticMinScore drops semantic neighbours less similar than this.
	SemanticMinScore float64
	// DataDir holds clones of repositories registered by git URL.
	DataDir string
	// MembersPrivateRemotes lets members clone from loopback, private and
	// link-local addresses; otherwise only admins may (clone.go).
	MembersPrivateRemotes bool
	// ToolsCacheTTL bounds how long a tool discovery answer stays in Redis
	// (it is also recomputed whenever its configuration changes).
	ToolsCacheTTL time.Duration
	// Watch enables the file watcher (F-25) for repositories registered by
	// local path.
	Watch bool
	// WatchDebounce is how long a repository must be quiet before its
	// changed files are indexed.
	WatchDebounce time.Duration
	// WatchRescan is how often the watcher looks for repositories
	// registered elsewhere (another replica).
	WatchRescan time.Duration
	// WatchMaxDirs bounds the directories one replica watches.
	WatchMaxDirs int
	// Answer is how routed questions are answered (answer.go).
	Answer AnswerConfig
}

// RegisterFlags registers the -librarian.* flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.AllowedRoots, "librarian.allowed-roots", "directories repositories may be registered under by path, comma-separated: /dir for every tenant, "+
		"tenant=/dir1:/dir2 for one tenant's own (e.g. /srv/shared,acme=/srv/acme); symlinks are resolved before the check; "+
		"empty allows no paths, only git URLs (sylk dev allows your home and the current directory)")
	fs.Int64Var(&c.MaxFileBytes, "librarian.max-file-bytes", 1<<20, "files larger than this are not indexed")
	fs.IntVar(&c.MaxFiles, "librarian.max-files", 100000, "an index of a repository with more files than this fails")
	fs.IntVar(&c.ChunkLines, "librarian.chunk-lines", 40, "lines per indexed chunk")
	fs.IntVar(&c.ChunkOverlap, "librarian.chunk-overlap", 5, "lines shared by consecutive chunks")
	fs.IntVar(&c.MaxQueryChars, "librarian.max-query-chars", 1000, "longest accepted search query, in characters")
	fs.IntVar(&c.DefaultPageSize, "librarian.default-page-size", 10, "search hits returned when the request names no page size")
	fs.IntVar(&c.MaxPageSize, "librarian.max-page-size", 100, "most search hits one request may ask for")
	fs.DurationVar(&c.InboxTimeout, "librarian.inbox-timeout", 20*time.Second, "time allowed to answer one routed message")
	fs.DurationVar(&c.InboxRetryDelay, "librarian.inbox-retry-delay", 2*time.Second, "wait before retrying a routed message whose answer failed")
	fs.IntVar(&c.MaxChunkLines, "librarian.max-chunk-lines", 150, "longest declaration indexed as one chunk; longer ones are cut into librarian.chunk-lines windows")
	c.Ignore = append([]string(nil), defaultIgnore...)
	fs.Var((*patternList)(&c.Ignore), "librarian.ignore", "comma-separated .gitignore-style patterns never indexed (each repository's .gitignore also applies)")
	fs.IntVar(&c.DeltaMaxFiles, "librarian.delta-max-files", 100, "most changed files a delta index handles before it falls back to a full pass")
	fs.StringVar(&c.EmbedProvider, "librarian.embed.provider", "hashing", "embedder: hashing (offline) or openai (an OpenAI-compatible /embeddings endpoint)")
	fs.IntVar(&c.EmbedDims, "librarian.embed.dims", 256, "embedding dimensions")
	fs.StringVar(&c.EmbedURL, "librarian.embed.url", "", "base URL of the OpenAI-compatible embeddings API (e.g. https://host/v1)")
	fs.StringVar(&c.EmbedModel, "librarian.embed.model", "", "embedding model name for the openai provider")
	fs.StringVar(&c.EmbedAPIKey, "librarian.embed.api-key", "", "API key of the embeddings endpoint (set SYLK_LIBRARIAN_EMBED_API_KEY)")
	fs.DurationVar(&c.EmbedTimeout, "librarian.embed.timeout", 30*time.Second, "time allowed for one embeddings request")
	fs.IntVar(&c.SearchTokenBudget, "librarian.search-token-budget", 2000, "snippet tokens one search returns at most (4 characters a token)")
	fs.DurationVar(&c.CacheTTL, "librarian.cache-ttl", 15*time.Minute, "lifetime of cached search answers in Redis (0 disables the cache)")
	fs.IntVar(&c.HNSWM, "librarian.hnsw.m", 16, "links per node of the in-memory HNSW graph (twice as many on its base layer)")
	fs.IntVar(&c.HNSWEfConstruction, "librarian.hnsw.ef-construction", 100, "candidates considered when inserting into the HNSW graph")
	fs.IntVar(&c.HNSWEfSearch, "librarian.hnsw.ef-search", 64, "candidates considered when searching the HNSW graph")
	fs.Float64Var(&c.SemanticMinScore, "librarian.semantic-min-score", 0.3, "least cosine similarity of a semantic hit (0-1)")
	fs.DurationVar(&c.ToolsCacheTTL, "librarian.tools-cache-ttl", 24*time.Hour, "lifetime of a cached tool discovery answer in Redis")
	fs.BoolVar(&c.Watch, "librarian.watch", true, "watch repositories registered by local path and index changed files as they are written")
	fs.DurationVar(&c.WatchDebounce, "librarian.watch.debounce", 100*time.Millisecond, "quiet time after the last change of a repository before its changed files are indexed")
	fs.DurationVar(&c.WatchRescan, "librarian.watch.rescan", 30*time.Second, "how often the watcher looks for repositories registered by other replicas")
	fs.IntVar(&c.WatchMaxDirs, "librarian.watch.max-dirs", 50000, "most directories one replica watches")
	fs.StringVar(&c.DataDir, "librarian.data-dir", "", "directory for clones of repositories registered by git URL (empty disables URL registration)")
	fs.BoolVar(&c.MembersPrivateRemotes, "librarian.members-private-remotes", false, "let members, not only admins, register git URLs whose host is a loopback, private or link-local address (an internal git server)")
	c.Answer.registerFlags(fs)
}

// Validate reports every problem with the settings.
func (c Config) Validate() error {
	errs := []error{c.Answer.validate()}
	if err := c.AllowedRoots.validate(); err != nil {
		errs = append(errs, err)
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
	if c.MaxChunkLines < 1 {
		errs = append(errs, errors.New("librarian.max-chunk-lines: must be at least 1"))
	}
	if c.DeltaMaxFiles < 0 {
		errs = append(errs, errors.New("librarian.delta-max-files: must not be negative"))
	}
	switch c.EmbedProvider {
	case "hashing":
		if c.EmbedDims < 16 {
			errs = append(errs, errors.New("librarian.embed.dims: must be at least 16"))
		}
	case "openai":
		if c.EmbedURL == "" || c.EmbedModel == "" || c.EmbedDims < 1 {
			errs = append(errs, errors.New("librarian.embed.url, librarian.embed.model and librarian.embed.dims are required for the openai provider"))
		}
	default:
		errs = append(errs, fmt.Errorf("librarian.embed.provider: %q is not hashing or openai", c.EmbedProvider))
	}
	if c.SearchTokenBudget < 1 {
		errs = append(errs, errors.New("librarian.search-token-budget: must be at least 1"))
	}
	if c.HNSWM < 2 || c.HNSWEfConstruction < 1 || c.HNSWEfSearch < 1 {
		errs = append(errs, errors.New("librarian.hnsw.m must be at least 2, librarian.hnsw.ef-construction and librarian.hnsw.ef-search at least 1"))
	}
	if c.SemanticMinScore < 0 || c.SemanticMinScore > 1 {
		errs = append(errs, errors.New("librarian.semantic-min-score: must be between 0 and 1"))
	}
	if c.CacheTTL < 0 {
		errs = append(errs, errors.New("librarian.cache-ttl: must not be negative"))
	}
	if c.WatchDebounce <= 0 || c.WatchRescan <= 0 {
		errs = append(errs, errors.New("librarian.watch.debounce and librarian.watch.rescan: must be positive"))
	}
	if c.ToolsCacheTTL <= 0 {
		errs = append(errs, errors.New("librarian.tools-cache-ttl: must be positive"))
	}
	if c.WatchMaxDirs < 1 {
		errs = append(errs, errors.New("librarian.watch.max-dirs: must be at least 1"))
	}
	if c.DataDir != "" && !filepath.IsAbs(c.DataDir) {
		errs = append(errs, errors.New("librarian.data-dir: must be an absolute path"))
	}
	return errors.Join(errs...)
}

// patternList is a comma-separated list of ignore patterns, as a flag value.
type patternList []string

// String joins the list with commas.
func (p *patternList) String() string {
	if p == nil {
		return ""
	}
	return strings.Join(*p, ",")
}

// Set replaces the list with the comma-separated patterns of v.
func (p *patternList) Set(v string) error {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	*p = out
	return nil
}

package archivalist

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"sylk.dev/sylk/pkg/topology"
)

// Limits that are part of the API rather than deployment settings.
const (
	// MaxTitleChars bounds an entry title, in characters.
	MaxTitleChars = 200
	// MaxSourceChars bounds an entry source, in characters.
	MaxSourceChars = 64
	// DefaultPageSize is used when a request leaves page_size at zero.
	DefaultPageSize = 10
	// MaxPageSize caps page_size.
	MaxPageSize = 100
	// SnippetChars bounds a search snippet, in characters.
	SnippetChars = 300

	// maxContentLimit keeps the text-search vector of an entry well below
	// its size limit, whatever the configuration says.
	maxContentLimit = 256 << 10
)

// Config holds the archivalist's own settings.
type Config struct {
	// MaxContentBytes bounds an entry's content.
	MaxContentBytes int
	// MaxQueryBytes bounds a search query.
	MaxQueryBytes int
	// InboxHits is how many hits an inbox answer carries.
	InboxHits int
	// AnswerModel writes answers with the configured model provider when
	// there is one (answer.go).
	AnswerModel bool
	// InboxTimeout bounds the handling of one inbox message.
	InboxTimeout time.Duration
	// GuideTimeout bounds reading from the Guide that an entry's session is
	// the caller's (when a Guide peer is configured).
	GuideTimeout time.Duration
}

// RegisterFlags registers the -archivalist.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxContentBytes, "archivalist.max-content-bytes", topology.MaxRecordBytes, "largest entry content accepted, in bytes")
	fs.IntVar(&c.MaxQueryBytes, "archivalist.max-query-bytes", 1024, "largest search query accepted, in bytes")
	fs.IntVar(&c.InboxHits, "archivalist.inbox-hits", 5, "hits included in an answer to a routed message")
	fs.BoolVar(&c.AnswerModel, "archivalist.answer-model", true, "write answers to routed questions with the configured model provider, citing the entries (offline: the entries found, listed)")
	fs.DurationVar(&c.InboxTimeout, "archivalist.inbox-timeout", 20*time.Second, "time allowed to handle one inbox message")
	fs.DurationVar(&c.GuideTimeout, "archivalist.guide-timeout", 5*time.Second, "time allowed for reading from the guide that a new entry's session is the caller's")
}

// Validate reports every problem with the settings.
func (c Config) Validate() error {
	var errs []error
	if c.MaxContentBytes < 1 || c.MaxContentBytes > maxContentLimit {
		errs = append(errs, fmt.Errorf("archivalist.max-content-bytes: must be between 1 and %d", maxContentLimit))
	}
	if c.MaxQueryBytes < 1 || c.MaxQueryBytes > 64<<10 {
		errs = append(errs, errors.New("archivalist.max-query-bytes: must be between 1 and 65536"))
	}
	if c.InboxHits < 1 || c.InboxHits > MaxPageSize {
		errs = append(errs, fmt.Errorf("archivalist.inbox-hits: must be between 1 and %d", MaxPageSize))
	}
	if c.InboxTimeout <= 0 {
		errs = append(errs, errors.New("archivalist.inbox-timeout: must be positive"))
	}
	if c.GuideTimeout <= 0 {
		errs = append(errs, errors.New("archivalist.guide-timeout: must be positive"))
	}
	return errors.Join(errs...)
}

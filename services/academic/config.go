package academic

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Limits that are part of the API rather than deployment settings.
const (
	// MaxTitleChars bounds a document title, in characters.
	MaxTitleChars = 200
	// MaxHeadingChars bounds each heading of a section's heading path, in
	// characters; longer headings are cut.
	MaxHeadingChars = 200
	// MaxSourceChars bounds a document source (a URL or file name).
	MaxSourceChars = 2048
	// DefaultPageSize is used when a request leaves page_size at zero.
	DefaultPageSize = 10
	// MaxPageSize caps page_size.
	MaxPageSize = 100
	// SnippetChars bounds a search snippet, in characters.
	SnippetChars = 300

	// maxSectionLimit matches the part of a section body the database
	// indexes (see migrations/academic).
	maxSectionLimit = 256 << 10
)

// Config holds the academic's own settings.
type Config struct {
	// MaxDocumentBytes bounds a document's content.
	MaxDocumentBytes int
	// MaxSectionBytes bounds a section's body; larger sections are cut at
	// line boundaries into parts under the same heading.
	MaxSectionBytes int
	// MaxSections bounds how many sections one document splits into.
	MaxSections int
	// TextSectionLines is how many lines of paragraphs a text section groups.
	TextSectionLines int
	// MaxQueryBytes bounds a search query.
	MaxQueryBytes int
	// InboxHits is how many hits an inbox answer carries.
	InboxHits int
	// InboxTimeout bounds the handling of one inbox message.
	InboxTimeout time.Duration
	// AnswerModel writes answers with the configured model provider when
	// there is one (answer.go).
	AnswerModel bool
}

// RegisterFlags registers the -academic.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxDocumentBytes, "academic.max-document-bytes", 2<<20, "largest document content accepted, in bytes")
	fs.IntVar(&c.MaxSectionBytes, "academic.max-section-bytes", 32<<10, "largest section body; larger sections are cut into parts")
	fs.IntVar(&c.MaxSections, "academic.max-sections", 50000, "most sections one document may split into (each heading starts one)")
	fs.IntVar(&c.TextSectionLines, "academic.text-section-lines", 40, "lines of paragraphs grouped into one section of a text document")
	fs.IntVar(&c.MaxQueryBytes, "academic.max-query-bytes", 1024, "largest search query accepted, in bytes")
	fs.IntVar(&c.InboxHits, "academic.inbox-hits", 5, "hits included in an answer to a routed message")
	fs.BoolVar(&c.AnswerModel, "academic.answer-model", true, "write answers to routed questions with the configured model provider, citing the document sections (offline: the sections found, listed)")
	fs.DurationVar(&c.InboxTimeout, "academic.inbox-timeout", 20*time.Second, "time allowed to handle one inbox message")
}

// Validate reports every problem with the settings.
func (c Config) Validate() error {
	var errs []error
	if c.MaxDocumentBytes < 1 || c.MaxDocumentBytes > 64<<20 {
		errs = append(errs, errors.New("academic.max-document-bytes: must be between 1 and 67108864"))
	}
	if c.MaxSectionBytes < 1024 || c.MaxSectionBytes > maxSectionLimit {
		errs = append(errs, fmt.Errorf("academic.max-section-bytes: must be between 1024 and %d", maxSectionLimit))
	}
	if c.MaxSections < 1 || c.MaxSections > 1_000_000 {
		errs = append(errs, errors.New("academic.max-sections: must be between 1 and 1000000"))
	}
	if c.TextSectionLines < 1 || c.TextSectionLines > 10000 {
		errs = append(errs, errors.New("academic.text-section-lines: must be between 1 and 10000"))
	}
	if c.MaxQueryBytes < 1 || c.MaxQueryBytes > 64<<10 {
		errs = append(errs, errors.New("academic.max-query-bytes: must be between 1 and 65536"))
	}
	if c.InboxHits < 1 || c.InboxHits > MaxPageSize {
		errs = append(errs, fmt.Errorf("academic.inbox-hits: must be between 1 and %d", MaxPageSize))
	}
	if c.InboxTimeout <= 0 {
		errs = append(errs, errors.New("academic.inbox-timeout: must be positive"))
	}
	return errors.Join(errs...)
}

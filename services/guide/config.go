package guide

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Defaults of Config; a zero field takes its default in New.
const (
	DefaultMaxMessageBytes     = 32 << 10
	DefaultMaxDisplayNameChars = 200
	DefaultMaxMetadataEntries  = 32
	DefaultMaxSummaryBytes     = 16 << 10
	DefaultRouteThreshold      = 0.7
	DefaultProvisionTimeout    = 10 * time.Second
)

// Limits that are part of the API rather than deployment choices.
const (
	maxMetadataKeyChars   = 128
	maxMetadataValueBytes = 1024
	maxRequestIDChars     = 128

	defaultSessionPageSize = 50
	maxSessionPageSize     = 200
	defaultMessagePageSize = 50
	maxMessagePageSize     = 500
	defaultEventPageSize   = 100
	maxEventPageSize       = 1000
)

// Config holds the Guide's own settings.
type Config struct {
	// MaxMessageBytes bounds a user message (after trimming).
	MaxMessageBytes int
	// MaxDisplayNameChars bounds a session's display name, in characters.
	MaxDisplayNameChars int
	// MaxMetadataEntries bounds a session's metadata map.
	MaxMetadataEntries int
	// MaxSummaryBytes bounds the summary given when a session completes.
	MaxSummaryBytes int
	// RouteThreshold is the classifier confidence below which the Guide asks
	// the user instead of routing.
	RouteThreshold float64
	// ProvisionTimeout bounds provisioning the NATS streams in New and Run.
	ProvisionTimeout time.Duration
}

// RegisterFlags registers the -guide.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxMessageBytes, "guide.max-message-bytes", DefaultMaxMessageBytes, "largest user message accepted, in bytes")
	fs.IntVar(&c.MaxDisplayNameChars, "guide.max-display-name-chars", DefaultMaxDisplayNameChars, "longest session display name, in characters")
	fs.IntVar(&c.MaxMetadataEntries, "guide.max-metadata-entries", DefaultMaxMetadataEntries, "most metadata entries on a session")
	fs.IntVar(&c.MaxSummaryBytes, "guide.max-summary-bytes", DefaultMaxSummaryBytes, "largest session summary accepted, in bytes")
	fs.Float64Var(&c.RouteThreshold, "guide.route-threshold", DefaultRouteThreshold, "classifier confidence below which the user is asked to clarify")
	fs.DurationVar(&c.ProvisionTimeout, "guide.provision-timeout", DefaultProvisionTimeout, "time allowed to provision the NATS streams")
}

// Validate reports every invalid setting. Zero values are valid: they take
// their defaults.
func (c Config) Validate() error {
	var errs []error
	if c.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("guide.max-message-bytes: must not be negative, got %d", c.MaxMessageBytes))
	}
	if c.MaxDisplayNameChars < 0 {
		errs = append(errs, fmt.Errorf("guide.max-display-name-chars: must not be negative, got %d", c.MaxDisplayNameChars))
	}
	if c.MaxMetadataEntries < 0 {
		errs = append(errs, fmt.Errorf("guide.max-metadata-entries: must not be negative, got %d", c.MaxMetadataEntries))
	}
	if c.MaxSummaryBytes < 0 {
		errs = append(errs, fmt.Errorf("guide.max-summary-bytes: must not be negative, got %d", c.MaxSummaryBytes))
	}
	if c.RouteThreshold < 0 || c.RouteThreshold > 1 {
		errs = append(errs, fmt.Errorf("guide.route-threshold: must be within [0, 1], got %g", c.RouteThreshold))
	}
	if c.ProvisionTimeout < 0 {
		errs = append(errs, errors.New("guide.provision-timeout: must not be negative"))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxDisplayNameChars == 0 {
		c.MaxDisplayNameChars = DefaultMaxDisplayNameChars
	}
	if c.MaxMetadataEntries == 0 {
		c.MaxMetadataEntries = DefaultMaxMetadataEntries
	}
	if c.MaxSummaryBytes == 0 {
		c.MaxSummaryBytes = DefaultMaxSummaryBytes
	}
	if c.RouteThreshold == 0 {
		c.RouteThreshold = DefaultRouteThreshold
	}
	if c.ProvisionTimeout == 0 {
		c.ProvisionTimeout = DefaultProvisionTimeout
	}
	return c
}

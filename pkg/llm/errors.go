package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tier is an error class of the five-tier taxonomy (B-31), in the seed's order.
type Tier int

// Tiers.
const (
	TierTransient Tier = iota
	TierPermanent
	TierUserFixable
	TierRateLimit
	TierDegrading
)

func (t Tier) String() string {
	switch t {
	case TierTransient:
		return "transient"
	case TierPermanent:
		return "permanent"
	case TierUserFixable:
		return "user_fixable"
	case TierRateLimit:
		return "external_rate_limit"
	case TierDegrading:
		return "external_degrading"
	}
	return "unknown"
}

// Sentinel errors.
var (
	// ErrNoCredentials means a provider has no API key.
	ErrNoCredentials = errors.New("llm: no credentials configured for provider")
	// ErrUnknownProvider names a provider that is not configured.
	ErrUnknownProvider = errors.New("llm: unknown provider")
	// ErrContextTooLarge means the prompt does not fit the model even after fitting.
	ErrContextTooLarge = errors.New("llm: prompt exceeds the model's context window")
)

// Error is a provider failure with what the classifier needs: the HTTP status
// and the Retry-After the provider asked for.
type Error struct {
	Provider   string
	StatusCode int
	RetryAfter time.Duration
	Message    string
	Err        error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.StatusCode)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	} else if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// MaxRetryAfter bounds the delay a Retry-After header may ask for: a day,
// beyond which a figure is taken as that.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads a Retry-After header: delay seconds or an HTTP date,
// at most MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 {
		// Compared as seconds: a figure too large for a Duration would
		// wrap round to a negative one.
		if n >= MaxRetryAfter.Seconds() {
			return MaxRetryAfter
		}
		return time.Duration(n * float64(time.Second))
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

// Classifier sorts errors into tiers (B-32).
type Classifier struct {
	RateLimitStatuses []int
	DegradingStatuses []int
	UserFixable       *regexp.Regexp
	Permanent         *regexp.Regexp
	Transient         *regexp.Regexp
}

// DefaultClassifier has the seed's defaults.
func DefaultClassifier() *Classifier {
	return &Classifier{
		RateLimitStatuses: []int{429},
		DegradingStatuses: []int{500, 502, 503, 504},
		UserFixable:       regexp.MustCompile(`(?i)api key|invalid credentials|unauthori[sz]ed|authentication|permission|forbidden|quota|no credentials|billing|http 401|http 403`),
		Permanent:         regexp.MustCompile(`(?i)not found|invalid|bad request|parse|malformed|unsupported|config|context window|too large|http 400|http 404|http 413|http 422`),
		Transient:         regexp.MustCompile(`(?i)connection reset|connection refused|broken pipe|timeout|timed out|temporar|eof|dns|no such host|network|unexpected end|stream closed|try again`),
	}
}

// Classify returns err's tier. Order (B-32): rate-limit status, degrading
// status, user-fixable text, permanent text, transient text, else permanent.
// A context deadline or a network error with no status is transient; an
// explicit cancel is permanent (nobody wants it retried).
func (c *Classifier) Classify(err error) Tier {
	if err == nil {
		return TierPermanent
	}
	var pe *Error
	if errors.As(err, &pe) && pe.StatusCode != 0 {
		if slices.Contains(c.RateLimitStatuses, pe.StatusCode) {
			return TierRateLimit
		}
		if slices.Contains(c.DegradingStatuses, pe.StatusCode) {
			return TierDegrading
		}
	}
	msg := err.Error()
	if c.UserFixable.MatchString(msg) || errors.Is(err, ErrNoCredentials) || errors.Is(err, ErrPrivateAddress) {
		return TierUserFixable
	}
	if errors.Is(err, context.Canceled) {
		return TierPermanent
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStreamIdle) {
		return TierTransient
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return TierTransient
	}
	if c.Permanent.MatchString(msg) {
		return TierPermanent
	}
	if c.Transient.MatchString(msg) {
		return TierTransient
	}
	return TierPermanent
}

// RetryAfterOf returns the Retry-After carried by err, or 0.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// StatusOf returns the HTTP status carried by err, or 0.
func StatusOf(err error) int {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.StatusCode
	}
	return 0
}

// IsMalformed reports whether err is a JSON decoding failure of a provider
// payload (permanent: retrying the same request returns the same bytes).
func IsMalformed(err error) bool {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &se) || errors.As(err, &te) || errors.Is(err, io.ErrUnexpectedEOF) && strings.Contains(err.Error(), "JSON")
}

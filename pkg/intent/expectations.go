// Package intent enriches a request's intent with what users of its feature
// domain expect without saying it (spec A-10), and merges those
// expectations into the request's success criteria without overriding what
// the user said (spec A-11).
//
// The expectations come from a built-in table of common feature domains:
// no model is asked, and answers say so (source "local").
package intent

import (
	"regexp"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// SourceLocal names the built-in table as the source of expectations.
const SourceLocal = "local"

// Expectation is one thing users of a domain expect.
type Expectation struct {
	Text      string
	Priority  messagev1.ExpectationPriority
	Rationale string
	// Topic is the word stem the expectation is about ("confirm"). A
	// constraint or criterion that speaks of the topic addresses it.
	Topic string
	// Object is the stem of what the expectation asks of its topic
	// ("login" for "redirect to login"); a statement about the topic that
	// names another object contradicts it. Empty when the topic alone
	// decides.
	Object string
}

// Domain is a feature domain and how to recognise it in a request.
type Domain struct {
	Name         string
	match        *regexp.Regexp
	Expectations []Expectation
}

const (
	required    = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_REQUIRED
	recommended = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_RECOMMENDED
	optional    = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_OPTIONAL
)

// domains is the table, most specific first: a request belongs to the
// first domain that matches it.
var domains = []Domain{
	{Name: "authentication/logout", match: regexp.MustCompile(`(?i)\b(log\s*out|logout|sign\s*out|signout|log\s+off)\b`),
		Expectations: []Expectation{
			{"session termination", required, "a logout that leaves the session or its tokens valid on the server is not a logout", "session", "terminat"},
			{"redirect to login", required, "users expect to land on the login page, not on a page they can no longer use", "redirect", "login"},
			{"confirmation if unsaved", recommended, "logging out must not silently discard unsaved work", "confirm", ""},
			{"log out of all devices", optional, "users who suspect a stolen session want to end every session at once", "device", ""},
		}},
	{Name: "authentication/login", match: regexp.MustCompile(`(?i)\b(log\s*in|login|sign\s*in|signin|authenticat\w*)\b`),
		Expectations: []Expectation{
			{"limit failed attempts", required, "unlimited attempts invite password guessing", "attempt", ""},
			{"generic error on failure", required, "an error that says which of user or password was wrong reveals which accounts exist", "error", "generic"},
			{"redirect to the requested page", recommended, "users expect to continue where they were sent to log in", "redirect", "request"},
			{"remember me", optional, "frequent users prefer a longer session on their own device", "remember", ""},
		}},
	{Name: "performance/caching", match: regexp.MustCompile(`(?i)\b(cach(e|es|ed|ing)|memoi[sz]\w*)\b`),
		Expectations: []Expectation{
			{"bounded memory", required, "an unbounded cache grows until the process runs out of memory", "memory", "bound"},
			{"invalidation on write", required, "a cache that outlives a write serves stale data", "invalidat", ""},
			{"expiry of entries", recommended, "entries nobody invalidates should still age out", "expir", ""},
			{"hit and miss metrics", optional, "without a hit rate nobody knows whether the cache helps", "metric", ""},
		}},
	{Name: "api/rate-limiting", match: regexp.MustCompile(`(?i)\b(rate[\s-]*limit\w*|throttl\w*)\b`),
		Expectations: []Expectation{
			{"limit per client", required, "one client must not use up everyone's allowance", "client", ""},
			{"429 with Retry-After", required, "clients need to know they were limited and when to come back", "retry", ""},
			{"limits shared across replicas", recommended, "a per-replica limit multiplies with the number of replicas", "replica", ""},
			{"burst allowance", optional, "short bursts of normal use should not be refused", "burst", ""},
		}},
	{Name: "api/pagination", match: regexp.MustCompile(`(?i)\b(paginat\w*|page\s+size|next\s+page)\b`),
		Expectations: []Expectation{
			{"stable ordering", required, "pages over a changing order skip or repeat items", "order", ""},
			{"maximum page size", required, "an unbounded page is an unbounded query", "size", "max"},
			{"opaque page token", recommended, "offsets break when items are inserted; tokens can be changed later", "token", ""},
		}},
	{Name: "storage/file-upload", match: regexp.MustCompile(`(?i)\b(upload\w*)\b`),
		Expectations: []Expectation{
			{"size limit", required, "an unlimited upload fills the disk", "size", ""},
			{"file type validation", required, "accepting any type lets executables and scripts in", "type", ""},
			{"progress feedback", recommended, "large uploads without progress look stuck", "progress", ""},
		}},
	{Name: "data/migration", match: regexp.MustCompile(`(?i)\b(migrat\w*|schema\s+change)\b`),
		Expectations: []Expectation{
			{"no data loss", required, "a migration that drops data cannot be undone by a rollback", "data", ""},
			{"reversible migration", required, "a change that cannot be rolled back turns a bad deploy into an outage", "revers", ""},
			{"batched on large tables", recommended, "one long transaction locks the table for everyone", "batch", ""},
		}},
}

// Domains lists the built-in feature domains.
func Domains() []string {
	out := make([]string, len(domains))
	for i, d := range domains {
		out[i] = d.Name
	}
	return out
}

// FeatureDomain derives a request's feature domain (spec A-10); ok is false
// when the request matches none.
func FeatureDomain(request string) (domain string, ok bool) {
	for _, d := range domains {
		if d.match.MatchString(request) {
			return d.Name, true
		}
	}
	return "", false
}

// Lookup returns a domain's expectations (nil for an unknown domain). The
// name is matched without regard to case and surrounding space.
func Lookup(domain string) []Expectation {
	domain = strings.ToLower(strings.TrimSpace(domain))
	for _, d := range domains {
		if d.Name == domain {
			return d.Expectations
		}
	}
	return nil
}

// Proto returns e as its message.
func (e Expectation) Proto() *messagev1.DomainExpectation {
	return &messagev1.DomainExpectation{Expectation: e.Text, Priority: e.Priority, Rationale: e.Rationale}
}

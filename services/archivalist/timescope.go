package archivalist

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"sylk.dev/sylk/pkg/apierr"
)

// Time scopes (spec A-35). The Guide's classifier puts a question's time
// hint in its envelope's structured intent; the REST search takes it as
// time_scope (or as since/until). Each scope is a window over the
// entries' creation times, in UTC (no user's time zone is known):
// "recently" is the last 7 days, as the spec says; a named day, week or
// month is the calendar one; "last week" is the calendar week before this
// one (weeks start on Monday).

// Time scopes the archivalist applies.
const (
	ScopeToday     = "today"
	ScopeYesterday = "yesterday"
	ScopeThisWeek  = "this_week"
	ScopeLastWeek  = "last_week"
	ScopeLastMonth = "last_month"
	ScopeLastYear  = "last_year"
	ScopeRecent    = "recent"
)

// TimeScopes are the scopes a request may name.
var TimeScopes = []string{ScopeToday, ScopeYesterday, ScopeThisWeek, ScopeLastWeek, ScopeLastMonth, ScopeLastYear, ScopeRecent}

// RecentWindow is how far back "recently" reaches (spec A-35).
const RecentWindow = 7 * 24 * time.Hour

// window is a range of creation times, [Since, Until); a nil bound is
// open. Label says it in words, for an answer.
type window struct {
	Scope        string
	Since, Until *time.Time
	Label        string
}

// set says whether the window restricts anything.
func (w window) set() bool { return w.Since != nil || w.Until != nil }

// scopePhrases find a time scope in a question, checked in order (longer
// phrases first, so "last week" is not read as "week").
var scopePhrases = []struct {
	pattern *regexp.Regexp
	scope   string
}{
	{regexp.MustCompile(`(?i)\b(?:in\s+the\s+)?(?:last|past)\s+(?:7|seven)\s+days\b`), ScopeRecent},
	{regexp.MustCompile(`(?i)\b(?:in\s+the\s+)?(?:last|past|previous)\s+month\b`), ScopeLastMonth},
	{regexp.MustCompile(`(?i)\b(?:in\s+the\s+)?(?:last|past|previous)\s+week\b`), ScopeLastWeek},
	{regexp.MustCompile(`(?i)\b(?:in\s+the\s+)?(?:last|past|previous)\s+year\b`), ScopeLastYear},
	{regexp.MustCompile(`(?i)\bthis\s+week\b`), ScopeThisWeek},
	{regexp.MustCompile(`(?i)\byesterday\b`), ScopeYesterday},
	{regexp.MustCompile(`(?i)\btoday\b`), ScopeToday},
	{regexp.MustCompile(`(?i)\b(?:recently|recent|lately)\b`), ScopeRecent},
}

// parseTimeScope finds the time scope of a question and returns it with
// the question without the words that said it ("" and the question as is
// when it names none).
func parseTimeScope(text string) (scope, rest string) {
	for _, p := range scopePhrases {
		if loc := p.pattern.FindStringIndex(text); loc != nil {
			rest = text[:loc[0]] + " " + text[loc[1]:]
			return p.scope, strings.Join(strings.Fields(rest), " ")
		}
	}
	return "", text
}

// scopeWindow is the window of a named scope at time now; false for a
// scope it does not know (such as the classifier's "before", which names
// no window).
func scopeWindow(scope string, now time.Time) (window, bool) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	// Monday of this week.
	week := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	year := time.Date(now.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
	between := func(since, until time.Time, label string) (window, bool) {
		return window{Scope: scope, Since: &since, Until: &until, Label: label}, true
	}
	switch scope {
	case ScopeToday:
		return between(day, now.Add(time.Nanosecond), "today ("+day.Format(time.DateOnly)+" UTC)")
	case ScopeYesterday:
		y := day.AddDate(0, 0, -1)
		return between(y, day, "yesterday ("+y.Format(time.DateOnly)+" UTC)")
	case ScopeThisWeek:
		return between(week, now.Add(time.Nanosecond), "this week (since "+week.Format(time.DateOnly)+" UTC)")
	case ScopeLastWeek:
		w := week.AddDate(0, 0, -7)
		return between(w, week, fmt.Sprintf("last week (%s to %s UTC)", w.Format(time.DateOnly), week.AddDate(0, 0, -1).Format(time.DateOnly)))
	case ScopeLastMonth:
		m := month.AddDate(0, -1, 0)
		return between(m, month, "last month ("+m.Format("January 2006")+")")
	case ScopeLastYear:
		y := year.AddDate(-1, 0, 0)
		return between(y, year, "last year ("+y.Format("2006")+")")
	case ScopeRecent:
		since := now.Add(-RecentWindow)
		return between(since, now.Add(time.Nanosecond), "in the last 7 days (since "+since.Format("2006-01-02 15:04")+" UTC)")
	}
	return window{}, false
}

// questionWindow is the window of a routed question: the scope the Guide
// classified, else the one its text names; the question's text comes back
// without the words that named it.
func questionWindow(classified, text string, now time.Time) (window, string) {
	scope, rest := parseTimeScope(text)
	if classified != "" {
		scope = classified
	}
	w, ok := scopeWindow(scope, now)
	if !ok {
		return window{}, rest
	}
	return w, rest
}

// withWindow adds the window an answer searched to its text.
func withWindow(text string, w window) string {
	if !w.set() {
		return text
	}
	return strings.TrimSpace(text) + " (Searched entries created " + w.Label + ".)"
}

// requestWindow reads the time bounds of a list or search request: a named
// scope, or since and until, not both. Problems are reported on the fields.
func requestWindow(scope string, since, until *timestamppb.Timestamp, now time.Time) (window, []apierr.FieldViolation) {
	var problems []apierr.FieldViolation
	bad := func(field, desc string) {
		problems = append(problems, apierr.FieldViolation{Field: field, Description: desc})
	}
	scope = strings.ToLower(strings.TrimSpace(scope))
	var w window
	if scope != "" {
		if since != nil || until != nil {
			bad("time_scope", "give either time_scope or since/until, not both")
		}
		var ok bool
		if w, ok = scopeWindow(scope, now); !ok {
			bad("time_scope", fmt.Sprintf("%q is not a time scope; allowed values: %s", scope, strings.Join(TimeScopes, ", ")))
		}
		return w, problems
	}
	for _, b := range [...]struct {
		field string
		ts    *timestamppb.Timestamp
		dst   **time.Time
	}{{"since", since, &w.Since}, {"until", until, &w.Until}} {
		if b.ts == nil {
			continue
		}
		if err := b.ts.CheckValid(); err != nil {
			bad(b.field, "must be a valid timestamp (RFC 3339, e.g. 2026-11-21T00:00:00Z)")
			continue
		}
		t := b.ts.AsTime().UTC()
		*b.dst = &t
	}
	if w.Since != nil && w.Until != nil && !w.Since.Before(*w.Until) {
		bad("until", "must be after since")
	}
	return w, problems
}

// validRepository is name when it is a repository's name, else "".
func validRepository(name string) string {
	if name == "" || len(repositoryProblems("repository", name)) > 0 {
		return ""
	}
	return name
}

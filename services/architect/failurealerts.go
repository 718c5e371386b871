package architect

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
)

// Similar failure alerts (spec E-09). The Orchestrator records each failed
// node of a failed run in the Archivalist (category "failure", filed under
// the run's repository, with "Files:", "Run:" and "Node:" lines). The
// consultation searches those of the plan's repository; a failure that
// shares a file with the request (the files it names, or those the
// Librarian found) or at least two of its words is alerted on the plan:
// in its consultation's failure_alerts, in its notes, and in the
// planner's prompt, so that the plan does not repeat it.
//
// Recurrence (spec G-25): the failures found of the same area (the same
// files, or the same error signature, the record's "Signature:" line) are
// one alert, the newest of them, which says how many of them are from the
// last 7 days and when the area last failed; the alerts are ranked by that
// count, then by that time. A failure a later attempt recovered from
// ("Recovered:" in its record) is alerted as recovered on retry.

// Bounds of the alerts.
const (
	maxAlerts        = 3
	minSharedWords   = 2
	maxReasonEntries = 4
	// recurrenceWindow is how far back the failures of an area count.
	recurrenceWindow = 7 * 24 * time.Hour
)

// alertStopWords are words too common in requests and failure records to
// make two of them similar.
var alertStopWords = []string{"task", "failed", "fail", "failure", "error", "tier", "node", "exit", "attempt", "after",
	"make", "change", "changes", "file", "files", "code", "with", "that", "this", "from", "into", "when", "what", "should",
	"permanent", "transient", "external", "user_fixable", "engineer", "role", "plan", "plans", "runs", "repositories", "repository",
	"then", "recovered", "succeeded", "outcome", "signature", "retry", "area"}

var (
	alertWord  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]{3,}`)
	alertPath  = regexp.MustCompile(`[A-Za-z0-9_.\-/]+\.[A-Za-z0-9]{1,6}\b`)
	recordLine = regexp.MustCompile(`(?m)^(Files|Run|Node|Signature|Recovered): (.+)$`)
)

// failureAlerts are the failures among hits similar to request, whose
// files the Librarian found to be files, one per area, the most recurrent
// first; now is when the recurrence window ends.
func failureAlerts(hits []*archivalistv1.EntryHit, request string, files []string, now time.Time) []*architectv1.FailureAlert {
	reqWords := wordsOf(request)
	reqFiles := append(slices.Clone(files), alertPath.FindAllString(request, -1)...)
	var groups []*alertGroup
	for _, h := range hits {
		e := h.GetEntry()
		fields := recordFields(e.GetContent())
		g := groupOf(groups, fields)
		if g == nil {
			g = &alertGroup{}
			groups = append(groups, g)
		}
		g.add(e, fields, now)
		var reason string
		if shared := sharedFiles(strings.Split(fields["Files"], ", "), reqFiles); len(shared) > 0 {
			reason = "touches the same files: " + strings.Join(shared[:min(len(shared), maxReasonEntries)], ", ")
		} else if shared := sharedWords(wordsOf(e.GetTitle()+" "+e.GetContent()), reqWords); len(shared) >= minSharedWords {
			reason = "on the same subject: " + strings.Join(shared[:min(len(shared), maxReasonEntries)], ", ")
		}
		if reason != "" && (g.alert == nil || newer(e.GetCreateTime(), g.alert.GetCreateTime())) {
			g.alert = &architectv1.FailureAlert{Entry: e.GetName(), Title: e.GetTitle(), Reason: reason,
				CreateTime: e.GetCreateTime(), Run: fields["Run"], Node: fields["Node"], Recovered: fields["Recovered"] != ""}
		}
	}
	var out []*architectv1.FailureAlert
	for _, g := range groups {
		if g.alert != nil {
			g.alert.RecentFailures, g.alert.LastFailureTime = g.recent, g.last
			out = append(out, g.alert)
		}
	}
	slices.SortStableFunc(out, func(a, b *architectv1.FailureAlert) int {
		if a.GetRecentFailures() != b.GetRecentFailures() {
			return cmp.Compare(b.GetRecentFailures(), a.GetRecentFailures())
		}
		return b.GetLastFailureTime().AsTime().Compare(a.GetLastFailureTime().AsTime())
	})
	return out[:min(len(out), maxAlerts)]
}

// alertGroup is the failures found of one area: their files and error
// signatures, how many are recent, the newest time, and the alert of the
// newest that resembles the request (nil: none does).
type alertGroup struct {
	files, signatures []string
	recent            int32
	last              *timestamppb.Timestamp
	alert             *architectv1.FailureAlert
}

// groupOf is the group of a failure record's fields: the one with the same
// files or the same error signature, or nil.
func groupOf(groups []*alertGroup, fields map[string]string) *alertGroup {
	for _, g := range groups {
		if f := fields["Files"]; f != "" && slices.Contains(g.files, f) {
			return g
		}
		if sig := fields["Signature"]; sig != "" && slices.Contains(g.signatures, sig) {
			return g
		}
	}
	return nil
}

func (g *alertGroup) add(e *archivalistv1.Entry, fields map[string]string, now time.Time) {
	if f := fields["Files"]; f != "" && !slices.Contains(g.files, f) {
		g.files = append(g.files, f)
	}
	if sig := fields["Signature"]; sig != "" && !slices.Contains(g.signatures, sig) {
		g.signatures = append(g.signatures, sig)
	}
	if t := e.GetCreateTime(); t != nil && !t.AsTime().Before(now.Add(-recurrenceWindow)) {
		g.recent++
	}
	if g.last == nil || newer(e.GetCreateTime(), g.last) {
		g.last = e.GetCreateTime()
	}
}

// newer tells whether a is later than b.
func newer(a, b *timestamppb.Timestamp) bool {
	return a.AsTime().After(b.AsTime())
}

// recordFields reads the "Files:", "Run:" and "Node:" lines of a failure
// record.
func recordFields(content string) map[string]string {
	out := map[string]string{}
	for _, m := range recordLine.FindAllStringSubmatch(content, -1) {
		if _, ok := out[m[1]]; !ok {
			out[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return out
}

// sharedFiles are the files of a that b names: the same path, or the same
// path's end (a request names "parser.go" for "pkg/parse/parser.go").
func sharedFiles(a, b []string) []string {
	var out []string
	for _, f := range a {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		for _, g := range b {
			if g == f || strings.HasSuffix(f, "/"+g) || strings.HasSuffix(g, "/"+f) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// wordsOf are the distinct significant words of s, lower-cased.
func wordsOf(s string) []string {
	var out []string
	for _, w := range alertWord.FindAllString(strings.ToLower(s), -1) {
		if !slices.Contains(alertStopWords, w) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

func sharedWords(a, b []string) []string {
	var out []string
	for _, w := range a {
		if slices.Contains(b, w) {
			out = append(out, w)
		}
	}
	return out
}

// alertNotes are a plan's notes for its alerts.
func alertNotes(alerts []*architectv1.FailureAlert) []string {
	out := make([]string, 0, len(alerts))
	for _, a := range alerts {
		out = append(out, "similar failure: "+alertLine(a))
	}
	return out
}

// alertLine is an alert in a line.
func alertLine(a *architectv1.FailureAlert) string {
	line := fmt.Sprintf("%q (%s", a.GetTitle(), a.GetEntry())
	if a.GetCreateTime() != nil {
		line += ", " + a.GetCreateTime().AsTime().UTC().Format("2006-01-02 15:04 UTC")
	}
	line += ") " + a.GetReason()
	if n := a.GetRecentFailures(); n > 1 {
		line += fmt.Sprintf("; failed %d times in the last 7 days", n)
		if a.GetLastFailureTime() != nil {
			line += ", last " + a.GetLastFailureTime().AsTime().UTC().Format("2006-01-02 15:04 UTC")
		}
	}
	if a.GetRecovered() {
		line += "; recovered on retry: see what the retry changed"
	}
	return line + "; do not repeat it"
}

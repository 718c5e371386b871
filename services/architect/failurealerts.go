package architect

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

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

// Bounds of the alerts.
const (
	maxAlerts        = 3
	minSharedWords   = 2
	maxReasonEntries = 4
)

// alertStopWords are words too common in requests and failure records to
// make two of them similar.
var alertStopWords = []string{"task", "failed", "fail", "failure", "error", "tier", "node", "exit", "attempt", "after",
	"make", "change", "changes", "file", "files", "code", "with", "that", "this", "from", "into", "when", "what", "should",
	"permanent", "transient", "external", "user_fixable", "engineer", "role", "plan", "plans", "runs", "repositories", "repository"}

var (
	alertWord  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]{3,}`)
	alertPath  = regexp.MustCompile(`[A-Za-z0-9_.\-/]+\.[A-Za-z0-9]{1,6}\b`)
	recordLine = regexp.MustCompile(`(?m)^(Files|Run|Node): (.+)$`)
)

// failureAlerts are the failures among hits similar to request, whose
// files the Librarian found to be files.
func failureAlerts(hits []*archivalistv1.EntryHit, request string, files []string) []*architectv1.FailureAlert {
	reqWords := wordsOf(request)
	reqFiles := append(slices.Clone(files), alertPath.FindAllString(request, -1)...)
	var out []*architectv1.FailureAlert
	for _, h := range hits {
		e := h.GetEntry()
		fields := recordFields(e.GetContent())
		var reason string
		if shared := sharedFiles(strings.Split(fields["Files"], ", "), reqFiles); len(shared) > 0 {
			reason = "touches the same files: " + strings.Join(shared[:min(len(shared), maxReasonEntries)], ", ")
		} else if shared := sharedWords(wordsOf(e.GetTitle()+" "+e.GetContent()), reqWords); len(shared) >= minSharedWords {
			reason = "on the same subject: " + strings.Join(shared[:min(len(shared), maxReasonEntries)], ", ")
		}
		if reason == "" {
			continue
		}
		out = append(out, &architectv1.FailureAlert{Entry: e.GetName(), Title: e.GetTitle(), Reason: reason,
			CreateTime: e.GetCreateTime(), Run: fields["Run"], Node: fields["Node"]})
		if len(out) == maxAlerts {
			break
		}
	}
	return out
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
	return line + ") " + a.GetReason() + "; do not repeat it"
}

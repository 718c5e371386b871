package architect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
)

// alertNow is when the tests' alerts are built: a day after their
// failures.
var alertNow = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func failureHit(id, title, content string) *archivalistv1.EntryHit {
	return failureHitAt(id, title, content, time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC))
}

func failureHitAt(id, title, content string, at time.Time) *archivalistv1.EntryHit {
	return &archivalistv1.EntryHit{Entry: &archivalistv1.Entry{Name: "entries/" + id, Id: id, Category: "failure", Title: title,
		Content: content, CreateTime: timestamppb.New(at)}}
}

// Spec E-09: a failure of the same area is alerted on the plan, with what
// makes it similar; an unrelated one is not.
func TestFailureAlerts(t *testing.T) {
	t.Parallel()
	byFile := failureHit("a", "Failed: Rewrite the parser (runs/r1, node parse)",
		"Task Rewrite the parser failed after attempt 1.\n\nRun: runs/r1\nNode: parse\nFiles: pkg/calc/calc.go, pkg/calc/lex.go\n")
	byWords := failureHit("b", "Failed: tokenizer overflow in lexer", "Run: runs/r2\nNode: lex\nThe tokenizer overflowed its lexer buffer.")
	unrelated := failureHit("c", "Failed: deploy script", "Run: runs/r3\nNode: deploy\nFiles: deploy.sh\n")

	alerts := failureAlerts([]*archivalistv1.EntryHit{byFile, byWords, unrelated}, "Fix the tokenizer of the lexer in calc.go", nil, alertNow)
	require.Len(t, alerts, 2)
	require.Equal(t, "entries/a", alerts[0].GetEntry())
	require.Equal(t, "runs/r1", alerts[0].GetRun())
	require.Equal(t, "parse", alerts[0].GetNode())
	require.Equal(t, "touches the same files: pkg/calc/calc.go", alerts[0].GetReason())
	require.Equal(t, "entries/b", alerts[1].GetEntry())
	require.Equal(t, "on the same subject: tokenizer, lexer", alerts[1].GetReason())

	// Files the Librarian found count as the request's.
	alerts = failureAlerts([]*archivalistv1.EntryHit{byFile}, "make sums exact", []string{"pkg/calc/lex.go"}, alertNow)
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].GetReason(), "pkg/calc/lex.go")

	notes := alertNotes(alerts)
	require.Equal(t, []string{`similar failure: "Failed: Rewrite the parser (runs/r1, node parse)" (entries/a, 2026-11-20 09:00 UTC) ` +
		"touches the same files: pkg/calc/lex.go; do not repeat it"}, notes)
	text := consultationText("repositories/x", &architectv1.PlanConsultation{FailureAlerts: alerts})
	require.Contains(t, text, "SIMILAR FAILURE DETECTED")
	require.Empty(t, failureAlerts(nil, "anything", nil, alertNow))
}

// Spec G-25: the failures of one area (the same files, or the same error
// signature) are one alert, the newest, which counts those of the last 7
// days; the most recurrent area is alerted first, and a failure a retry
// recovered from says so.
func TestFailureAlertsCountRecurrence(t *testing.T) {
	t.Parallel()
	day := func(n int) time.Time { return alertNow.Add(-time.Duration(n) * 24 * time.Hour) }
	parser := func(run, sig string) string {
		return "Run: runs/" + run + "\nNode: parse\nSignature: " + sig + "\nFiles: pkg/calc/parser.go\n"
	}
	hits := []*archivalistv1.EntryHit{
		failureHitAt("once", "Failed: lexer buffer", "Run: runs/r0\nNode: lex\nFiles: pkg/calc/lex.go\n", day(0)),
		failureHitAt("p1", "Failed: parser", parser("r1", "parser.go:#: undefined: parse"), day(2)),
		// The same error in another file set: the same area by its signature.
		failureHitAt("p2", "Failed: parser again", "Run: runs/r2\nNode: parse\nSignature: parser.go:#: undefined: parse\n"+
			"Files: pkg/calc/parser.go, pkg/calc/ast.go\n", day(1)),
		failureHitAt("p3", "Failed, then recovered: parser", parser("r3", "parser.go:#: undefined: parse")+
			"Recovered: attempt 2 succeeded\nOutcome: recovered\n", day(1).Add(time.Hour)),
		// Outside the window: grouped, not counted.
		failureHitAt("p0", "Failed: parser of old", parser("r9", "parser.go:#: syntax error"), day(12)),
	}
	alerts := failureAlerts(hits, "Fix the parser in pkg/calc/parser.go and pkg/calc/lex.go", nil, alertNow)
	require.Len(t, alerts, 2)
	top := alerts[0]
	require.Equal(t, "entries/p3", top.GetEntry(), "the newest failure of the area")
	require.EqualValues(t, 3, top.GetRecentFailures())
	require.True(t, top.GetRecovered())
	require.Equal(t, day(1).Add(time.Hour), top.GetLastFailureTime().AsTime())
	require.Equal(t, "runs/r3", top.GetRun())
	require.Contains(t, alertLine(top), "; failed 3 times in the last 7 days, last 2026-11-20 10:00 UTC; recovered on retry")
	require.Equal(t, "entries/once", alerts[1].GetEntry())
	require.EqualValues(t, 1, alerts[1].GetRecentFailures())
	require.False(t, alerts[1].GetRecovered())
	require.NotContains(t, alertLine(alerts[1]), "times in the last")
}

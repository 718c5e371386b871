package architect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
)

func failureHit(id, title, content string) *archivalistv1.EntryHit {
	return &archivalistv1.EntryHit{Entry: &archivalistv1.Entry{Name: "entries/" + id, Id: id, Category: "failure", Title: title,
		Content: content, CreateTime: timestamppb.New(time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC))}}
}

// Spec E-09: a failure of the same area is alerted on the plan, with what
// makes it similar; an unrelated one is not.
func TestFailureAlerts(t *testing.T) {
	t.Parallel()
	byFile := failureHit("a", "Failed: Rewrite the parser (runs/r1, node parse)",
		"Task Rewrite the parser failed after attempt 1.\n\nRun: runs/r1\nNode: parse\nFiles: pkg/calc/calc.go, pkg/calc/lex.go\n")
	byWords := failureHit("b", "Failed: tokenizer overflow in lexer", "Run: runs/r2\nNode: lex\nThe tokenizer overflowed its lexer buffer.")
	unrelated := failureHit("c", "Failed: deploy script", "Run: runs/r3\nNode: deploy\nFiles: deploy.sh\n")

	alerts := failureAlerts([]*archivalistv1.EntryHit{byFile, byWords, unrelated}, "Fix the tokenizer of the lexer in calc.go", nil)
	require.Len(t, alerts, 2)
	require.Equal(t, "entries/a", alerts[0].GetEntry())
	require.Equal(t, "runs/r1", alerts[0].GetRun())
	require.Equal(t, "parse", alerts[0].GetNode())
	require.Equal(t, "touches the same files: pkg/calc/calc.go", alerts[0].GetReason())
	require.Equal(t, "entries/b", alerts[1].GetEntry())
	require.Equal(t, "on the same subject: tokenizer, lexer", alerts[1].GetReason())

	// Files the Librarian found count as the request's.
	alerts = failureAlerts([]*archivalistv1.EntryHit{byFile}, "make sums exact", []string{"pkg/calc/lex.go"})
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].GetReason(), "pkg/calc/lex.go")

	notes := alertNotes(alerts)
	require.Equal(t, []string{`similar failure: "Failed: Rewrite the parser (runs/r1, node parse)" (entries/a, 2026-11-20 09:00 UTC) ` +
		"touches the same files: pkg/calc/lex.go; do not repeat it"}, notes)
	text := consultationText("repositories/x", &architectv1.PlanConsultation{FailureAlerts: alerts})
	require.Contains(t, text, "SIMILAR FAILURE DETECTED")
	require.Empty(t, failureAlerts(nil, "anything", nil))
}

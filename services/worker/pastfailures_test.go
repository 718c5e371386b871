package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// Spec E-09: the Engineer's brief names the failures recorded on its
// files, bounded; failures on other files are left out.
func TestPastFailuresSection(t *testing.T) {
	t.Parallel()
	hit := func(id, files, errText string) *archivalistv1.EntryHit {
		return &archivalistv1.EntryHit{Entry: &archivalistv1.Entry{Name: "entries/" + id, Title: "Failed: " + id,
			CreateTime: timestamppb.New(time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)),
			Content:    "Task " + id + " failed after attempt 1 (exit 2, error tier permanent).\n\nFiles: " + files + "\n\n## Error\n\n" + errText + "\n\n## Task\n\nthe prompt"}}
	}
	hits := []*archivalistv1.EntryHit{
		hit("a", "pkg/calc/calc.go", "undefined: Parse"),
		hit("b", "deploy.sh", "no such host"),
		hit("c", "README.md, pkg/calc/calc.go", strings.Repeat("x", 5000)),
	}
	files := taskFiles(&orchestratorv1.Node{Files: []string{"pkg/calc/calc.go"}, Edits: []*orchestratorv1.FileEdit{{Path: "calc_test.go"}}})
	require.Equal(t, []string{"pkg/calc/calc.go", "calc_test.go"}, files)
	s := pastFailuresSection(hits, files)
	require.Contains(t, s, "## Past failures on these files")
	require.Contains(t, s, "- Failed: a (entries/a, 2026-11-20):")
	require.Contains(t, s, "Error: undefined: Parse")
	require.NotContains(t, s, "entries/b")
	require.Contains(t, s, "entries/c")
	require.NotContains(t, s, "the prompt")
	require.Less(t, len(s), 2*maxPastFailureBytes+300, "bounded")
	require.Empty(t, pastFailuresSection(hits[1:2], files))

	// A failure a retry recovered from, whose command said nothing but
	// its output: its first line says so, its signature is the cause.
	recovered := &archivalistv1.EntryHit{Entry: &archivalistv1.Entry{Name: "entries/r", Title: "Failed, then recovered: r",
		CreateTime: timestamppb.New(time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)),
		Content: "Task r failed at attempt 1 (exit 2, error tier permanent); attempt 2 succeeded.\n\nRecovered: attempt 2 succeeded\n" +
			"Signature: calc.go:#: undefined: parse\nFiles: pkg/calc/calc.go\n\n## Command\n\nmake"}}
	s = pastFailuresSection([]*archivalistv1.EntryHit{recovered}, files)
	require.Contains(t, s, "attempt 2 succeeded. Cause: calc.go:#: undefined: parse")
}

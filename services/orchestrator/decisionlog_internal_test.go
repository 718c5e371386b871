package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// A task's decision-log entry (spec H-07) says what its report says, and
// "none" for what it left out; a task without a report still gets one.
func TestDecisionSection(t *testing.T) {
	t.Parallel()
	ok := decisionSection("n1", 1, nodeResult{State: stateSucceeded}, &orchestratorv1.TaskReport{Implemented: "the parser", FilesChanged: []string{"a.go"},
		Briefing: "attempt 1"}, 3)
	require.Contains(t, ok, "## Task n1 (attempt 1): succeeded\n")
	require.Contains(t, ok, "- Implemented: the parser\n")
	require.Contains(t, ok, "- Files changed: a.go\n")
	require.Contains(t, ok, "- Tested: none\n")
	require.Contains(t, ok, "- Git calls: 3\n")
	require.Contains(t, ok, "- Briefing: attempt 1\n")

	partial := decisionSection("n1", 2, nodeResult{State: stateFailed}, &orchestratorv1.TaskReport{Implemented: "half of it", Concerns: "slow"}, 0)
	require.Contains(t, partial, "## Task n1 (attempt 2): failed\n")
	require.Contains(t, partial, "- Concerns: slow\n")
	require.NotContains(t, partial, "Git calls")

	none := decisionSection("n1", 4, nodeResult{State: stateSucceeded}, nil, 0)
	require.Contains(t, none, "- Implemented: none\n")
	require.Contains(t, none, "- Files changed: none\n")
}

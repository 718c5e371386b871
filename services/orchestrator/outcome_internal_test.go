package orchestrator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// A run ends NO_CHANGES only when a node changed nothing and none
// succeeded with a patch; command-only runs stay SUCCEEDED.
func TestEndStateOfARunWithoutFailures(t *testing.T) {
	t.Parallel()
	unchanged := []noChange{{node: "a", reason: "no model"}}
	require.Equal(t, stateSucceeded, runChanges{nodes: 2}.endState(), "commands only")
	require.Equal(t, stateNoChanges, runChanges{nodes: 2, unchanged: unchanged}.endState())
	require.Equal(t, stateSucceeded, runChanges{nodes: 2, unchanged: unchanged, changed: true}.endState())

	c := changesOf([]nodeRow{{NodeID: "a", State: stateNoChanges, Error: "no model"}, {NodeID: "b", State: stateSucceeded, Patch: "diff"},
		{NodeID: "c", State: stateSucceeded}})
	require.Equal(t, runChanges{nodes: 3, unchanged: unchanged, changed: true}, c)
	require.Equal(t, "run runs/r succeeded; 1 of 3 nodes changed nothing: a: no model", completionText("r", stateSucceeded, c))
	require.Equal(t, "run runs/r succeeded", completionText("r", stateSucceeded, runChanges{nodes: 3}))
	require.Equal(t, "run runs/r failed", completionText("r", stateFailed, c))
	require.Empty(t, outcomeSection(stateFailed, c), "a failed run's log says nothing of it")

	var many runChanges
	for i := range 60 {
		many.unchanged = append(many.unchanged, noChange{node: fmt.Sprintf("n%d", i), reason: strings.Repeat("why\n", 200)})
	}
	line := many.reasons(maxEventReasons)
	require.True(t, strings.HasSuffix(line, "; and 50 more"), line)
	require.NotContains(t, line, "\n")
	require.Contains(t, outcomeSection(stateNoChanges, many), "- and 10 more\n")
	one := many.reasons(1)
	require.True(t, strings.HasPrefix(one, "n0: why why") && strings.HasSuffix(one, "; and 59 more"), one)
	require.Less(t, len(one), maxReasonBytes+50, "each reason is bounded")
	require.Equal(t, "x: no reason given", runChanges{unchanged: []noChange{{node: "x"}}}.reasons(5))
}

// The workflow checkpoint lists a node that changed nothing as done, with
// why; it does not hold the current layer back.
func TestWorkflowTextOfNoChanges(t *testing.T) {
	t.Parallel()
	text := workflowText("r1", stateNoChanges, []workflowNode{
		{id: "a", state: stateNoChanges, err: "no language model is configured", attempt: 1},
		{id: "b", layer: 1, state: stateSucceeded, attempt: 1},
	})
	require.Contains(t, text, "# Workflow of runs/r1: no_changes")
	require.Contains(t, text, "Completed tasks (2):\n- a: changed nothing: no language model is configured\n- b\n")
	require.Contains(t, text, "- Current layer: 2 of 2")
	require.NotContains(t, text, "Blocked tasks")
}

// A node briefed after an attempt that changed nothing is told so.
func TestRetryBriefingAfterNoChanges(t *testing.T) {
	t.Parallel()
	b := retryBriefing(&orchestratorv1.Node{Prompt: "fix it"}, 2, []*orchestratorv1.AttemptSummary{{Attempt: 1, State: stateNoChanges,
		Error: "the model finished without an edit"}})
	require.Equal(t, "Attempt 1 changed nothing: the model finished without an edit.", b.GetFailureAnalysis())
	require.Contains(t, b.GetSuggestedApproach(), "Make the change")
}

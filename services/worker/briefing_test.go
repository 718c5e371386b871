package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
)

// The Engineer of a retried task reads what happened before (spec B-38).
func TestEngineerPromptCarriesTheRetryBriefing(t *testing.T) {
	t.Parallel()
	b := &orchestratorv1.RetryBriefing{AttemptNumber: 2, FailureAnalysis: "Attempt 1 exited with 2: parse error.",
		SuggestedApproach: "Change the approach.", AvoidPatterns: []string{"what led to: parse error"},
		PriorAttempts: []*orchestratorv1.AttemptSummary{{Attempt: 1, State: "FAILED", ExitCode: 2, ErrorTier: "permanent", Error: "parse error"}}}
	task := &taskv1.TaskDispatch{NodeId: "n"}
	p := taskBrief(task, &orchestratorv1.Node{Prompt: "fix the parser", RetryBriefing: b})
	require.Contains(t, p, "## This is attempt 2: what happened before\n\nAttempt 1 exited with 2: parse error.\n\nSuggested approach: Change the approach.\n")
	require.Contains(t, p, "- attempt 1: failed, exit 2, permanent: parse error\n")
	require.Contains(t, p, "Avoid:\n- what led to: parse error\n")
	require.NotContains(t, taskBrief(task, &orchestratorv1.Node{Prompt: "fix the parser"}), "This is attempt")
	require.Equal(t, "attempt 2 after 1 prior: Attempt 1 exited with 2: parse error. Change the approach.", briefingLine(b))
	require.Empty(t, briefingLine(nil))
}

package orchestrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

func failed(attempt, exit int32, timedOut bool, msg string) *orchestratorv1.AttemptSummary {
	a := &orchestratorv1.AttemptSummary{Attempt: attempt, State: stateFailed, ExitCode: exit, TimedOut: timedOut, Error: msg,
		Duration: durationpb.New(1500 * time.Millisecond)}
	a.ErrorTier = errorTier(a)
	return a
}

// A retry is briefed on its prior attempts (spec B-38): the last failure,
// by tier, what to try instead and what not to repeat.
func TestRetryBriefing(t *testing.T) {
	t.Parallel()
	n := &orchestratorv1.Node{Id: "n", Prompt: "make the parser faster"}
	require.Nil(t, retryBriefing(n, 1, nil), "a first attempt gets none")
	require.Nil(t, retryBriefing(n, 2, nil), "nor a retry with no reported attempt")

	b := retryBriefing(n, 3, []*orchestratorv1.AttemptSummary{failed(1, 2, false, "parse error at line 3"), failed(2, 2, false, "parse error at line 3")})
	require.Equal(t, "make the parser faster", b.GetOriginalRequest())
	require.Equal(t, int32(3), b.GetAttemptNumber())
	require.Len(t, b.GetPriorAttempts(), 2)
	require.Equal(t, "Attempt 2 exited with 2: parse error at line 3.", b.GetFailureAnalysis())
	require.Contains(t, b.GetSuggestedApproach(), "Change the approach")
	require.Equal(t, []string{"the approach of attempts 1 to 2: it failed the same way 2 times", "what led to: parse error at line 3"}, b.GetAvoidPatterns())

	for _, tt := range []struct {
		a              *orchestratorv1.AttemptSummary
		tier, analysis string
	}{
		{failed(1, -1, true, ""), tierTransient, "Attempt 1 timed out after 1.5s."},
		{failed(1, 127, false, "sh: frob: not found"), tierUserFixable, "Attempt 1 could not run its command (exited with 127: sh: frob: not found)."},
		{failed(1, 1, false, "HTTP 429 Too Many Requests"), tierExternal, "Attempt 1 failed outside the task (exited with 1: HTTP 429 Too Many Requests)."},
		{failed(1, 3, false, ""), tierPermanent, "Attempt 1 exited with 3."},
	} {
		require.Equal(t, tt.tier, tt.a.GetErrorTier())
		b := retryBriefing(&orchestratorv1.Node{Command: "make"}, 2, []*orchestratorv1.AttemptSummary{tt.a})
		require.Equal(t, "make", b.GetOriginalRequest(), "a node without a prompt is briefed with its command")
		require.Equal(t, tt.analysis, b.GetFailureAnalysis())
		require.NotEmpty(t, b.GetSuggestedApproach())
		require.Empty(t, b.GetAvoidPatterns(), "one failure without an error message: nothing to avoid")
	}
}

func TestDecisionSectionNamesTheBriefing(t *testing.T) {
	t.Parallel()
	s := decisionSection("n1", 2, nodeResult{State: stateSucceeded}, &orchestratorv1.TaskReport{Briefing: "attempt 2 after 1 prior: Attempt 1 exited with 3."}, 0)
	require.Contains(t, s, "- Briefing: attempt 2 after 1 prior: Attempt 1 exited with 3.\n")
	require.NotContains(t, decisionSection("n1", 1, nodeResult{State: stateSucceeded}, &orchestratorv1.TaskReport{}, 0), "Briefing")
}

package orchestrator

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// Error tiers of a failed attempt (spec B-38, B-40).
const (
	tierTransient   = "transient"
	tierUserFixable = "user_fixable"
	tierExternal    = "external"
	tierPermanent   = "permanent"
)

// externalFailure is the wording of a failure outside the task: a rate
// limit or a service that did not answer.
var externalFailure = regexp.MustCompile(`(?i)\b(429|rate[\s-]*limit\w*|too many requests|503|service unavailable|connection refused|temporar\w+ unavailable)\b`)

// errorTier classifies a failed attempt.
func errorTier(a *orchestratorv1.AttemptSummary) string {
	switch {
	case a.GetTimedOut():
		return tierTransient
	case a.GetExitCode() == 126 || a.GetExitCode() == 127:
		return tierUserFixable
	case externalFailure.MatchString(a.GetError()):
		return tierExternal
	}
	return tierPermanent
}

// maxBriefingError bounds each error quoted in a briefing.
const maxBriefingError = 200

// priorAttempts loads the reported attempts of nodes, oldest first.
func priorAttempts(ctx context.Context, q querier, tenant, runID string, nodeIDs []string) (map[string][]*orchestratorv1.AttemptSummary, error) {
	rows, err := q.Query(ctx, `SELECT node_id, attempt, state, exit_code, timed_out, error, duration_us, end_time
		FROM attempts WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND state <> 'HANDED_OFF'
		ORDER BY node_id, attempt`, tenant, runID, nodeIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]*orchestratorv1.AttemptSummary{}
	for rows.Next() {
		var (
			node   string
			a      orchestratorv1.AttemptSummary
			durUS  int64
			ending time.Time
		)
		if err := rows.Scan(&node, &a.Attempt, &a.State, &a.ExitCode, &a.TimedOut, &a.Error, &durUS, &ending); err != nil {
			return nil, err
		}
		a.Error = truncateMiddle(a.Error, maxBriefingError)
		a.Duration, a.EndTime = durationpb.New(time.Duration(durUS)*time.Microsecond), timestamppb.New(ending)
		if a.State != stateSucceeded && a.State != stateNoChanges {
			a.ErrorTier = errorTier(&a)
		}
		out[node] = append(out[node], &a)
	}
	return out, rows.Err()
}

// retryBriefing tells attempt number attempt of n what its prior attempts
// did (spec B-38): how the last one failed, what to try instead, and what
// not to repeat. It is nil for a first attempt or when no prior attempt was
// reported (a task lost with its worker leaves none).
func retryBriefing(n *orchestratorv1.Node, attempt int32, prior []*orchestratorv1.AttemptSummary) *orchestratorv1.RetryBriefing {
	if attempt <= 1 || len(prior) == 0 {
		return nil
	}
	b := &orchestratorv1.RetryBriefing{OriginalRequest: n.GetPrompt(), AttemptNumber: attempt, PriorAttempts: prior}
	if b.OriginalRequest == "" {
		b.OriginalRequest = n.GetCommand()
	}
	last := prior[len(prior)-1]
	same := 0
	for _, a := range prior {
		if a.GetState() != stateSucceeded && a.GetExitCode() == last.GetExitCode() && a.GetError() == last.GetError() && a.GetTimedOut() == last.GetTimedOut() {
			same++
		}
	}
	what := fmt.Sprintf("exited with %d", last.GetExitCode())
	if last.GetError() != "" {
		what += ": " + last.GetError()
	}
	switch tier := last.GetErrorTier(); {
	case last.GetState() == stateNoChanges:
		b.FailureAnalysis = fmt.Sprintf("Attempt %d changed nothing: %s.", last.GetAttempt(), strings.TrimSuffix(last.GetError(), "."))
		b.SuggestedApproach = "Make the change the task asks for: an attempt that edits no file delivers nothing."
	case tier == tierTransient:
		b.FailureAnalysis = fmt.Sprintf("Attempt %d timed out after %s.", last.GetAttempt(), last.GetDuration().AsDuration().Round(time.Millisecond))
		b.SuggestedApproach = "Do the same work in smaller steps or faster; the approach itself did not fail."
	case tier == tierUserFixable:
		b.FailureAnalysis = fmt.Sprintf("Attempt %d could not run its command (%s).", last.GetAttempt(), what)
		b.SuggestedApproach = "Check that the command exists and is executable in the workspace; the same command will fail the same way."
	case tier == tierExternal:
		b.FailureAnalysis = fmt.Sprintf("Attempt %d failed outside the task (%s).", last.GetAttempt(), what)
		b.SuggestedApproach = "Nothing in the task needs to change: the service it depends on was limited or unavailable."
	case tier == "":
		b.FailureAnalysis = fmt.Sprintf("Attempt %d succeeded and the node was run again.", last.GetAttempt())
		b.SuggestedApproach = "Build on the earlier attempt's result."
	default:
		b.FailureAnalysis = fmt.Sprintf("Attempt %d %s.", last.GetAttempt(), what)
		b.SuggestedApproach = "Change the approach: running the same steps again is unlikely to pass."
	}
	if same > 1 {
		b.AvoidPatterns = append(b.AvoidPatterns, fmt.Sprintf("the approach of attempts 1 to %d: it failed the same way %d times", len(prior), same))
	}
	for _, a := range prior {
		if a.GetState() != stateSucceeded && a.GetErrorTier() == tierPermanent && a.GetError() != "" {
			p := "what led to: " + a.GetError()
			if !strings.Contains(strings.Join(b.AvoidPatterns, "\n"), p) {
				b.AvoidPatterns = append(b.AvoidPatterns, p)
			}
		}
	}
	return b
}

package worker

import (
	"fmt"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// briefingLine is a retry briefing in a line, for the task's report and so
// the run's decision log (spec B-38); empty for a first attempt.
func briefingLine(b *orchestratorv1.RetryBriefing) string {
	if b == nil {
		return ""
	}
	return fmt.Sprintf("attempt %d after %d prior: %s %s", b.GetAttemptNumber(), len(b.GetPriorAttempts()),
		b.GetFailureAnalysis(), b.GetSuggestedApproach())
}

// briefingSection is a retry briefing as the Engineer's prompt gives it.
func briefingSection(b *orchestratorv1.RetryBriefing) string {
	if b == nil {
		return ""
	}
	var s strings.Builder
	fmt.Fprintf(&s, "\n## This is attempt %d: what happened before\n\n%s\n\nSuggested approach: %s\n", b.GetAttemptNumber(),
		b.GetFailureAnalysis(), b.GetSuggestedApproach())
	for _, a := range b.GetPriorAttempts() {
		line := fmt.Sprintf("- attempt %d: %s, exit %d", a.GetAttempt(), strings.ToLower(a.GetState()), a.GetExitCode())
		if a.GetTimedOut() {
			line += ", timed out"
		}
		if a.GetErrorTier() != "" {
			line += ", " + a.GetErrorTier()
		}
		if a.GetError() != "" {
			line += ": " + a.GetError()
		}
		s.WriteString(line + "\n")
	}
	if len(b.GetAvoidPatterns()) > 0 {
		s.WriteString("\nAvoid:\n")
		for _, p := range b.GetAvoidPatterns() {
			s.WriteString("- " + p + "\n")
		}
	}
	return s.String()
}

// Package pipeline is the vocabulary the Orchestrator and the workers share
// about a node's pipeline (spec F-08..F-23) beyond the task messages
// themselves: how a pipeline is named, how a handoff from one pipeline to
// the next reads, and the states of a run's session-level check (F-06).
package pipeline

import (
	"fmt"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// States of a run's session-level check (orchestratorv1.SessionCheck.state).
const (
	CheckPending = "pending"
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckError   = "error"
)

// ID names one pipeline of a node, that is one attempt:
// "<run>/<node>#<attempt>".
func ID(runID, nodeID string, attempt int32) string {
	return fmt.Sprintf("%s/%s#%d", runID, nodeID, attempt)
}

// HandoffText renders a handoff as markdown, for the Archivalist and for
// the Engineer that carries on.
func HandoffText(h *orchestratorv1.PipelineHandoff) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Pipeline handoff %d\n\n", h.GetHandoffIndex())
	fmt.Fprintf(&b, "- Old pipeline: %s\n- Reason: %s\n", h.GetOldPipelineId(), h.GetReason())
	if h.GetContextWindowTokens() > 0 {
		fmt.Fprintf(&b, "- Context used: %.0f%% of %d tokens\n", 100*h.GetContextUsage(), h.GetContextWindowTokens())
	}
	e := h.GetEngineer()
	b.WriteString("\n## Engineer\n")
	if e.GetOriginalPrompt() != "" {
		b.WriteString("\nOriginal request: " + e.GetOriginalPrompt() + "\n")
	}
	mdList(&b, "Accomplished", e.GetAccomplished())
	mdList(&b, "Files changed", e.GetFilesChanged())
	mdList(&b, "Remaining", e.GetRemaining())
	mdList(&b, "Context notes", e.GetContextNotes())
	b.WriteString("\n## Inspector\n")
	InspectorText(&b, h.GetInspector())
	b.WriteString("\n## Tester\n")
	TesterText(&b, h.GetTester())
	return b.String()
}

// InspectorText renders the Inspector's state.
func InspectorText(b *strings.Builder, in *orchestratorv1.InspectorHandoff) {
	state := in.GetValidationState()
	if state == "" {
		state = "-"
	}
	fmt.Fprintf(b, "\nValidation: %s\n", state)
	mdList(b, "Checks performed", in.GetChecksPerformed())
	mdList(b, "Fixes completed", in.GetFixesCompleted())
	mdList(b, "Fixes remaining", in.GetFixesRemaining())
}

// TesterText renders the Tester's state.
func TesterText(b *strings.Builder, t *orchestratorv1.TesterHandoff) {
	if r := t.GetTestResults(); r != nil {
		fmt.Fprintf(b, "\nLast run: %s, %d passed, %d failed, %d skipped\n", r.GetFrameworkId(), r.GetPassed(), r.GetFailed(), r.GetSkipped())
	}
	mdList(b, "Tests created", t.GetTestsCreated())
	mdList(b, "Failures", t.GetFailureDescs())
	mdList(b, "Coverage needed", t.GetCoverageNeeded())
}

// mdList renders a titled list; an empty one is left out.
func mdList(b *strings.Builder, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n", title)
	for _, x := range items {
		b.WriteString("- " + x + "\n")
	}
}

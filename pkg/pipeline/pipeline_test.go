package pipeline_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/pipeline"
)

func TestID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "r1/n1#3", pipeline.ID("r1", "n1", 3))
}

func TestHandoffText(t *testing.T) {
	t.Parallel()
	h := &orchestratorv1.PipelineHandoff{
		OldPipelineId: pipeline.ID("r1", "n1", 2), Reason: "context_threshold", HandoffIndex: 2,
		ContextUsage: 0.95, ContextWindowTokens: 1000,
		Engineer:  &orchestratorv1.EngineerHandoff{OriginalPrompt: "add Mul", Accomplished: []string{"wrote calc.go"}},
		Inspector: &orchestratorv1.InspectorHandoff{ValidationState: "failed", FixesRemaining: []string{"calc.go:3: unused"}},
		Tester: &orchestratorv1.TesterHandoff{TestResults: &orchestratorv1.TestResult{FrameworkId: "go", Passed: 2, Failed: 1},
			FailureDescs: []string{"TestMul"}},
	}
	text := pipeline.HandoffText(h)
	for _, want := range []string{
		"# Pipeline handoff 2\n",
		"- Old pipeline: r1/n1#2\n- Reason: context_threshold\n",
		"- Context used: 95% of 1000 tokens\n",
		"Original request: add Mul\n",
		"\nAccomplished:\n- wrote calc.go\n",
		"\nValidation: failed\n",
		"\nFixes remaining:\n- calc.go:3: unused\n",
		"\nLast run: go, 2 passed, 1 failed, 0 skipped\n",
		"\nFailures:\n- TestMul\n",
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "Files changed", "an empty list is left out")

	var b strings.Builder
	pipeline.InspectorText(&b, nil)
	require.Equal(t, "\nValidation: -\n", b.String())
}

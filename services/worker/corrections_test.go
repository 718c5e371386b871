package worker

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// A correction that contradicts a key constraint is withheld from the
// Engineer, recorded as a concern, and still fails the stage (spec A-12,
// acceptance behaviour 9).
func TestPipelineWithholdsCorrectionsAConstraintRulesOut(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	node := &orchestratorv1.Node{Id: "n", Pipeline: true, MaxLoops: 1, KeyConstraints: []string{"never change the format"},
		Edits: []*orchestratorv1.FileEdit{{Path: "calc.go", Content: "package calc\nfunc Add(a, b int) int {return a+b}\n"}}}
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	p, r := pipelineOf(t, out)
	require.Equal(t, "failed", p.GetState(), "stdout %s", out.msg.GetStdout())
	require.Len(t, p.GetFeedback(), 1)
	require.Contains(t, p.GetFeedback()[0], "inspector: 1 correction(s) withheld")
	require.NotContains(t, p.GetFeedback()[0], "calc.go: format", "the blocked correction is not sent")
	require.Contains(t, r.GetConcerns(), `calc.go: format: not gofmt-formatted (contradicts the constraint "never change the format")`)
	require.Contains(t, out.msg.GetStdout(), "blocked by the validation gate")
}

// A correction that works against a success criterion is sent with a
// warning (acceptance behaviour 10); one that does not is sent as it is.
func TestPipelineFlagsCorrectionsAgainstACriterion(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	node := &orchestratorv1.Node{Id: "n", Pipeline: true, MaxLoops: 1,
		SuccessCriteria: []*messagev1.SuccessCriterion{{Criterion: "Add returns the sum", Source: messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT}},
		Edits: []*orchestratorv1.FileEdit{
			{Path: "calc.go", Content: "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n"},
			{Path: "calc_test.go", Content: "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"Add does not return the sum\")\n\t}\n}\n\nfunc TestAddZero(t *testing.T) {\n\tif Add(0, 1) != 1 {\n\t\tt.Fatal(\"wrong\")\n\t}\n}\n"},
		}}
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	p, _ := pipelineOf(t, out)
	require.Equal(t, "failed", p.GetState(), "stdout %s", out.msg.GetStdout())
	require.Contains(t, p.GetFeedback()[0], `[FLAGGED: may work against "Add returns the sum"; root cause confidence MEDIUM] test TestAdd failed`)
	require.Contains(t, p.GetFeedback()[0], "\ntest TestAddZero failed (calc_test.go:13): wrong")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.corrections.WithLabelValues("tester", "FLAGGED")))
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.corrections.WithLabelValues("tester", "PASSED")))
}

package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/scriptmodel"
)

func handoffOf(t *testing.T, out taskOutcome) *orchestratorv1.PipelineHandoff {
	t.Helper()
	require.NotNil(t, out.msg.GetHandoff(), "the result carries no handoff")
	return out.msg.GetHandoff()
}

// Spec F-21/F-23: the Engineer keeps one conversation across its loops
// and, once a turn's prompt fills 95% of its context window, hands the
// pipeline's state on instead of going on.
func TestEngineerHandsOffNearTheEndOfItsContextWindow(t *testing.T) {
	g, srv := scriptGate(t, scriptmodel.Script{Match: "Make Add return the sum", Turns: []scriptmodel.Turn{
		call("read_file", map[string]any{"path": "calc.go"}),
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a - b", "new_string": "a * b"}),
		call("read_file", map[string]any{"path": "calc.go"}),
		call("finish", map[string]any{"summary": "never reached"}),
	}})
	repo, base := brokenRepo(t)
	node := &orchestratorv1.Node{Id: "fix-add", Name: "fix Add", Pipeline: true, Prompt: "Make Add return the sum of its arguments.",
		DoneWhen: "TestAdd passes", Guidance: []string{"keep the signature"}}
	d := repoTask(t, repo, base, node)
	d.TenantId, d.SessionId = "t1", "s1"
	// A window every prompt fills: the handoff comes once the Engineer has
	// made the calls a fresh pipeline makes before it may hand off.
	const window = 200
	s := pipelineService(t)
	s.cfg.EngineerContextTokens = window
	s.SetModel(g)

	out, cancelled := s.runTask(context.Background(), "engineer", d)
	require.False(t, cancelled)
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError()+"\n"+out.msg.GetStdout())
	p, r := pipelineOf(t, out)
	require.Equal(t, pipeHandedOff, p.GetState())
	require.Equal(t, int32(1), p.GetLoops())
	require.Len(t, srv.Requests(), 4, "the fourth turn's call is not made")
	require.Contains(t, out.msg.GetStdout(), "handing the pipeline's state to a fresh pipeline (handoff 1)")
	require.Contains(t, r.GetImplemented(), "handed off to a fresh pipeline after 1 loop(s) (engineer_context_95%)")
	require.Contains(t, out.msg.GetPatch(), "return a * b", "the old pipeline's files go along")
	require.Empty(t, out.msg.GetNoChangesReason())

	h := handoffOf(t, out)
	require.Equal(t, "r1/fix-add#1", h.GetOldPipelineId())
	require.Equal(t, "engineer_context_95%", h.GetReason())
	require.Equal(t, int32(1), h.GetHandoffIndex())
	require.Equal(t, int64(window), h.GetContextWindowTokens())
	require.GreaterOrEqual(t, h.GetContextUsage(), 0.95)
	e := h.GetEngineer()
	require.Equal(t, node.GetPrompt(), e.GetOriginalPrompt())
	require.Len(t, e.GetAccomplished(), 1)
	require.True(t, strings.HasPrefix(e.GetAccomplished()[0], "loop 1: wrote calc.go"), e.GetAccomplished()[0])
	require.Equal(t, []string{"calc.go"}, e.GetFilesChanged())
	require.Contains(t, e.GetRemaining(), "done when: TestAdd passes")
	require.Contains(t, e.GetContextNotes(), "the user's guidance: keep the signature")
	require.Equal(t, "not_run", h.GetInspector().GetValidationState(), out.msg.GetStdout())
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.handoffs.WithLabelValues(triggerContext)))
}

// The fresh pipeline starts from the old one's files and is told what it
// did; it does not apply the node's own edits again.
func TestPipelineCarriesOnFromAHandoff(t *testing.T) {
	repo, base := brokenRepo(t)
	// The old pipeline's patch: Add multiplies.
	startPatch := func() string {
		s := pipelineService(t)
		node := &orchestratorv1.Node{Id: "w", Edits: []*orchestratorv1.FileEdit{{Path: "calc.go",
			Content: "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a * b }\n"}}}
		out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
		require.Contains(t, out.msg.GetPatch(), "a * b")
		return out.msg.GetPatch()
	}()
	h := &orchestratorv1.PipelineHandoff{OldPipelineId: "r1/fix-add#1", Reason: "engineer_context_95%", HandoffIndex: 1,
		ContextUsage: 0.97, ContextWindowTokens: 8192,
		Engineer: &orchestratorv1.EngineerHandoff{OriginalPrompt: "Make Add return the sum of its arguments.",
			Accomplished: []string{"loop 1: wrote calc.go: multiplied instead"}, FilesChanged: []string{"calc.go"},
			Remaining: []string{"tester: test TestAdd failed"}, ContextNotes: []string{"decisions: kept the signature"}},
		Inspector: &orchestratorv1.InspectorHandoff{ValidationState: "passed", FixesCompleted: []string{"calc.go: not gofmt-formatted"}},
		Tester:    &orchestratorv1.TesterHandoff{FailureDescs: []string{"test TestAdd failed"}}}
	node := &orchestratorv1.Node{Id: "fix-add", Pipeline: true, Prompt: "Make Add return the sum of its arguments.", Handoff: h,
		Edits: []*orchestratorv1.FileEdit{{Path: "calc.go", Content: "package calc\n\n// the node's own edit, applied by the first pipeline\n"}}}
	env := repoTask(t, repo, base, node)
	env.Attempt = 2
	env.StartPatch = startPatch
	g, srv := scriptGate(t, scriptmodel.Script{Match: "Make Add return the sum", Turns: []scriptmodel.Turn{
		call("read_file", map[string]any{"path": "calc.go"}),
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a * b", "new_string": "a + b"}).Then("return a * b"),
		call("finish", map[string]any{"summary": "summed"}),
	}})
	s := pipelineService(t)
	s.SetModel(g)

	out, cancelled := s.runTask(context.Background(), "engineer", env)
	require.False(t, cancelled)
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError()+"\n"+out.msg.GetStdout())
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeCompleted, p.GetState())
	require.Contains(t, out.msg.GetStdout(), "carrying on from r1/fix-add#1 (handoff 1: engineer_context_95%)")
	require.Nil(t, out.msg.GetHandoff())
	brief := srv.Requests()[0].Messages[0].Content
	require.Contains(t, brief, "You carry on from an earlier pipeline of this task")
	require.Contains(t, brief, "loop 1: wrote calc.go: multiplied instead")
	require.Contains(t, brief, "calc.go: not gofmt-formatted")
	require.Contains(t, out.msg.GetPatch(), "+func Add(a, b int) int { return a + b }")
	require.Contains(t, out.msg.GetPatch(), "-func Add(a, b int) int { return a - b }")
}

// Without a language model the user can still ask for a handoff: it
// happens at the Engineer's next turn, with the stages' state.
func TestUserAsksForAHandoff(t *testing.T) {
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	ctl := newTaskControl(true)
	detail, err := ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF, "")
	require.NoError(t, err)
	require.Contains(t, detail, "at the Engineer's next turn")
	out, cancelled := s.runTask(withControl(context.Background(), ctl), "engineer",
		repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Pipeline: true, Edits: []*orchestratorv1.FileEdit{{Path: "README.md", Content: "calc\n"}}}))
	require.False(t, cancelled)
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeHandedOff, p.GetState())
	require.Equal(t, int32(1), p.GetLoops(), "the first loop runs; the handoff comes at the next Engineer turn")
	require.Contains(t, p.GetOverrides(), "handoff")
	h := handoffOf(t, out)
	require.Equal(t, reasonUser, h.GetReason())
	require.Zero(t, h.GetContextWindowTokens(), "no model, no context window")
	require.Equal(t, []string{"applied the node's edits to README.md"}, h.GetEngineer().GetAccomplished())
	require.Equal(t, []string{"README.md"}, h.GetEngineer().GetFilesChanged())
	require.Equal(t, int32(1), h.GetTester().GetTestResults().GetFailed())
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.handoffs.WithLabelValues(triggerUser)))

	// A task that is not a pipeline has nothing to hand off.
	_, err = newTaskControl(false).apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF, "")
	require.ErrorContains(t, err, "pipeline node only")
}

// A pipeline running on a worker that is stopping hands its state to a
// fresh pipeline at the Engineer's next turn, so that the work carries on
// elsewhere rather than starts again.
func TestStoppingWorkerHandsPipelinesOff(t *testing.T) {
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	s.stopping.Store(true)
	out, cancelled := s.runTask(context.Background(), "engineer",
		repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Pipeline: true, Edits: []*orchestratorv1.FileEdit{{Path: "README.md", Content: "calc\n"}}}))
	require.False(t, cancelled)
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeHandedOff, p.GetState())
	require.Equal(t, int32(1), p.GetLoops())
	h := handoffOf(t, out)
	require.Equal(t, reasonShutdown, h.GetReason())
	require.Equal(t, []string{"README.md"}, h.GetEngineer().GetFilesChanged())
	require.Contains(t, out.msg.GetStdout(), "the worker is stopping")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.handoffs.WithLabelValues(triggerShutdown)))
}

func TestTestsOf(t *testing.T) {
	t.Parallel()
	tests, untested := testsOf([]string{"calc.go", "calc_test.go", "api/h.py", "api/test_h.py", "web/a.ts", "README.md", "lib/x.rs"})
	require.Equal(t, []string{"calc_test.go", "api/test_h.py"}, tests)
	require.Equal(t, []string{"web/a.ts", "lib/x.rs"}, untested)
	require.Len(t, boundList(make([]string, 80)), maxHandoffItems)
}

package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/services/orchestrator"
)

func prompt(id, text string, deps ...string) *orchestratorv1.Node {
	return &orchestratorv1.Node{Id: id, Prompt: text, DependsOn: deps}
}

// runEvents waits for a session's events until one matches done, and
// returns them all.
func (h *harness) runEvents(t *testing.T, session string, done func(*eventv1.Event) bool) []*eventv1.Event {
	t.Helper()
	var evs []*eventv1.Event
	require.Eventually(t, func() bool {
		evs = h.events(t, "t1", session, len(evs)+1)
		for _, ev := range evs {
			if done(ev) {
				return true
			}
		}
		return false
	}, waitFor, 20*time.Millisecond)
	return evs
}

// completed is the NODE_COMPLETED event of a node, or nil.
func completed(evs []*eventv1.Event, node string) *eventv1.Event {
	for _, ev := range evs {
		if ev.GetType() == eventv1.EventType_EVENT_TYPE_NODE_COMPLETED && ev.GetNode().GetNode() == node {
			return ev
		}
	}
	return nil
}

func runCompleted(ev *eventv1.Event) bool {
	return ev.GetType() == eventv1.EventType_EVENT_TYPE_RUN_COMPLETED
}

// A node asked to change the code that changed nothing ends NO_CHANGES,
// saying why; what depends on it runs. A run where other nodes changed
// files succeeds, and says how many nodes changed nothing.
func TestNoChangesNodeLetsItsDependentsRun(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	w := h.startWorker(t, 2)
	ctx := userCtx("t1")
	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, newRepo(t)), Dag: dagOf(
		prompt("idle", "tidy the notes"),
		edit("docs", "docs.txt", "written\n", "idle"),
		cmd("check", "true", "docs"),
	)})
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	n := nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_NO_CHANGES, n["idle"].GetState())
	require.Equal(t, "no language model is configured", n["idle"].GetError())
	require.Empty(t, n["idle"].GetPatch())
	require.NotNil(t, n["idle"].GetDuration())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["docs"].GetState())
	require.Empty(t, w.dispatches(run.GetId(), "docs")[0].GetDependencyPatches(), "a node that changed nothing passes no patch on")

	evs := h.runEvents(t, session, runCompleted)
	idle := completed(evs, "idle")
	require.NotNil(t, idle)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_NO_CHANGES, idle.GetNode().GetState())
	require.Equal(t, "no language model is configured", idle.GetNode().GetError())
	require.Equal(t, "node idle changed nothing: no language model is configured", idle.GetText())
	done := evs[len(evs)-1]
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_SUCCEEDED, done.GetRun().GetState())
	require.Equal(t, fmt.Sprintf("run %s succeeded; 1 of 3 nodes changed nothing: idle: no language model is configured", run.GetName()), done.GetText())

	require.Eventually(t, func() bool { return h.get(t, ctx, run.GetName()).GetResultPatch() != "" }, waitFor, 20*time.Millisecond)
	got = h.get(t, ctx, run.GetName())
	require.Contains(t, got.GetResultPatch(), "+written")
	require.Contains(t, got.GetDecisionLog(), "## Task idle (attempt 1): no_changes\n\n- No changes: no language model is configured\n")
	require.True(t, strings.HasSuffix(got.GetDecisionLog(), "## Outcome: 1 of 3 nodes changed nothing\n\n- idle: no language model is configured\n\n"))
}

// A run whose only work changed nothing ends NO_CHANGES: nothing is merged
// or checked, and its completion and decision log say why. It cannot be
// settled; its nodes run again with retry or prompt like failed ones.
func TestRunOfNoChangesNodesDeliversNothing(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	w := h.startWorker(t, 2)
	ctx := userCtx("t1")
	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, newRepo(t)), SessionChecks: true, Dag: dagOf(
		prompt("plan", "outline the change"),
		prompt("build", "make the change", "plan"),
		cmd("check", "true", "build"),
	)})
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_NO_CHANGES)
	require.NotNil(t, got.GetEndTime())
	n := nodesByID(got)
	for _, id := range []string{"plan", "build"} {
		require.Equal(t, orchestratorv1.NodeState_NODE_STATE_NO_CHANGES, n[id].GetState(), id)
	}
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["check"].GetState())

	evs := h.runEvents(t, session, runCompleted)
	done := evs[len(evs)-1]
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_NO_CHANGES, done.GetRun().GetState())
	reasons := "plan: no language model is configured; build: no language model is configured"
	require.Equal(t, "run "+run.GetName()+" changed nothing: "+reasons, done.GetText())
	require.Equal(t, reasons, done.GetRun().GetDetail())
	waitMetric(t, h.reg, "sylk_orchestrator_runs_total", "NO_CHANGES", 1)

	wantLog := "## Outcome: nothing was changed\n\nNo task changed the code, so the run has no result patch. Why:\n\n" +
		"- plan: no language model is configured\n- build: no language model is configured\n\n"
	require.True(t, strings.HasSuffix(got.GetDecisionLog(), wantLog), got.GetDecisionLog())
	dec, err := h.svc.ListDecisions(ctx, &orchestratorv1.ListDecisionsRequest{Name: run.GetName()})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(dec.GetLog(), wantLog))
	// The run's metric is counted after its merge and session check would
	// have been started (carryOut).
	got = h.get(t, ctx, run.GetName())
	require.Empty(t, got.GetResultPatch())
	require.Empty(t, got.GetMergeConflicts())
	require.Nil(t, got.GetSessionCheck(), "nothing to check")

	_, err = h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: orchestratorv1.SettleAction_SETTLE_ACTION_KEEP})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Equal(t, orchestrator.ReasonRunNotSettleable, apierr.Reason(err))
	require.Contains(t, status.Convert(err).Message(), "changed nothing (NO_CHANGES)")
	_, err = h.svc.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: run.GetName()})
	require.Equal(t, orchestrator.ReasonRunEnded, apierr.Reason(err), "a NO_CHANGES run has ended")

	// Guidance runs the node again; this time it changes a file, and the
	// run succeeds with it.
	resp := action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "build",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, Message: "write it down"})
	require.Contains(t, resp.GetDetail(), "runs again with the guidance")
	got = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	n = nodesByID(got)
	require.Equal(t, int32(2), n["build"].GetAttempt())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["build"].GetState())
	require.Equal(t, int32(1), n["check"].GetAttempt(), "what already ran after it stays as it was")
	second := w.dispatches(run.GetId(), "build")[1]
	require.Equal(t, "Attempt 1 changed nothing: no language model is configured.", second.GetNode().GetRetryBriefing().GetFailureAnalysis())
	require.Eventually(t, func() bool { return strings.Contains(h.get(t, ctx, run.GetName()).GetResultPatch(), "+write it down") },
		waitFor, 20*time.Millisecond)

	// retry runs a node that changed nothing again too; its dependents
	// wait for it anew.
	resp = action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "plan",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY})
	require.Equal(t, "the node runs again", resp.GetDetail())
	require.Eventually(t, func() bool {
		n := nodesByID(h.get(t, ctx, run.GetName()))
		return n["plan"].GetAttempt() == 2 && n["plan"].GetState() == orchestratorv1.NodeState_NODE_STATE_NO_CHANGES
	}, waitFor, 20*time.Millisecond)
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	var unmet int
	require.NoError(t, h.db.QueryRow(ctx, `SELECT unmet_deps FROM nodes WHERE run_id = $1 AND node_id = 'build'`, run.GetId()).Scan(&unmet))
	require.Zero(t, unmet, "met again once plan ended again")
}

// The scheduler's full pass (here after a resume) treats a node that
// changed nothing as met, as the fast path does; its report's agent
// activity is stored whole and shown on the node and in the decision log.
func TestNoChangesWhileThePassIsPausedAndActivity(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, newRepo(t)), Dag: dagOf(prompt("a", "improve it"), cmd("b", "true", "a"))})
	a := h.tasks(t, "engineer", 1)[0]
	_, err := h.svc.PauseRun(ctx, &orchestratorv1.PauseRunRequest{Name: run.GetName()})
	require.NoError(t, err)

	act := &orchestratorv1.AgentActivity{Model: "scripted/m1", Turns: 3, ToolCallCount: 2, InputTokens: 1200, OutputTokens: 80,
		StopReason: "finished", StopDetail: "nothing to do:\nthe notes are tidy", ToolCalls: []*orchestratorv1.ToolCallRecord{
			{CallId: "c1", Tool: "read_file", Args: `{"path":"notes.txt"}`, Ok: true, Duration: durationpb.New(time.Millisecond), Summary: "2 lines", Turn: 1},
			{CallId: "c2", Tool: "grep", Args: `{"pattern":"todo"}`, Ok: false, Summary: "no match", Turn: 2},
		}}
	h.publishResult(t, "nc-a", &taskv1.TaskResult{TenantId: "t1", RunId: run.GetId(), NodeId: "a", Attempt: a.GetAttempt(), Fence: a.GetFence(),
		Duration: durationpb.New(time.Second), NoChangesReason: "the model finished without an edit",
		Report: &orchestratorv1.TaskReport{Implemented: "nothing", Activity: act}})
	require.Eventually(t, func() bool {
		return nodesByID(h.get(t, ctx, run.GetName()))["a"].GetState() == orchestratorv1.NodeState_NODE_STATE_NO_CHANGES
	}, waitFor, 20*time.Millisecond)
	h.resultsDrained(t, 1)
	h.noMoreTasks(t, "engineer")

	_, err = h.svc.ResumeRun(ctx, &orchestratorv1.ResumeRunRequest{Name: run.GetName()})
	require.NoError(t, err)
	b := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "b", b.GetNodeId())
	h.sendResult(t, "t1", run.GetId(), "b", b.GetAttempt(), 0, "", "nc-b")
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_NO_CHANGES)

	rep := nodesByID(got)["a"].GetReport()
	require.True(t, proto.Equal(act, rep.GetActivity()), "the activity round-trips: %v", rep.GetActivity())
	require.Contains(t, got.GetDecisionLog(),
		"- Agent: scripted/m1, 3 turn(s), 2 tool call(s), 1200 tokens in, 80 out; stopped: finished (nothing to do: the notes are tidy)\n")
	dec, err := h.svc.ListDecisions(ctx, &orchestratorv1.ListDecisionsRequest{Name: run.GetName()})
	require.NoError(t, err)
	require.True(t, proto.Equal(act, dec.GetEntries()[0].GetReport().GetActivity()))

	// A result with a patch changed something, whatever else it says.
	run = h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, newRepo(t)), Dag: dagOf(prompt("p", "improve it"))})
	p := h.tasks(t, "engineer", 1)[0]
	h.publishResult(t, "nc-p", &taskv1.TaskResult{TenantId: "t1", RunId: run.GetId(), NodeId: "p", Attempt: p.GetAttempt(), Fence: p.GetFence(),
		NoChangesReason: "stale", Patch: "diff --git a/x b/x\n"})
	got = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Empty(t, nodesByID(got)["p"].GetError())
}

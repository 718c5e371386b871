package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// sendHandoff reports an attempt that handed its pipeline off, as a worker
// does.
func (h *harness) sendHandoff(t *testing.T, tenant, runID, node string, attempt int32, patch string, ho *orchestratorv1.PipelineHandoff) {
	t.Helper()
	h.publishResult(t, pipeline.ID(runID, node, attempt), &taskv1.TaskResult{TenantId: tenant, RunId: runID, NodeId: node, Attempt: attempt,
		Duration: durationpb.New(time.Second), WorkerId: "test-worker", Handoff: ho, Patch: patch})
}

// Spec F-23: a handed-off pipeline is closed and the node runs again at
// once as a fresh pipeline with the state and the files; the handoff is
// stored in the Archivalist and announced; handoffs do not use up retries.
func TestHandoffStartsAFreshPipeline(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	repo := repoWith(t, map[string]string{"calc.py": calcPy})
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, repo),
		Dag: dagOf(&orchestratorv1.Node{Id: "p", Pipeline: true, Prompt: "make add faster", Retry: &orchestratorv1.RetryPolicy{Max: 0}})})
	runID := strings.TrimPrefix(run.GetName(), "runs/")
	require.Equal(t, int32(1), h.tasks(t, "engineer", 1)[0].GetAttempt())

	ho := &orchestratorv1.PipelineHandoff{OldPipelineId: pipeline.ID(runID, "p", 1), RunId: runID, NodeId: "p",
		Reason: "engineer_context_95%", HandoffIndex: 1, ContextUsage: 0.96, ContextWindowTokens: 8192,
		Engineer: &orchestratorv1.EngineerHandoff{Accomplished: []string{"loop 1: wrote calc.py: cached add"}, FilesChanged: []string{"calc.py"}},
		Tester:   &orchestratorv1.TesterHandoff{FailureDescs: []string{"test_add failed"}}}
	const patch = "diff --git a/calc.py b/calc.py\n"
	h.sendHandoff(t, "t1", runID, "p", 1, patch, ho)

	second := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, int32(2), second.GetAttempt())
	spec := second.GetNode()
	require.True(t, proto.Equal(ho, spec.GetHandoff()), "the fresh pipeline gets the state: %v", spec.GetHandoff())
	require.Nil(t, spec.GetRetryBriefing(), "a handoff is not a failure to brief on")
	require.Equal(t, patch, second.GetStartPatch())
	require.Equal(t, repo, second.GetRepository())
	require.Equal(t, run.GetBaseCommit(), second.GetBaseCommit())

	n := nodesByID(h.get(t, ctx, run.GetName()))["p"]
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_DISPATCHED, n.GetState())
	require.Equal(t, int32(1), n.GetHandoffs())
	require.Equal(t, "engineer_context_95%", n.GetHandoff().GetReason())
	ev := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_NODE_HANDED_OFF)
	require.Equal(t, int32(1), ev.GetNode().GetHandoffIndex())
	require.Equal(t, "engineer_context_95%", ev.GetNode().GetReason())
	require.Equal(t, pipeline.ID(runID, "p", 1), ev.GetNode().GetOldPipeline())

	// The Archivalist is sent the handoff under pipeline_handoff.
	stored := inboxMessage(t, h, topology.AgentArchivalist)
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST, stored.GetType())
	require.Equal(t, orchestrator.CategoryPipelineHandoff, stored.GetStoreRequest().GetCategory())
	require.Equal(t, session, stored.GetSessionId())
	text := stored.GetStoreRequest().GetContent()
	require.Contains(t, text, "# Pipeline handoff 1")
	require.Contains(t, text, "loop 1: wrote calc.py: cached add")
	require.Contains(t, text, "Context used: 96% of 8192 tokens")

	// The chain goes on: a second handoff is number 2 of the same node.
	ho2 := proto.Clone(ho).(*orchestratorv1.PipelineHandoff)
	ho2.OldPipelineId, ho2.HandoffIndex = pipeline.ID(runID, "p", 2), 2
	h.sendHandoff(t, "t1", runID, "p", 2, patch+"more\n", ho2)
	third := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, int32(3), third.GetAttempt())
	require.Equal(t, int32(2), third.GetNode().GetHandoff().GetHandoffIndex())
	require.Equal(t, patch+"more\n", third.GetStartPatch())

	// With no retries, the third pipeline's failure fails the node: two
	// handoffs did not count as retries, and no more are made up.
	h.sendResult(t, "t1", runID, "p", 3, 1, "", "p3-failed")
	done := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n = nodesByID(done)["p"]
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n.GetState())
	require.Equal(t, int32(3), n.GetAttempt())
	require.Equal(t, int32(2), n.GetHandoffs())
}

// -orchestrator.max-handoffs bounds a chain: the handoff beyond it fails
// the node, with the reason.
func TestHandoffChainLimit(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestratorWith(t, nil, nil, func(c *orchestrator.Config) { c.MaxHandoffs = 1 })
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(&orchestratorv1.Node{Id: "p", Pipeline: true, Prompt: "refactor"})})
	runID := strings.TrimPrefix(run.GetName(), "runs/")
	h.tasks(t, "engineer", 1)
	h.sendHandoff(t, "t1", runID, "p", 1, "", &orchestratorv1.PipelineHandoff{Reason: "user_request", HandoffIndex: 1})
	require.Equal(t, int32(2), h.tasks(t, "engineer", 1)[0].GetAttempt())
	h.sendHandoff(t, "t1", runID, "p", 2, "", &orchestratorv1.PipelineHandoff{Reason: "user_request", HandoffIndex: 2})
	n := nodesByID(h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED))["p"]
	require.Equal(t, int32(1), n.GetHandoffs())
	require.Equal(t, "the pipeline asked for handoff 2, beyond the limit of 1 (-orchestrator.max-handoffs)", n.GetError())
}

// A replica that restarts after a handoff, with the task queue lost,
// re-sends the fresh pipeline with its state and files: they live in the
// node's row, not in the message.
func TestHandoffSurvivesARestart(t *testing.T) {
	t.Parallel()
	h, stop := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	repo := repoWith(t, map[string]string{"calc.py": calcPy})
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, repo),
		Dag: dagOf(&orchestratorv1.Node{Id: "p", Pipeline: true, Prompt: "make add faster"})})
	runID := strings.TrimPrefix(run.GetName(), "runs/")
	h.tasks(t, "engineer", 1)
	ho := &orchestratorv1.PipelineHandoff{OldPipelineId: pipeline.ID(runID, "p", 1), Reason: "user_request", HandoffIndex: 1}
	h.sendHandoff(t, "t1", runID, "p", 1, "diff --git a/calc.py b/calc.py\n", ho)
	require.Equal(t, int32(2), h.tasks(t, "engineer", 1)[0].GetAttempt())
	stop()
	require.NoError(t, h.bus.JS.DeleteStream(context.Background(), h.bus.Stream(topology.StreamTasks)))

	h2, _ := newOrchestrator(t, h.db, h.bus)
	again := h2.tasks(t, "engineer", 1)[0]
	require.Equal(t, int32(2), again.GetAttempt(), "the fresh pipeline's dispatch is re-sent as it was")
	require.True(t, proto.Equal(ho, again.GetNode().GetHandoff()))
	require.Equal(t, "diff --git a/calc.py b/calc.py\n", again.GetStartPatch())
}

package orchestrator_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// Spec F-22: when a run ends, its workflow's state goes to the Archivalist
// under architect_workflow: the DAG summary and the completed, pending and
// blocked tasks.
func TestWorkflowCheckpointWhenARunEnds(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	noRetry := &orchestratorv1.RetryPolicy{Max: 0}
	nodes := []*orchestratorv1.Node{cmd("build", "true"), cmd("lint", "true"), cmd("test", "true", "build"), cmd("ship", "true", "lint")}
	for _, n := range nodes {
		n.Retry = noRetry
	}
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Dag: dagOf(nodes...)})
	runID := strings.TrimPrefix(run.GetName(), "runs/")
	h.tasks(t, "engineer", 2)
	h.sendResult(t, "t1", runID, "build", 1, 0, "", "")
	h.sendResult(t, "t1", runID, "lint", 1, 2, "", "")
	h.tasks(t, "engineer", 1)
	h.sendResult(t, "t1", runID, "test", 1, 0, "", "")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)

	rec := inboxMessage(t, h, topology.AgentArchivalist)
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST, rec.GetType())
	require.Equal(t, orchestrator.CategoryArchitectWorkflow, rec.GetStoreRequest().GetCategory())
	require.Equal(t, "Workflow of "+run.GetName()+" (failed)", rec.GetStoreRequest().GetTitle())
	require.Equal(t, session, rec.GetSessionId())
	require.Equal(t, "t1", rec.GetTenantId())
	text := rec.GetStoreRequest().GetContent()
	for _, want := range []string{
		"# Workflow of " + run.GetName() + ": failed",
		"- ID: " + run.GetName(), "- Total nodes: 4", "- Completed nodes: 2", "- Current layer: 1 of 2",
		"Execution order (2):\n- layer 1: build, lint\n- layer 2: test, ship",
		"Completed tasks (2):\n- build\n- test",
		"Blocked tasks (2):\n- lint: failed after 1 attempt(s), exit code 2",
		"- ship: skipped, a dependency did not succeed",
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "Pending tasks")
}

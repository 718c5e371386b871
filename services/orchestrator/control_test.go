package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

func retrying(n *orchestratorv1.Node, max int32, backoff time.Duration) *orchestratorv1.Node {
	n.Retry = &orchestratorv1.RetryPolicy{Max: max, Backoff: durationpb.New(backoff)}
	return n
}

func TestRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	dir := h.signals
	// flaky fails on its first attempt only; broken always fails.
	flaky := fmt.Sprintf(`f=%s/flag; if [ -e "$f" ]; then echo recovered; else touch "$f"; echo first >&2; exit 3; fi`, dir)
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: &orchestratorv1.Dag{
		Nodes: []*orchestratorv1.Node{
			retrying(cmd("flaky", flaky), 2, 20*time.Millisecond),
			retrying(cmd("broken", "exit 7"), 2, 10*time.Millisecond),
			cmd("defaulted", "exit 1"),
			retrying(cmd("once", "exit 1"), 0, 0),
		},
		Policy: &orchestratorv1.Policy{DefaultRetry: &orchestratorv1.RetryPolicy{Max: 1, Backoff: durationpb.New(10 * time.Millisecond)}},
	}})
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n := nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["flaky"].GetState())
	require.Equal(t, int32(2), n["flaky"].GetAttempt())
	require.Equal(t, "recovered\n", n["flaky"].GetStdout())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n["broken"].GetState())
	require.Equal(t, int32(3), n["broken"].GetAttempt(), "max 2 means two retries after the first attempt")
	require.Equal(t, int32(7), n["broken"].GetExitCode())
	require.Equal(t, int32(2), n["defaulted"].GetAttempt(), "the DAG's default retry applies")
	require.Equal(t, int32(1), n["once"].GetAttempt(), "an explicit max 0 overrides the default")

	var count int
	require.NoError(t, h.db.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE run_id = $1`, run.GetId()).Scan(&count))
	require.Equal(t, 2+3+2+1, count, "every attempt is recorded once")
	waitMetric(t, h.reg, "sylk_orchestrator_node_retries_total", "", 4.0)
}

// A retried node is dispatched with a briefing on its prior attempts, and
// its entry in the decision log says so (spec B-38).
func TestRetryIsBriefed(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 1)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(retrying(cmd("broken", "exit 7"), 2, 10*time.Millisecond))})
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	log := got.GetDecisionLog()
	require.Contains(t, log, "## Task broken (attempt 1): failed\n")
	first := log[strings.Index(log, "## Task broken (attempt 1)"):strings.Index(log, "## Task broken (attempt 2)")]
	require.NotContains(t, first, "Briefing", "a first attempt is not briefed")
	// The (fake) worker reports the briefing's failure analysis.
	require.Contains(t, log, "## Task broken (attempt 2): failed\n")
	require.Contains(t, log, "- Briefing: Attempt 1 exited with 7")
	require.Contains(t, log, "- Briefing: Attempt 2 exited with 7")
}

func TestRetryWaitsForItsBackoff(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(retrying(cmd("a", "x"), 1, 2*time.Minute))})
	h.tasks(t, "engineer", 1)
	h.sendResult(t, "t1", run.GetId(), "a", 1, 1, "", "r1")
	h.resultsDrained(t, 1)
	got := h.get(t, ctx, run.GetName())
	a := nodesByID(got)["a"]
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_PENDING, a.GetState())
	require.NotNil(t, a.GetNextAttemptTime())
	require.WithinDuration(t, time.Now().Add(2*time.Minute), a.GetNextAttemptTime().AsTime(), 30*time.Second)
	h.noMoreTasks(t, "engineer")
}

func TestFailFastCancelsPendingNodes(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{MaxConcurrency: 2, Dag: &orchestratorv1.Dag{
		Nodes:  []*orchestratorv1.Node{cmd("a", "x"), cmd("b", "x"), cmd("c", "x"), cmd("d", "x", "c")},
		Policy: &orchestratorv1.Policy{FailFast: true},
	}})
	h.tasks(t, "engineer", 2)
	h.sendResult(t, "t1", run.GetId(), "a", 1, 1, "", "ff-a")
	h.resultsDrained(t, 1)
	got := h.get(t, ctx, run.GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, got.GetState(), "b still runs")
	n := nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["c"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["d"].GetState())
	h.noMoreTasks(t, "engineer")
	h.sendResult(t, "t1", run.GetId(), "b", 1, 0, "", "ff-b")
	got = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, nodesByID(got)["b"].GetState())
}

func TestPriorityThenDagOrder(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	prio := func(id string, p int32) *orchestratorv1.Node {
		n := cmd(id, "x")
		n.Priority = p
		return n
	}
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{MaxConcurrency: 1,
		Dag: dagOf(prio("low", 0), prio("mid1", 5), prio("high", 10), prio("mid2", 5))})
	var order []string
	for i := range 4 {
		d := h.tasks(t, "engineer", 1)[0]
		order = append(order, d.GetNodeId())
		h.sendResult(t, "t1", run.GetId(), d.GetNodeId(), 1, 0, "", fmt.Sprintf("p-%d", i))
	}
	require.Equal(t, []string{"high", "mid1", "mid2", "low"}, order)
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
}

func TestPauseAndResumeRun(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "x"), cmd("b", "x", "a"))})
	h.tasks(t, "engineer", 1)

	resp, err := h.svc.PauseRun(ctx, &orchestratorv1.PauseRunRequest{Name: run.GetName()})
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_PAUSED, resp.GetRun().GetState())
	_, err = h.svc.PauseRun(ctx, &orchestratorv1.PauseRunRequest{Name: run.GetName()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))

	// The running node's result is kept; nothing new is dispatched.
	h.sendResult(t, "t1", run.GetId(), "a", 1, 0, "", "pr-a")
	h.resultsDrained(t, 1)
	got := h.get(t, ctx, run.GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_PAUSED, got.GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, nodesByID(got)["a"].GetState())
	h.noMoreTasks(t, "engineer")

	rr, err := h.svc.ResumeRun(ctx, &orchestratorv1.ResumeRunRequest{Name: run.GetName()})
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, rr.GetRun().GetState())
	require.Equal(t, "b", h.tasks(t, "engineer", 1)[0].GetNodeId())
	_, err = h.svc.ResumeRun(ctx, &orchestratorv1.ResumeRunRequest{Name: run.GetName()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	_, err = h.svc.PauseRun(userCtx("t2"), &orchestratorv1.PauseRunRequest{Name: run.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant cannot see the run")
}

func TestPauseResumeAndCancelANode(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(
		cmd("a", "x"), cmd("b", "x", "a"), cmd("c", "x", "a"), cmd("d", "x", "c"))})
	h.tasks(t, "engineer", 1)
	resp, err := h.svc.PauseRun(ctx, &orchestratorv1.PauseRunRequest{Name: run.GetName(), NodeId: "b"})
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_PAUSED, nodesByID(resp.GetRun())["b"].GetState())
	_, err = h.svc.PauseRun(ctx, &orchestratorv1.PauseRunRequest{Name: run.GetName(), NodeId: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
	cr, err := h.svc.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: run.GetName(), NodeId: "c"})
	require.NoError(t, err)
	n := nodesByID(cr.GetRun())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["c"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SKIPPED, n["d"].GetState())

	h.sendResult(t, "t1", run.GetId(), "a", 1, 0, "", "pn-a")
	h.resultsDrained(t, 1)
	h.noMoreTasks(t, "engineer")
	_, err = h.svc.ResumeRun(ctx, &orchestratorv1.ResumeRunRequest{Name: run.GetName(), NodeId: "b"})
	require.NoError(t, err)
	require.Equal(t, "b", h.tasks(t, "engineer", 1)[0].GetNodeId())
	h.sendResult(t, "t1", run.GetId(), "b", 1, 0, "", "pn-b")
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, nodesByID(got)["b"].GetState())
	_, err = h.svc.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: run.GetName(), NodeId: "b"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
}

func TestSessionWideControl(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	r1 := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Dag: dagOf(cmd("a", "x"), cmd("b", "x", "a"))})
	r2 := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Dag: dagOf(cmd("a", "x"), cmd("b", "x", "a"))})
	other := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("z", "x"))})
	h.tasks(t, "engineer", 3)

	// Another user's session is not found, as reading it is, whatever is
	// done to it, by a member or an admin; its runs go on.
	for _, who := range []context.Context{memberCtx("t1", "u2"), identity.NewContext(context.Background(),
		identity.Identity{TenantID: "t1", UserID: "u3", Role: identity.RoleAdmin})} {
		_, err := h.svc.PauseSessionRuns(who, &orchestratorv1.PauseSessionRunsRequest{Session: session})
		require.Equal(t, "SESSION_NOT_FOUND", apierr.Reason(err))
		_, err = h.svc.ResumeSessionRuns(who, &orchestratorv1.ResumeSessionRunsRequest{Session: session})
		require.Equal(t, "SESSION_NOT_FOUND", apierr.Reason(err))
		_, err = h.svc.CancelSessionRuns(who, &orchestratorv1.CancelSessionRunsRequest{Session: session})
		require.Equal(t, codes.NotFound, status.Code(err))
	}
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, h.get(t, ctx, r1.GetName()).GetState())

	p, err := h.svc.PauseSessionRuns(ctx, &orchestratorv1.PauseSessionRunsRequest{Session: "sessions/" + session})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{r1.GetName(), r2.GetName()}, p.GetRuns())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, h.get(t, ctx, other.GetName()).GetState())
	r, err := h.svc.ResumeSessionRuns(ctx, &orchestratorv1.ResumeSessionRunsRequest{Session: session})
	require.NoError(t, err)
	require.Len(t, r.GetRuns(), 2)
	c, err := h.svc.CancelSessionRuns(ctx, &orchestratorv1.CancelSessionRunsRequest{Session: session})
	require.NoError(t, err)
	require.Len(t, c.GetRuns(), 2)
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_CANCELLED, h.get(t, ctx, r1.GetName()).GetState())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_CANCELLED, h.get(t, ctx, r2.GetName()).GetState())
	_, err = h.svc.CancelSessionRuns(ctx, &orchestratorv1.CancelSessionRunsRequest{Session: "bad"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

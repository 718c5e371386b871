package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// claimAs asks the Orchestrator, as worker, for the right to run d.
func claimAs(t *testing.T, bus *natsx.Bus, d *taskv1.TaskDispatch, worker string) *taskv1.TaskClaimResponse {
	t.Helper()
	var resp taskv1.TaskClaimResponse
	ask(t, bus, topology.TaskClaimSubject(bus), &taskv1.TaskClaimRequest{TenantId: d.GetTenantId(), RunId: d.GetRunId(),
		NodeId: d.GetNodeId(), Attempt: d.GetAttempt(), AttemptId: d.GetFence().GetAttemptId(), WorkerId: worker}, &resp)
	return &resp
}

// beat sends a heartbeat of a claim on d.
func beat(t *testing.T, bus *natsx.Bus, d *taskv1.TaskDispatch, token string) *taskv1.TaskHeartbeatResponse {
	t.Helper()
	var resp taskv1.TaskHeartbeatResponse
	ask(t, bus, topology.TaskHeartbeatSubject(bus), &taskv1.TaskHeartbeatRequest{TenantId: d.GetTenantId(), AttemptId: d.GetFence().GetAttemptId(),
		ClaimToken: token, WorkerId: "w", RunId: d.GetRunId(), NodeId: d.GetNodeId(), Attempt: d.GetAttempt()}, &resp)
	return &resp
}

func ask(t *testing.T, bus *natsx.Bus, subject string, req, resp proto.Message) {
	t.Helper()
	b, err := proto.Marshal(req)
	require.NoError(t, err)
	// The replica answers once Run has subscribed.
	var m *nats.Msg
	require.Eventually(t, func() bool {
		m, err = bus.Conn.Request(subject, b, 5*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			return false
		}
		require.NoError(t, err)
		return true
	}, waitFor, 20*time.Millisecond)
	require.NoError(t, proto.Unmarshal(m.Data, resp))
}

// One worker at a time holds a dispatch's attempt: a second claim waits
// while the first worker heartbeats, takes over once it went silent past
// the claim timeout, and the first worker is then fenced: its heartbeat
// says so and its result is ignored and counted; the new holder's result
// is applied, and a later copy of the dispatch is superseded.
func TestOneWorkerHoldsAnAttempt(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestratorWith(t, nil, nil, func(c *orchestrator.Config) { c.ClaimTimeout = 600 * time.Millisecond })
	ctx := userCtx("t-claims")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))})
	d := h.tasks(t, "engineer", 1)[0]

	first := claimAs(t, h.bus, d, "w1")
	require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_CLAIMED, first.GetOutcome())
	require.NotEmpty(t, first.GetClaimToken())
	require.Equal(t, 600*time.Millisecond, first.GetTimeout().AsDuration())
	held := claimAs(t, h.bus, d, "w2")
	require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_HELD_ELSEWHERE, held.GetOutcome())
	require.Equal(t, "w1", held.GetHolderWorkerId())
	require.False(t, beat(t, h.bus, d, first.GetClaimToken()).GetFenced())

	// w1 goes silent: w2's claim succeeds once the timeout passed.
	var second *taskv1.TaskClaimResponse
	require.Eventually(t, func() bool {
		second = claimAs(t, h.bus, d, "w2")
		return second.GetOutcome() == taskv1.TaskClaimResponse_OUTCOME_CLAIMED
	}, waitFor, 50*time.Millisecond)
	require.NotEqual(t, first.GetClaimToken(), second.GetClaimToken())
	fenced := beat(t, h.bus, d, first.GetClaimToken())
	require.True(t, fenced.GetFenced())
	require.Contains(t, fenced.GetReason(), "took the attempt over")

	result := func(token, out string) *taskv1.TaskResult {
		return &taskv1.TaskResult{TenantId: d.GetTenantId(), RunId: d.GetRunId(), NodeId: d.GetNodeId(), Attempt: d.GetAttempt(),
			Fence: d.GetFence(), ClaimToken: token, Stdout: out, Duration: durationpb.New(time.Millisecond), WorkerId: "w"}
	}
	h.publishResult(t, "stale", result(first.GetClaimToken(), "from w1"))
	h.resultsDrained(t, 1)
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, h.get(t, ctx, run.GetName()).GetState(), "the stale result was not applied")
	var stale int
	require.NoError(t, h.db.QueryRow(context.Background(), `SELECT stale_results FROM task_claims WHERE attempt_id = $1`,
		d.GetFence().GetAttemptId()).Scan(&stale))
	require.Equal(t, 1, stale)

	h.publishResult(t, "current", result(second.GetClaimToken(), "from w2"))
	done := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Equal(t, "from w2", nodesByID(done)["a"].GetStdout())
	require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_SUPERSEDED, claimAs(t, h.bus, d, "w3").GetOutcome())
}

// A finished claim is not claimed again (a session check's or review's
// dispatch, which has no node to tell it is over), and a released one is
// at once.
func TestFinishedAndReleasedClaims(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	d := &taskv1.TaskDispatch{TenantId: "t-claims", RunId: "r1", Fence: &taskv1.TaskFence{AttemptId: "review:1"}}
	c := claimAs(t, h.bus, d, "w1")
	require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_CLAIMED, c.GetOutcome())
	var resp taskv1.TaskHeartbeatResponse
	ask(t, h.bus, topology.TaskHeartbeatSubject(h.bus), &taskv1.TaskHeartbeatRequest{TenantId: "t-claims", AttemptId: "review:1",
		ClaimToken: c.GetClaimToken(), Released: true}, &resp)
	require.False(t, resp.GetFenced())
	c = claimAs(t, h.bus, d, "w2")
	require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_CLAIMED, c.GetOutcome(), "a released claim is taken at once")
	ask(t, h.bus, topology.TaskHeartbeatSubject(h.bus), &taskv1.TaskHeartbeatRequest{TenantId: "t-claims", AttemptId: "review:1",
		ClaimToken: c.GetClaimToken(), Finished: true}, &resp)
	require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_FINISHED, claimAs(t, h.bus, d, "w3").GetOutcome())
}

// A review's and a session check's dispatches have node ids of their own
// and no row in nodes: they are claimed and kept alive like any other.
func TestReviewAndSessionCheckClaims(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	for _, node := range []string{orchestrator.ReviewNode, orchestrator.SessionCheckNode} {
		d := &taskv1.TaskDispatch{TenantId: "t-claims", RunId: "r-" + node, NodeId: node, Attempt: 1,
			Fence: &taskv1.TaskFence{AttemptId: "r-" + node + ":" + node + ":1"}}
		c := claimAs(t, h.bus, d, "w1")
		require.Equal(t, taskv1.TaskClaimResponse_OUTCOME_CLAIMED, c.GetOutcome(), node)
		require.False(t, beat(t, h.bus, d, c.GetClaimToken()).GetFenced(), node)
	}
}

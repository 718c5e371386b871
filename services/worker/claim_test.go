package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// claimDesk answers the worker's claims and heartbeats in these tests, as
// the Orchestrator does from its database (whose own tests cover the
// decisions): here the test says what each answer is.
type claimDesk struct {
	mu        sync.Mutex
	outcome   taskv1.TaskClaimResponse_Outcome
	fenced    bool
	claims    int
	beats     []*taskv1.TaskHeartbeatRequest
	heartbeat chan struct{}
}

// grantClaims grants every claim, as an Orchestrator does for a dispatch
// no other worker holds.
func grantClaims(t testing.TB, bus *natsx.Bus) *claimDesk {
	t.Helper()
	desk := &claimDesk{outcome: taskv1.TaskClaimResponse_OUTCOME_CLAIMED, heartbeat: make(chan struct{}, 64)}
	for _, subj := range []string{topology.TaskClaimSubject(bus), topology.TaskHeartbeatSubject(bus)} {
		sub, err := bus.Conn.Subscribe(subj, desk.answer(bus))
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	return desk
}

func (c *claimDesk) answer(bus *natsx.Bus) nats.MsgHandler {
	return func(m *nats.Msg) {
		c.mu.Lock()
		defer c.mu.Unlock()
		var reply proto.Message
		if m.Subject == topology.TaskClaimSubject(bus) {
			c.claims++
			reply = &taskv1.TaskClaimResponse{Outcome: c.outcome, ClaimToken: "token-1", Timeout: durationpb.New(600 * time.Millisecond)}
		} else {
			var req taskv1.TaskHeartbeatRequest
			_ = proto.Unmarshal(m.Data, &req)
			c.beats = append(c.beats, &req)
			reply = &taskv1.TaskHeartbeatResponse{Fenced: c.fenced, Reason: "another worker took the attempt over"}
			select {
			case c.heartbeat <- struct{}{}:
			default:
			}
		}
		b, _ := proto.Marshal(reply)
		_ = m.Respond(b)
	}
}

func (c *claimDesk) set(f func(*claimDesk)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// busWorker runs a tester worker on its own bus, with a consumer of its
// results.
func busWorker(t *testing.T) (*natsx.Bus, *claimDesk, func(node, cmd string), func() *taskv1.TaskResult) {
	t.Helper()
	bus := testenv.NATS(t)
	cfg := testConfig(t)
	cfg.Roles = []string{"tester"}
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	desk := grantClaims(t, bus)
	testenv.Start(t, svc.Run)
	ctx := context.Background()
	require.NoError(t, topology.EnsureTasks(ctx, bus))
	send := func(node, cmd string) {
		d := &taskv1.TaskDispatch{TenantId: "t1", RunId: "r1", NodeId: node, Attempt: 1, Role: "tester",
			Node: &orchestratorv1.Node{Id: node, Command: cmd}, Fence: &taskv1.TaskFence{AttemptId: "r1:" + node + ":1"}}
		_, err := bus.Publish(ctx, topology.TaskSubject(bus, "tester"), "r1:"+node+":1", d)
		require.NoError(t, err)
	}
	results, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	next := func() *taskv1.TaskResult {
		var got *taskv1.TaskResult
		require.Eventually(t, func() bool {
			b, err := results.Fetch(1, jetstreamWait(200*time.Millisecond))
			if err != nil {
				return false
			}
			for msg := range b.Messages() {
				got = &taskv1.TaskResult{}
				require.NoError(t, proto.Unmarshal(msg.Data(), got))
				require.NoError(t, msg.Ack())
			}
			return got != nil
		}, 20*time.Second, 10*time.Millisecond)
		return got
	}
	return bus, desk, send, next
}

// A task runs under its claim: the result carries the claim's token, and
// the claim is heartbeaten while the task runs and finished once the
// result is reported.
func TestTaskRunsUnderItsClaim(t *testing.T) {
	t.Parallel()
	_, desk, send, next := busWorker(t)
	send("n1", "sleep 0.5; echo ran")
	got := next()
	require.Equal(t, "ran\n", got.GetStdout())
	require.Equal(t, "token-1", got.GetClaimToken())
	require.Eventually(t, func() bool {
		desk.mu.Lock()
		defer desk.mu.Unlock()
		n := len(desk.beats)
		return n > 0 && desk.beats[n-1].GetFinished()
	}, 10*time.Second, 10*time.Millisecond)
	desk.mu.Lock()
	defer desk.mu.Unlock()
	require.Equal(t, "token-1", desk.beats[0].GetClaimToken())
	require.Equal(t, "r1:n1:1", desk.beats[0].GetAttemptId())
}

// A copy of a dispatch whose attempt was already run is dropped without
// running: nothing is reported for it.
func TestFinishedAttemptIsNotRunAgain(t *testing.T) {
	t.Parallel()
	_, desk, send, next := busWorker(t)
	desk.set(func(c *claimDesk) { c.outcome = taskv1.TaskClaimResponse_OUTCOME_FINISHED })
	send("copy", "echo must-not-run")
	require.Eventually(t, func() bool {
		desk.mu.Lock()
		defer desk.mu.Unlock()
		return desk.claims == 1
	}, 10*time.Second, 10*time.Millisecond)
	desk.set(func(c *claimDesk) { c.outcome = taskv1.TaskClaimResponse_OUTCOME_CLAIMED })
	send("after", "echo after")
	got := next()
	require.Equal(t, "after", got.GetNodeId(), "the copy reported nothing")
}

// A task whose claim was taken over (the Orchestrator answers a heartbeat
// with fenced) is stopped and reports nothing.
func TestFencedTaskStops(t *testing.T) {
	t.Parallel()
	_, desk, send, next := busWorker(t)
	desk.set(func(c *claimDesk) { c.fenced = true })
	start := time.Now()
	send("fenced", "sleep 300; echo must-not-finish")
	<-desk.heartbeat
	desk.set(func(c *claimDesk) { c.fenced = false })
	send("after", "echo after")
	got := next()
	require.Equal(t, "after", got.GetNodeId(), "the fenced task reported nothing")
	require.Less(t, time.Since(start), 250*time.Second, "the fenced task was stopped, not run to its end")
}

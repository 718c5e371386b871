package orchestrator_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

func TestDiamondRunsDependenciesFirst(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		SessionId: "sessions/" + session,
		Plan:      "sessions/" + session + "/plans/p1",
		Dag: dagOf(
			cmd("c", "echo C", "a", "b"),
			cmd("a", "echo A; echo warn >&2"),
			&orchestratorv1.Node{Id: "b", Prompt: "summarise the design", Role: "inspector"},
		),
	})
	require.Equal(t, "runs/"+run.GetId(), run.GetName())
	require.Equal(t, session, run.GetSessionId())
	require.Equal(t, int32(4), run.GetMaxConcurrency())
	require.Len(t, run.GetDag().GetNodes(), 3)

	run = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.NotNil(t, run.GetStartTime())
	require.NotNil(t, run.GetEndTime())
	require.Equal(t, []string{"c", "a", "b"}, []string{run.GetNodes()[0].GetNodeId(), run.GetNodes()[1].GetNodeId(), run.GetNodes()[2].GetNodeId()}, "nodes in DAG order")
	n := nodesByID(run)
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n[id].GetState(), id)
		require.Equal(t, int32(1), n[id].GetAttempt(), id)
		require.Equal(t, "w1", n[id].GetWorkerId(), id)
		require.NotNil(t, n[id].GetDuration(), id)
	}
	require.Equal(t, "A\n", n["a"].GetStdout())
	require.Equal(t, "warn\n", n["a"].GetStderr())
	require.Equal(t, fakeNoModel, n["b"].GetStdout())
	require.Equal(t, "C\n", n["c"].GetStdout())
	cStart := n["c"].GetStartTime().AsTime()
	require.False(t, cStart.Before(n["a"].GetEndTime().AsTime()), "c started before a ended")
	require.False(t, cStart.Before(n["b"].GetEndTime().AsTime()), "c started before b ended")

	waitMetric(t, h.reg, "sylk_orchestrator_nodes_dispatched_total", "", 3.0)
	evs := h.events(t, "t1", session, 8)
	var types []eventv1.EventType
	for _, e := range evs {
		types = append(types, e.GetType())
		require.Equal(t, "orchestrator", e.GetSource())
		require.Equal(t, session, e.GetSessionId())
		require.NoError(t, topology.CheckEvent(e), "every event carries the payload its type says")
		if e.GetNode() != nil {
			require.Equal(t, run.GetName(), e.GetNode().GetRun())
		} else {
			require.Equal(t, run.GetName(), e.GetRun().GetRun())
		}
	}
	require.Equal(t, eventv1.EventType_EVENT_TYPE_RUN_STARTED, types[0])
	require.Equal(t, eventv1.EventType_EVENT_TYPE_RUN_COMPLETED, types[len(types)-1])
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_SUCCEEDED, evs[len(evs)-1].GetRun().GetState())
	count := func(typ eventv1.EventType) int {
		c := 0
		for _, ty := range types {
			if ty == typ {
				c++
			}
		}
		return c
	}
	require.Equal(t, 3, count(eventv1.EventType_EVENT_TYPE_NODE_DISPATCHED))
	require.Equal(t, 3, count(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED))
	// c's dispatch comes after both a and b completed.
	cDispatched := slices.IndexFunc(evs, func(e *eventv1.Event) bool {
		return e.GetType() == eventv1.EventType_EVENT_TYPE_NODE_DISPATCHED && e.GetNode().GetNode() == "c"
	})
	bDispatched := slices.IndexFunc(evs, func(e *eventv1.Event) bool {
		return e.GetType() == eventv1.EventType_EVENT_TYPE_NODE_DISPATCHED && e.GetNode().GetNode() == "b"
	})
	require.Equal(t, "inspector", evs[bDispatched].GetNode().GetRole())
	require.Equal(t, int32(1), evs[bDispatched].GetNode().GetAttempt())
	completed := 0
	for _, e := range evs[:cDispatched] {
		if e.GetType() == eventv1.EventType_EVENT_TYPE_NODE_COMPLETED {
			completed++
		}
	}
	require.Equal(t, 2, completed)
}

func TestMaxConcurrencyOneSerialises(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 4)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		MaxConcurrency: 1,
		Dag:            dagOf(cmd("n1", "echo 1"), cmd("n2", "echo 2"), cmd("n3", "echo 3"), cmd("n4", "echo 4")),
	})
	run = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	nodes := slices.Clone(run.GetNodes())
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].GetStartTime().AsTime().Before(nodes[j].GetStartTime().AsTime()) })
	for i := 1; i < len(nodes); i++ {
		require.False(t, nodes[i].GetStartTime().AsTime().Before(nodes[i-1].GetEndTime().AsTime()),
			"%s started before %s ended", nodes[i].GetNodeId(), nodes[i-1].GetNodeId())
	}
}

func TestMaxConcurrencyBoundsDispatches(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		MaxConcurrency: 2,
		Dag:            dagOf(cmd("n1", "true"), cmd("n2", "true"), cmd("n3", "true"), cmd("n4", "true")),
	})
	got := h.tasks(t, "engineer", 2)
	h.noMoreTasks(t, "engineer")
	require.Equal(t, []string{"n1", "n2"}, []string{got[0].GetNodeId(), got[1].GetNodeId()})
	h.sendResult(t, "t1", run.GetId(), "n1", 1, 0, "", "r-n1")
	got = h.tasks(t, "engineer", 1)
	require.Equal(t, "n3", got[0].GetNodeId())
	h.resultsDrained(t, 1)
	h.noMoreTasks(t, "engineer")
}

func TestFailureSkipsDependentsAndFailsTheRun(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(
		cmd("a", "echo broken >&2; exit 3"),
		cmd("b", "echo never", "a"),
		cmd("c", "echo never", "b"),
		cmd("d", "echo independent"),
	)})
	run = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n := nodesByID(run)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n["a"].GetState())
	require.Equal(t, int32(3), n["a"].GetExitCode())
	require.Equal(t, "broken\n", n["a"].GetStderr())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SKIPPED, n["b"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SKIPPED, n["c"].GetState())
	require.Zero(t, n["b"].GetAttempt())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["d"].GetState())
	waitMetric(t, h.reg, "sylk_orchestrator_runs_total", "FAILED", 1.0)
}

func TestTimeoutFailsTheNode(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 1)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(
		&orchestratorv1.Node{Id: "slow", Command: "sleep 30", Timeout: durationpb.New(200 * time.Millisecond)},
	)})
	run = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n := run.GetNodes()[0]
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n.GetState())
	require.Contains(t, n.GetError(), "timed out")
}

func TestCreateRunRejectsInvalidRequests(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	tests := []struct {
		name string
		ctx  context.Context
		req  *orchestratorv1.CreateRunRequest
		code codes.Code
		msg  string
	}{
		{"cycle", userCtx("t1"), &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true", "c"), cmd("b", "true", "a"), cmd("c", "true", "b"))},
			codes.InvalidArgument, "dag: cycle in depends_on: a -> c -> b -> a"},
		{"unknown dependency", userCtx("t1"), &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true", "ghost"))},
			codes.InvalidArgument, `depends_on names unknown node "ghost"`},
		{"missing dag", userCtx("t1"), &orchestratorv1.CreateRunRequest{}, codes.InvalidArgument, "dag: is required"},
		{"empty dag", userCtx("t1"), &orchestratorv1.CreateRunRequest{Dag: dagOf()}, codes.InvalidArgument, "at least one node"},
		{"concurrency too high", userCtx("t1"), &orchestratorv1.CreateRunRequest{MaxConcurrency: 65, Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, "max_concurrency"},
		{"negative concurrency", userCtx("t1"), &orchestratorv1.CreateRunRequest{MaxConcurrency: -1, Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, "max_concurrency"},
		{"bad session", userCtx("t1"), &orchestratorv1.CreateRunRequest{SessionId: "s1", Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, "session_id"},
		{"bad plan", userCtx("t1"), &orchestratorv1.CreateRunRequest{Plan: "plans/1", Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, "plan"},
		{"plan of another session", userCtx("t1"), &orchestratorv1.CreateRunRequest{SessionId: "0b7e5c1e-3c55-4d7e-9a51-5d1f0c2b9a10",
			Plan: "sessions/5f0c1e2b-0000-4000-8000-000000000001/plans/p1", Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, "is in session 5f0c1e2b-0000-4000-8000-000000000001, but session_id is"},
		{"plan without its session", userCtx("t1"), &orchestratorv1.CreateRunRequest{
			Plan: "sessions/5f0c1e2b-0000-4000-8000-000000000001/plans/p1", Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, `but session_id is ""`},
		{"bad request id", userCtx("t1"), &orchestratorv1.CreateRunRequest{RequestId: "has space", Dag: dagOf(cmd("a", "true"))},
			codes.InvalidArgument, "request_id"},
		{"no identity", context.Background(), &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))},
			codes.Unauthenticated, "identity"},
		{"viewer", identity.NewContext(context.Background(), identity.Identity{TenantID: "t1", UserID: "u2", Role: identity.RoleViewer}),
			&orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))}, codes.PermissionDenied, "viewers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.svc.CreateRun(tt.ctx, tt.req)
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tt.msg)
			require.NotEmpty(t, apierr.Reason(err), "every error carries its reason")
			if tt.code == codes.InvalidArgument {
				require.Equal(t, apierr.ReasonInvalidField, apierr.Reason(err))
			}
		})
	}
	runs, nodes := countRows(t, h.db)
	require.Zero(t, runs)
	require.Zero(t, nodes)
}

func TestCreateRunIsIdempotentPerRequestID(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	req := &orchestratorv1.CreateRunRequest{RequestId: "req-1", Dag: dagOf(cmd("a", "true"), cmd("b", "true", "a"))}
	first := h.create(t, userCtx("t1"), req)
	again := h.create(t, userCtx("t1"), req)
	require.Equal(t, first.GetId(), again.GetId())
	other := h.create(t, userCtx("t2"), req)
	require.NotEqual(t, first.GetId(), other.GetId(), "request ids are per tenant")
	// ...and per user: a teammate reusing the id gets a run of their own.
	teammate := identity.NewContext(context.Background(), identity.Identity{TenantID: "t1", UserID: "u2", Role: identity.RoleMember})
	theirs := h.create(t, teammate, req)
	require.NotEqual(t, first.GetId(), theirs.GetId())
	// The id sent again with another request is refused, not answered
	// with the first run.
	_, err := h.svc.CreateRun(userCtx("t1"), &orchestratorv1.CreateRunRequest{RequestId: "req-1", Dag: dagOf(cmd("a", "echo other"))})
	require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
	require.Equal(t, orchestrator.ReasonRequestIDReused, apierr.Reason(err))
	require.Contains(t, status.Convert(err).Message(), first.GetName())
	// Concurrent retries race on the unique index; all get the same run.
	concurrent := &orchestratorv1.CreateRunRequest{RequestId: "req-2", Dag: dagOf(cmd("a", "true"), cmd("b", "true", "a"))}
	got := make(chan string, 5)
	for range 5 {
		go func() {
			resp, err := h.svc.CreateRun(userCtx("t3"), concurrent)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- resp.GetRun().GetId()
		}()
	}
	first3 := <-got
	for range 4 {
		require.Equal(t, first3, <-got)
	}
	runs, nodes := countRows(t, h.db)
	require.Equal(t, 4, runs)
	require.Equal(t, 8, nodes)
	// Node a of each run was dispatched once.
	tasks := h.tasks(t, "engineer", 4)
	h.noMoreTasks(t, "engineer")
	require.ElementsMatch(t, []string{"t1", "t1", "t2", "t3"},
		[]string{tasks[0].GetTenantId(), tasks[1].GetTenantId(), tasks[2].GetTenantId(), tasks[3].GetTenantId()})
}

func TestDuplicateResultIsAppliedOnce(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "echo a"), cmd("b", "echo b", "a"))})
	a := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "a", a.GetNodeId())
	require.Equal(t, int32(1), a.GetAttempt())
	require.Equal(t, "echo a", a.GetNode().GetCommand())
	require.Equal(t, int64(orchestrator.DefaultConfig().OutputLimitBytes), a.GetOutputLimitBytes())

	// The same result twice under different message ids (as a redelivery
	// after the de-duplication window would be), then a stale attempt.
	h.sendResult(t, "t1", run.GetId(), "a", 1, 0, "first\n", "dup-1")
	h.sendResult(t, "t1", run.GetId(), "a", 1, 1, "second\n", "dup-2")
	h.sendResult(t, "t1", run.GetId(), "a", 7, 1, "stale\n", "dup-3")
	h.resultsDrained(t, 3)

	b := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "b", b.GetNodeId())
	require.Equal(t, map[string]string{"a": "first\n"}, b.GetUpstreamOutputs())
	h.noMoreTasks(t, "engineer")
	n := nodesByID(h.get(t, ctx, run.GetName()))
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["a"].GetState())
	require.Equal(t, "first\n", n["a"].GetStdout())
	require.Equal(t, "test-worker", n["a"].GetWorkerId())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_DISPATCHED, n["b"].GetState())
	waitMetric(t, h.reg, "sylk_orchestrator_node_duration_seconds", "", 1.0)
	h.sendResult(t, "t1", run.GetId(), "b", 1, 0, "done\n", "b-1")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	// Results for another tenant's run id change nothing.
	h.sendResult(t, "t2", run.GetId(), "b", 1, 1, "intruder\n", "b-2")
	h.resultsDrained(t, 5)
	require.Equal(t, "done\n", nodesByID(h.get(t, ctx, run.GetName()))["b"].GetStdout())
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Dag: dagOf(cmd("a", "true"), cmd("b", "true", "a"))})
	h.tasks(t, "engineer", 1)

	_, err := h.svc.CancelRun(userCtx("t2"), &orchestratorv1.CancelRunRequest{Name: run.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant cannot see the run")

	// The running node's worker is told to stop it.
	signals := make(chan *nats.Msg, 4)
	sub, err := h.bus.Conn.ChanSubscribe(topology.TaskCancelSubject(h.bus), signals)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, h.bus.Conn.Flush())

	resp, err := h.svc.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: run.GetName()})
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_CANCELLED, resp.GetRun().GetState())
	n := nodesByID(resp.GetRun())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["a"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["b"].GetState())
	select {
	case m := <-signals:
		var c taskv1.TaskCancel
		require.NoError(t, proto.Unmarshal(m.Data, &c))
		require.Equal(t, "t1", c.GetTenantId())
		require.Equal(t, run.GetId(), c.GetRunId())
		require.Equal(t, "a", c.GetNodeId())
		require.Equal(t, int32(1), c.GetAttempt())
	case <-time.After(waitFor):
		t.Fatal("no cancel signal")
	}

	_, err = h.svc.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: run.GetName()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))

	// A late result of the cancelled attempt is ignored; nothing else runs.
	h.sendResult(t, "t1", run.GetId(), "a", 1, 0, "late\n", "late-a")
	h.resultsDrained(t, 1)
	got := h.get(t, ctx, run.GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_CANCELLED, got.GetState())
	n = nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["a"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["b"].GetState())
	h.noMoreTasks(t, "engineer")
	evs := h.events(t, "t1", session, 3)
	var types []eventv1.EventType
	for _, e := range evs {
		types = append(types, e.GetType())
	}
	require.Equal(t, []eventv1.EventType{eventv1.EventType_EVENT_TYPE_RUN_STARTED, eventv1.EventType_EVENT_TYPE_NODE_DISPATCHED,
		eventv1.EventType_EVENT_TYPE_RUN_COMPLETED}, types)
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_CANCELLED, evs[2].GetRun().GetState())
	waitMetric(t, h.reg, "sylk_orchestrator_runs_total", "CANCELLED", 1.0)
}

func TestGetRunErrors(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	tests := []struct {
		name string
		code codes.Code
	}{
		{"", codes.InvalidArgument},
		{"runs/not-a-uuid", codes.InvalidArgument},
		{"sessions/" + ids.New(), codes.InvalidArgument},
		{"runs/" + ids.New(), codes.NotFound},
	}
	for _, tt := range tests {
		_, err := h.svc.GetRun(userCtx("t1"), &orchestratorv1.GetRunRequest{Name: tt.name})
		require.Equal(t, tt.code, status.Code(err), "name %q: %v", tt.name, err)
	}
}

func TestListRunsPagesNewestFirst(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	var created []string
	for i := range 5 {
		req := &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))}
		if i%2 == 0 {
			req.SessionId = session
		}
		created = append(created, h.create(t, ctx, req).GetId())
	}
	h.create(t, userCtx("t2"), &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))})
	slices.Reverse(created)

	var listed []string
	token := ""
	for {
		resp, err := h.svc.ListRuns(ctx, &orchestratorv1.ListRunsRequest{PageSize: 2, PageToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.GetRuns()), 2)
		for _, r := range resp.GetRuns() {
			listed = append(listed, r.GetId())
			require.Nil(t, r.GetDag())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Equal(t, created, listed)

	resp, err := h.svc.ListRuns(ctx, &orchestratorv1.ListRunsRequest{SessionId: "sessions/" + session})
	require.NoError(t, err)
	require.Len(t, resp.GetRuns(), 3)
	for _, r := range resp.GetRuns() {
		require.Equal(t, session, r.GetSessionId())
	}
	_, err = h.svc.ListRuns(ctx, &orchestratorv1.ListRunsRequest{PageToken: "garbage!"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = h.svc.ListRuns(ctx, &orchestratorv1.ListRunsRequest{PageSize: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestRecoveryAfterRestart(t *testing.T) {
	t.Parallel()
	h, stop := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	inFlight := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"), cmd("b", "true", "a"))})
	h.tasks(t, "engineer", 1)
	stalled := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("x", "true"))})
	stop()

	// A crash before the stalled run was started, and the task queue lost.
	_, err := h.db.Exec(context.Background(), `UPDATE runs SET state = 'PENDING', start_time = NULL WHERE id = $1`, stalled.GetId())
	require.NoError(t, err)
	_, err = h.db.Exec(context.Background(), `UPDATE nodes SET state = 'PENDING', start_time = NULL WHERE run_id = $1`, stalled.GetId())
	require.NoError(t, err)
	require.NoError(t, h.bus.JS.DeleteStream(context.Background(), h.bus.Stream(topology.StreamTasks)))

	h2, _ := newOrchestrator(t, h.db, h.bus)
	got := h2.tasks(t, "engineer", 2)
	byRun := map[string]*taskv1.TaskDispatch{}
	for _, e := range got {
		byRun[e.GetRunId()] = e
	}
	require.Equal(t, "a", byRun[inFlight.GetId()].GetNodeId())
	require.Equal(t, int32(1), byRun[inFlight.GetId()].GetAttempt(), "the in-flight dispatch is re-sent as it was")
	require.Equal(t, "x", byRun[stalled.GetId()].GetNodeId())
	require.Equal(t, int32(2), byRun[stalled.GetId()].GetAttempt(), "a new dispatch gets a new attempt")
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, h2.get(t, ctx, stalled.GetName()).GetState())

	h2.sendResult(t, "t1", inFlight.GetId(), "a", 1, 0, "", "rec-a")
	require.Equal(t, "b", h2.tasks(t, "engineer", 1)[0].GetNodeId())
}

func TestUpstreamOutputsAreCapped(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("big", "true"), cmd("next", "true", "big"))})
	h.tasks(t, "engineer", 1)
	out := strings.Repeat("x", 40<<10) + "END"
	h.sendResult(t, "t1", run.GetId(), "big", 1, 0, out, "big-1")
	next := h.tasks(t, "engineer", 1)[0]
	up := next.GetUpstreamOutputs()["big"]
	require.Less(t, len(up), 17<<10)
	require.True(t, strings.HasSuffix(up, "xEND"))
	require.Contains(t, up, "bytes truncated]")
}

// TestOverGRPC goes through a real server with the interceptor chain, with
// the caller's identity in metadata.
func TestOverGRPC(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 1)
	client := orchestratorv1.NewWorkflowServiceClient(testenv.ServeGRPC(t, h.svc.Register))
	ctx := identity.AppendOutgoing(context.Background(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember})

	_, err := client.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true", "a"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "depends_on names the node itself")

	_, err = client.ListRuns(context.Background(), &orchestratorv1.ListRunsRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	created, err := client.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "echo over the wire"))})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := client.GetRun(ctx, &orchestratorv1.GetRunRequest{Name: created.GetRun().GetName()})
		require.NoError(t, err)
		return got.GetRun().GetState() == orchestratorv1.RunState_RUN_STATE_SUCCEEDED &&
			got.GetRun().GetNodes()[0].GetStdout() == "over the wire\n"
	}, waitFor, 20*time.Millisecond)
}

// A report whose worker times are outside what the database can store is
// applied without them: redelivered forever, it would hold up its run.
func TestResultWithUnstorableTimesIsApplied(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "echo a"))})
	require.Equal(t, "a", h.tasks(t, "engineer", 1)[0].GetNodeId())
	h.publishResult(t, "far-times", &taskv1.TaskResult{TenantId: "t1", RunId: run.GetId(), NodeId: "a", Attempt: 1, Stdout: "a\n",
		WorkerId: "test-worker", ReceivedTime: &timestamppb.Timestamp{Seconds: 1 << 43}, ReportedTime: &timestamppb.Timestamp{Seconds: -1 << 43}})
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Equal(t, "a\n", nodesByID(h.get(t, ctx, run.GetName()))["a"].GetStdout())
}

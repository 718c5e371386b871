package guide

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

type flowFixture struct {
	fixture
	db *pgxpool.Pool
	rc *redisx.Client
}

// newFlowFixture builds a Guide with cfg; run starts its consumers.
func newFlowFixture(t testing.TB, cfg Config, run bool) flowFixture {
	t.Helper()
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	bus := testenv.NATS(t)
	rc := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Redis: rc, Registerer: reg})
	require.NoError(t, err)
	if run {
		testenv.Start(t, svc.Run)
		// Messages are stored in group commits from here on.
		require.Eventually(t, svc.writes.started.Load, 10*time.Second, time.Millisecond)
	}
	return flowFixture{fixture: fixture{svc: svc, bus: bus, reg: reg}, db: db, rc: rc}
}

// toGuide publishes an agent's envelope to the Guide's inbox.
func (f flowFixture) toGuide(t *testing.T, env *messagev1.Envelope) {
	t.Helper()
	if env.GetId() == "" {
		env.Id = ids.New()
	}
	_, err := f.bus.Publish(context.Background(), topology.InboxSubject(f.bus, topology.AgentGuide), env.GetId(), env)
	require.NoError(t, err)
}

func (f flowFixture) waitEvent(t *testing.T, ctx context.Context, s *guidev1.Session, match func(*eventv1.Event) bool) *eventv1.Event {
	t.Helper()
	var found *eventv1.Event
	require.Eventually(t, func() bool {
		for _, e := range f.events(t, ctx, s, 0) {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	return found
}

// answer publishes an agent's answer to a routed request (correlation id
// corr) on the session's event stream, as the agent would.
func (f flowFixture) answer(t *testing.T, s *guidev1.Session, id, agent, corr string, a *messagev1.AgentAnswer) {
	t.Helper()
	ev := &eventv1.Event{SessionId: s.GetId(), Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, Source: agent,
		CorrelationId: corr, Text: a.GetText(), Payload: &eventv1.Event_MessageAnswered{MessageAnswered: a}}
	_, err := topology.PublishEvent(context.Background(), f.bus, s.GetTenantId(), id, ev)
	require.NoError(t, err)
}

func (f flowFixture) pendingState(t *testing.T, corr string) string {
	t.Helper()
	var st string
	require.NoError(t, f.db.QueryRow(context.Background(), `SELECT state FROM pending_requests WHERE correlation_id = $1`, corr).Scan(&st))
	return st
}

// Acceptance behaviours 12 and 13: every legal transition sets its
// timestamp; illegal ones fail naming the states.
func TestSessionStateMachine(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	resp, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{StartInactive: true, Session: &guidev1.Session{
		DisplayName: "sm", Config: &guidev1.SessionConfig{MaxConcurrentTasks: 3}}})
	require.NoError(t, err)
	s := resp.GetSession()
	require.Equal(t, guidev1.SessionState_SESSION_STATE_CREATED, s.GetState())
	require.Nil(t, s.GetActivateTime())
	require.Equal(t, int32(3), s.GetConfig().GetMaxConcurrentTasks())
	require.Equal(t, int32(DefaultSessionMaxEngineers), s.GetConfig().GetMaxEngineers())
	require.Equal(t, DefaultSessionAutoSuspendAfter, s.GetConfig().GetAutoSuspendAfter().AsDuration())

	_, err = f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, "session is created; cannot suspend (allowed only from active)")
	_, err = f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "/help"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionNotActive, "session is created")

	act, err := f.svc.ActivateSession(ctx, &guidev1.ActivateSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, act.GetSession().GetState())
	require.NotNil(t, act.GetSession().GetActivateTime())
	susp, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.NotNil(t, susp.GetSession().GetSuspendTime())
	_, err = f.svc.ActivateSession(ctx, &guidev1.ActivateSessionRequest{Name: s.GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, "session is suspended; cannot activate (allowed only from created)")
	res, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, res.GetSession().GetState())
	done, err := f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: s.GetName(), Summary: "ok"})
	require.NoError(t, err)
	require.NotNil(t, done.GetSession().GetCompleteTime())
	var got []string
	for _, tr := range done.GetSession().GetTransitions() {
		got = append(got, fmt.Sprintf("%s>%s", tr.GetFrom(), tr.GetTo()))
		require.NotNil(t, tr.GetTime())
	}
	require.Equal(t, []string{
		"SESSION_STATE_UNSPECIFIED>SESSION_STATE_CREATED", "SESSION_STATE_CREATED>SESSION_STATE_ACTIVE",
		"SESSION_STATE_ACTIVE>SESSION_STATE_SUSPENDED", "SESSION_STATE_SUSPENDED>SESSION_STATE_ACTIVE",
		"SESSION_STATE_ACTIVE>SESSION_STATE_COMPLETED"}, got)

	_, err = f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, "session is completed; cannot resume (allowed only from suspended)")
	failed := f.createSession(t, ctx, "f")
	_, err = f.svc.FailSession(ctx, ownerIdentity("t1", "u1"), failed.GetId(), "boom")
	require.NoError(t, err)
	_, err = f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: failed.GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, "session is failed; cannot complete (allowed only from active or suspended)")

	_, err = f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{Config: &guidev1.SessionConfig{MaxEngineers: -1}}})
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "session.config.max_engineers")
	_, err = f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{Config: &guidev1.SessionConfig{
		TaskTimeout: &durationpb.Duration{Seconds: 500 * 365 * 24 * 3600}}}})
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "session.config.task_timeout: must be between 1s and 8784h0m0s (a year)")
}

// Acceptance behaviour 14.
func TestSwitchSession(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	a := f.createSession(t, ctx, "a")
	b, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{StartInactive: true, Session: &guidev1.Session{DisplayName: "b"}})
	require.NoError(t, err)
	other := f.createSession(t, as("t1", "u2"), "someone else's")

	sw, err := f.svc.SwitchSession(ctx, &guidev1.SwitchSessionRequest{Name: b.GetSession().GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, sw.GetSession().GetState())
	require.Len(t, sw.GetSuspended(), 1)
	require.Equal(t, a.GetId(), sw.GetSuspended()[0].GetId())
	active, err := f.svc.GetActiveSession(ctx, &guidev1.GetActiveSessionRequest{})
	require.NoError(t, err)
	require.Equal(t, b.GetSession().GetId(), active.GetSession().GetId())
	got, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: a.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_SUSPENDED, got.GetSession().GetState())
	// Another user's active session is untouched.
	o, err := f.svc.GetSession(as("t1", "u2"), &guidev1.GetSessionRequest{Name: other.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, o.GetSession().GetState())

	// Back to A: resumed from its snapshot, B suspended.
	sw, err = f.svc.SwitchSession(ctx, &guidev1.SwitchSessionRequest{Name: a.GetName()})
	require.NoError(t, err)
	require.Equal(t, a.GetId(), sw.GetSession().GetId())
	require.Len(t, sw.GetSuspended(), 1)

	_, err = f.svc.SwitchSession(ctx, &guidev1.SwitchSessionRequest{Name: other.GetName()})
	testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
	_, err = f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: b.GetSession().GetName()})
	require.NoError(t, err)
	_, err = f.svc.SwitchSession(ctx, &guidev1.SwitchSessionRequest{Name: b.GetSession().GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, "session is completed; cannot switch to it")

	// Concurrent switches of one user leave exactly one of them active.
	var wg sync.WaitGroup
	for _, s := range []*guidev1.Session{a, f.createSession(t, ctx, "c"), f.createSession(t, ctx, "d")} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.svc.SwitchSession(ctx, &guidev1.SwitchSessionRequest{Name: s.GetName()})
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	list, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{State: guidev1.SessionState_SESSION_STATE_ACTIVE})
	require.NoError(t, err)
	require.Len(t, list.GetSessions(), 1)
}

// Acceptance behaviours 15 and 16: a suspend/resume round trip restores
// the context, the pending clarifications and the pending requests; a
// session's context is invisible to other users and tenants.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "snap")
	c := &guidev1.SessionContext{CurrentTask: "cache", CompletedSteps: []string{"read"}, NextSteps: []string{"write"},
		ModifiedFiles: []string{"a.go"}, UserWants: []string{"fast"}}
	up, err := f.svc.UpdateSessionContext(ctx, &guidev1.UpdateSessionContextRequest{Name: s.GetName(), Context: c})
	require.NoError(t, err)
	require.Equal(t, int64(1), up.GetVersion())
	_, err = f.svc.UpdateSessionContext(ctx, &guidev1.UpdateSessionContextRequest{Name: s.GetName(), Context: c})
	testenv.RequireReason(t, err, codes.Aborted, reasonContextVersionMismatch, "context version is 1, not 0")

	// The question comes last: the next message would answer it.
	routed := f.send(t, ctx, s, "where is the function ParseConfig defined?")
	require.Equal(t, "librarian", routed.GetRoute().GetTarget())
	ask := f.send(t, ctx, s, "hello there")
	require.Empty(t, ask.GetRoute().GetTarget())
	clarBefore, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Len(t, clarBefore.GetClarifications(), 1)

	_, err = f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	snap, err := f.svc.GetSessionSnapshot(ctx, &guidev1.GetSessionSnapshotRequest{Name: s.GetName()})
	require.NoError(t, err)
	sn := snap.GetSnapshot()
	require.True(t, proto.Equal(c, sn.GetContext()))
	require.Equal(t, int64(1), sn.GetContextVersion())
	require.Len(t, sn.GetPendingClarifications(), 1)
	require.Equal(t, "guide", sn.GetPendingClarifications()[0].GetRequestingAgent())
	require.Len(t, sn.GetPendingRequests(), 1)
	require.Equal(t, map[string]string{routed.GetCorrelationId(): "librarian"}, sn.GetActiveRoutes())
	require.Equal(t, "orchestrator not configured", sn.GetDagError())
	require.Nil(t, sn.GetRestoreTime())
	require.Equal(t, stateFrozen, f.pendingState(t, routed.GetCorrelationId()))
	_, err = f.svc.UpdateSessionContext(ctx, &guidev1.UpdateSessionContextRequest{Name: s.GetName(), Context: &guidev1.SessionContext{}, Version: 1})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionNotOpen, "session is suspended; cannot update its context")

	_, err = f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	after, err := f.svc.GetSessionContext(ctx, &guidev1.GetSessionContextRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.True(t, proto.Equal(c, after.GetContext()))
	require.Equal(t, int64(1), after.GetVersion())
	clarAfter, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.True(t, proto.Equal(clarBefore, clarAfter))
	require.Equal(t, statePending, f.pendingState(t, routed.GetCorrelationId()))
	snap, err = f.svc.GetSessionSnapshot(ctx, &guidev1.GetSessionSnapshotRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.NotNil(t, snap.GetSnapshot().GetRestoreTime())

	// Isolation.
	for _, who := range []context.Context{as("t1", "u2"), as("t2", "u1")} {
		_, err := f.svc.GetSessionContext(who, &guidev1.GetSessionContextRequest{Name: s.GetName()})
		testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
		_, err = f.svc.GetSessionSnapshot(who, &guidev1.GetSessionSnapshotRequest{Name: s.GetName()})
		testenv.RequireReason(t, err, codes.NotFound, "SNAPSHOT_NOT_FOUND", "not found")
	}
}

// fakeOrchestrator answers as the orchestrator does: a listed run carries
// its state only, GetRun has its nodes.
type fakeOrchestrator struct {
	orchestratorv1.WorkflowServiceClient
	runs []*orchestratorv1.Run
}

func (o fakeOrchestrator) ListRuns(context.Context, *orchestratorv1.ListRunsRequest, ...grpc.CallOption) (*orchestratorv1.ListRunsResponse, error) {
	resp := &orchestratorv1.ListRunsResponse{}
	for _, r := range o.runs {
		resp.Runs = append(resp.Runs, &orchestratorv1.Run{Name: r.GetName(), State: r.GetState()})
	}
	return resp, nil
}

func (o fakeOrchestrator) GetRun(_ context.Context, req *orchestratorv1.GetRunRequest, _ ...grpc.CallOption) (*orchestratorv1.GetRunResponse, error) {
	for _, r := range o.runs {
		if r.GetName() == req.GetName() {
			return &orchestratorv1.GetRunResponse{Run: r}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "no such run")
}

func (o fakeOrchestrator) PauseSessionRuns(context.Context, *orchestratorv1.PauseSessionRunsRequest, ...grpc.CallOption) (*orchestratorv1.PauseSessionRunsResponse, error) {
	return &orchestratorv1.PauseSessionRunsResponse{}, nil
}

func (o fakeOrchestrator) ResumeSessionRuns(context.Context, *orchestratorv1.ResumeSessionRunsRequest, ...grpc.CallOption) (*orchestratorv1.ResumeSessionRunsResponse, error) {
	return &orchestratorv1.ResumeSessionRunsResponse{}, nil
}

// A suspended session's snapshot holds the state of its runs' nodes (spec
// A-17), and /tasks lists them.
func TestSnapshotHoldsDAGState(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	f.svc.orchestrator = fakeOrchestrator{runs: []*orchestratorv1.Run{{Name: "runs/r1", State: orchestratorv1.RunState_RUN_STATE_RUNNING,
		Nodes: []*orchestratorv1.NodeStatus{
			{NodeId: "a", State: orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, Stdout: "built"},
			{NodeId: "b", State: orchestratorv1.NodeState_NODE_STATE_PENDING},
		}}}}
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "dag")
	tasks := f.send(t, ctx, s, "/tasks")
	require.Contains(t, tasks.GetReply(), "runs/r1  RUNNING\n  - a: SUCCEEDED\n  - b: PENDING")

	_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	snap, err := f.svc.GetSessionSnapshot(ctx, &guidev1.GetSessionSnapshotRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Empty(t, snap.GetSnapshot().GetDagError())
	require.Len(t, snap.GetSnapshot().GetDags(), 1)
	d := snap.GetSnapshot().GetDags()[0]
	require.Equal(t, "runs/r1", d.GetRun())
	require.Equal(t, map[string]string{"a": "NODE_STATE_SUCCEEDED", "b": "NODE_STATE_PENDING"}, d.GetNodeStates())
	require.Equal(t, map[string]string{"a": "built"}, d.GetCompletedResults())
	require.Equal(t, []string{"b"}, d.GetPendingNodes())
	require.False(t, d.GetTruncated())
}

// The snapshot and /tasks stay bounded: runs that ended are not read with
// their nodes (but the newest for /tasks), /tasks lists 50 tasks a run, and
// a snapshot keeps at most 1 MiB of results.
func TestSnapshotAndTasksAreBounded(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	var big []*orchestratorv1.NodeStatus
	for i := range 2000 {
		big = append(big, &orchestratorv1.NodeStatus{NodeId: fmt.Sprintf("n%04d", i), State: orchestratorv1.NodeState_NODE_STATE_SUCCEEDED,
			Stdout: strings.Repeat("x", 2000)})
	}
	f.svc.orchestrator = fakeOrchestrator{runs: []*orchestratorv1.Run{
		{Name: "runs/new", State: orchestratorv1.RunState_RUN_STATE_RUNNING, Nodes: big},
		{Name: "runs/old", State: orchestratorv1.RunState_RUN_STATE_SUCCEEDED, Nodes: []*orchestratorv1.NodeStatus{
			{NodeId: "done", State: orchestratorv1.NodeState_NODE_STATE_SUCCEEDED}}},
	}}
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "big")
	reply := f.send(t, ctx, s, "/tasks").GetReply()
	require.Contains(t, reply, "  - n0049: SUCCEEDED\n  ... and 1950 more (GET /v1/runs/new)")
	require.NotContains(t, reply, "n0050")
	require.Contains(t, reply, "runs/old  SUCCEEDED")
	require.NotContains(t, reply, "done:", "an older run that ended is not read in full")

	_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	snap, err := f.svc.GetSessionSnapshot(ctx, &guidev1.GetSessionSnapshotRequest{Name: s.GetName()})
	require.NoError(t, err)
	dags := snap.GetSnapshot().GetDags()
	require.Len(t, dags, 2)
	require.True(t, dags[0].GetTruncated())
	require.Len(t, dags[0].GetNodeStates(), 2000)
	total := 0
	for _, r := range dags[0].GetCompletedResults() {
		total += len(r)
	}
	require.LessOrEqual(t, total, maxSnapshotResultBytes)
	require.Greater(t, len(dags[0].GetCompletedResults()), 1000, "results are kept up to the bound")
	require.Empty(t, dags[1].GetNodeStates(), "a run that ended keeps its state only")
	require.Equal(t, "RUN_STATE_SUCCEEDED", dags[1].GetState())
}

// The reaper suspends idle sessions, fails old ones and expires requests,
// and two replicas never take the same row.
func TestReaper(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	other, err := New(Config{}, app.Deps{Log: logx.Discard(), DB: f.db, Bus: f.bus, Redis: f.rc, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	const n = 6
	var sessions []*guidev1.Session
	for i := range n {
		sessions = append(sessions, f.createSession(t, as("t1", fmt.Sprintf("idle%d", i)), "idle"))
	}
	short, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{
		Config: &guidev1.SessionConfig{SessionTimeout: durationOf(time.Hour)}}})
	require.NoError(t, err)
	reader := inboxReader(t, f.bus, "librarian")
	routed := f.send(t, ctx, short.GetSession(), "where is the function ParseConfig defined?")
	env := nextEnvelope(t, reader)

	later := time.Now().UTC().Add(3 * time.Hour)
	f.svc.now = func() time.Time { return later }
	other.now = f.svc.now
	var wg sync.WaitGroup
	stats := make([]reapStats, 2)
	for i, svc := range []*Service{f.svc, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := svc.reapOnce(context.Background())
			require.NoError(t, err)
			stats[i] = st
		}()
	}
	wg.Wait()
	// The session with a one-hour timeout fails; the others were idle for
	// longer than the two-hour default and are suspended, each once.
	require.Equal(t, n, stats[0].suspended+stats[1].suspended, "%+v", stats)
	require.Equal(t, 1, stats[0].failed+stats[1].failed, "%+v", stats)
	for i, s := range sessions {
		got, err := f.svc.GetSession(as("t1", fmt.Sprintf("idle%d", i)), &guidev1.GetSessionRequest{Name: s.GetName()})
		require.NoError(t, err)
		require.Equal(t, guidev1.SessionState_SESSION_STATE_SUSPENDED, got.GetSession().GetState())
		tr := got.GetSession().GetTransitions()
		require.Len(t, tr, 3)
		require.Equal(t, "idle", tr[2].GetReason())
	}
	got, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: short.GetSession().GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_FAILED, got.GetSession().GetState())
	require.Contains(t, got.GetSession().GetFailureReason(), "timed out after 1h0m0s")
	// The failed session's request was closed, not expired.
	require.Equal(t, stateClosed, f.pendingState(t, routed.GetCorrelationId()))
	_ = env
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func ownerIdentity(tenant, user string) identity.Identity {
	return identity.Identity{TenantID: tenant, UserID: user}
}

func jetstreamWait(d time.Duration) jetstream.FetchOpt { return jetstream.FetchMaxWait(d) }

// A request with no answer in time gives an error event and a dead
// letter, which can be replayed.
func TestRequestTimeoutAndDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "timeout")
	reader := inboxReader(t, f.bus, "academic")
	r := f.send(t, ctx, s, "What are the best practices for retry backoff? Point me to the docs.")
	first := nextEnvelope(t, reader)
	later := time.Now().UTC().Add(DefaultRequestTimeout + time.Minute)
	f.svc.now = func() time.Time { return later }
	st, err := f.svc.reapOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.expired)
	require.Equal(t, stateTimedOut, f.pendingState(t, r.GetCorrelationId()))
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool { return e.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT })
	require.Equal(t, r.GetCorrelationId(), ev.GetCorrelationId())
	require.Contains(t, ev.GetText(), "No answer from the academic")
	require.Equal(t, "academic", ev.GetMessageUnanswered().GetTarget())
	require.Equal(t, "DEADLINE_EXCEEDED", ev.GetMessageUnanswered().GetReason())
	require.Equal(t, DefaultRequestTimeout, ev.GetMessageUnanswered().GetWaited().AsDuration())

	dl, err := f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: s.GetId()})
	require.NoError(t, err)
	require.Len(t, dl.GetDeadLetters(), 1)
	d := dl.GetDeadLetters()[0]
	require.Equal(t, "academic", d.GetTarget())
	require.Equal(t, r.GetCorrelationId(), d.GetCorrelationId())
	none, err := f.svc.ListDeadLetters(as("t2", "u1"), &guidev1.ListDeadLettersRequest{})
	require.NoError(t, err)
	require.Empty(t, none.GetDeadLetters())
	// Another member of the tenant neither sees nor replays it (a replay
	// sends u1's message again); an admin of the tenant sees it.
	theirs, err := f.svc.ListDeadLetters(as("t1", "u2"), &guidev1.ListDeadLettersRequest{})
	require.NoError(t, err)
	require.Empty(t, theirs.GetDeadLetters())
	_, err = f.svc.ReplayDeadLetter(as("t1", "u2"), &guidev1.ReplayDeadLetterRequest{Name: d.GetName()})
	testenv.RequireReason(t, err, codes.NotFound, "DEAD_LETTER_NOT_FOUND", "not found")
	all, err := f.svc.ListDeadLetters(asAdmin("t1", "admin"), &guidev1.ListDeadLettersRequest{})
	require.NoError(t, err)
	require.Len(t, all.GetDeadLetters(), 1)

	rep, err := f.svc.ReplayDeadLetter(ctx, &guidev1.ReplayDeadLetterRequest{Name: d.GetName()})
	require.NoError(t, err)
	require.Equal(t, int32(1), rep.GetDeadLetter().GetReplayCount())
	again := nextEnvelope(t, reader)
	require.Equal(t, first.GetCorrelationId(), again.GetCorrelationId())
	require.Equal(t, int32(2), again.GetAttempt())
	require.NotEqual(t, first.GetId(), again.GetId())
	require.Equal(t, statePending, f.pendingState(t, r.GetCorrelationId()))
	_, err = f.svc.ReplayDeadLetter(as("t2", "u1"), &guidev1.ReplayDeadLetterRequest{Name: d.GetName()})
	testenv.RequireReason(t, err, codes.NotFound, "DEAD_LETTER_NOT_FOUND", "not found")
}

// A replayed request that times out again gives a second error event and
// a second dead letter, and both say how long the request waited.
func TestReplayedRequestTimesOutAgain(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "timeout twice")
	reader := inboxReader(t, f.bus, "academic")
	r := f.send(t, ctx, s, "What are the best practices for retry backoff? Point me to the docs.")
	nextEnvelope(t, reader)
	timeouts := func() []*eventv1.Event {
		var out []*eventv1.Event
		for _, e := range f.events(t, ctx, s, 0) {
			if e.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT {
				out = append(out, e)
			}
		}
		return out
	}

	later := time.Now().UTC().Add(DefaultRequestTimeout + time.Minute)
	f.svc.now = func() time.Time { return later }
	st, err := f.svc.reapOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.expired)
	f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool { return e.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT })
	dl, err := f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: s.GetId()})
	require.NoError(t, err)
	require.Len(t, dl.GetDeadLetters(), 1)
	_, err = f.svc.ReplayDeadLetter(ctx, &guidev1.ReplayDeadLetterRequest{Name: dl.GetDeadLetters()[0].GetName()})
	require.NoError(t, err)
	nextEnvelope(t, reader)

	evenLater := later.Add(DefaultRequestTimeout + time.Minute)
	f.svc.now = func() time.Time { return evenLater }
	st, err = f.svc.reapOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.expired)
	require.Eventually(t, func() bool { return len(timeouts()) == 2 }, 10*time.Second, 20*time.Millisecond)
	for _, e := range timeouts() {
		require.Equal(t, r.GetCorrelationId(), e.GetCorrelationId())
		require.Contains(t, e.GetText(), "No answer from the academic within 2m0s.")
	}
	dl, err = f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: s.GetId()})
	require.NoError(t, err)
	require.Len(t, dl.GetDeadLetters(), 2)
	for _, d := range dl.GetDeadLetters() {
		require.Equal(t, "no answer from the academic within 2m0s", d.GetReason())
	}
}

// An answer that arrives while its session is suspended answers the
// request: the resumed session does not report it timed out.
func TestAnswerWhileSuspended(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s, r, env := f.routedThenSuspended(t, ctx, "answer while suspended")

	f.answer(t, s, env.GetId()+":answer", "librarian", env.GetCorrelationId(), &messagev1.AgentAnswer{Text: "config.go:12"})
	require.Eventually(t, func() bool { return f.pendingState(t, r.GetCorrelationId()) == stateAnswered }, 10*time.Second, 20*time.Millisecond)

	_, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	// Only pending requests expire.
	require.Equal(t, stateAnswered, f.pendingState(t, r.GetCorrelationId()))
}

// A dead letter is replayed only into an active session: a replay sends
// its user's message again, which a finished session no longer takes and a
// suspended one takes only once resumed.
func TestReplayDeadLetterNeedsActiveSession(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	reader := inboxReader(t, f.bus, "academic")
	later := time.Now().UTC().Add(DefaultRequestTimeout + time.Minute)
	routed := func(name string) (*guidev1.Session, *guidev1.SendMessageResponse) {
		s := f.createSession(t, ctx, name)
		r := f.send(t, ctx, s, "What are the best practices for retry backoff? Point me to the docs.")
		nextEnvelope(t, reader)
		return s, r
	}
	suspended, rs := routed("suspended")
	completed, rc := routed("completed")
	f.svc.now = func() time.Time { return later }
	st, err := f.svc.reapOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, st.expired)
	f.svc.now = time.Now

	_, err = f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: suspended.GetName()})
	require.NoError(t, err)
	_, err = f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: completed.GetName()})
	require.NoError(t, err)
	for _, c := range []struct {
		s    *guidev1.Session
		r    *guidev1.SendMessageResponse
		want string
	}{{suspended, rs, "session is suspended; resume it first"}, {completed, rc, "session is completed"}} {
		dl, err := f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: c.s.GetId()})
		require.NoError(t, err)
		require.Len(t, dl.GetDeadLetters(), 1)
		_, err = f.svc.ReplayDeadLetter(ctx, &guidev1.ReplayDeadLetterRequest{Name: dl.GetDeadLetters()[0].GetName()})
		testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionNotActive, c.want)
		require.Equal(t, stateTimedOut, f.pendingState(t, c.r.GetCorrelationId()))
	}
	// Nothing was sent again; once resumed, the suspended session's dead
	// letter is replayed.
	_, err = f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: suspended.GetName()})
	require.NoError(t, err)
	dl, err := f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: suspended.GetId()})
	require.NoError(t, err)
	_, err = f.svc.ReplayDeadLetter(ctx, &guidev1.ReplayDeadLetterRequest{Name: dl.GetDeadLetters()[0].GetName()})
	require.NoError(t, err)
	require.Equal(t, rs.GetCorrelationId(), nextEnvelope(t, reader).GetCorrelationId())
	require.Equal(t, statePending, f.pendingState(t, rs.GetCorrelationId()))
}

// Tier 1: a repeated request is routed from the cache; a knowledge answer
// with confidence above 0.8 is cached by intent and subject (acceptance
// behaviour 22) until an index run finishes.
func TestRouteAndAnswerCache(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "cache")
	reader := inboxReader(t, f.bus, "librarian")
	const q = "where is the auth middleware"
	first := f.send(t, ctx, s, q)
	require.Equal(t, "classifier", first.GetRoute().GetTier())
	require.Equal(t, "LOCATE", first.GetRoute().GetKnowledgeIntent())
	require.Greater(t, first.GetRoute().GetConfidence(), 0.8)
	env := nextEnvelope(t, reader)
	require.Equal(t, "LOCATE", env.GetMetadata()["routing.knowledge_intent"])
	require.Equal(t, "auth_middleware", env.GetStructuredIntent().GetSubject())

	// The librarian answers on the event stream.
	f.answer(t, s, env.GetId()+":answer", "librarian", env.GetCorrelationId(), &messagev1.AgentAnswer{Text: "auth/middleware.go",
		Query: "auth middleware", Hits: []*messagev1.Hit{{Path: "auth/middleware.go"}}})
	require.Eventually(t, func() bool { return f.pendingState(t, first.GetCorrelationId()) == stateAnswered }, 10*time.Second, 20*time.Millisecond)
	// The answer is cached once the request is marked answered.
	require.Eventually(t, func() bool {
		var key string
		if err := f.db.QueryRow(context.Background(), `SELECT cache_key FROM pending_requests WHERE correlation_id = $1`,
			first.GetCorrelationId()).Scan(&key); err != nil || key == "" {
			return false
		}
		_, ok := f.svc.cache.answer(context.Background(), key)
		return ok
	}, 10*time.Second, 20*time.Millisecond)

	second := f.send(t, ctx, s, "Where is the  auth middleware?")
	require.Equal(t, "cache", second.GetRoute().GetTier())
	require.True(t, second.GetRoute().GetCached())
	require.Equal(t, "librarian", second.GetRoute().GetTarget())
	require.Equal(t, "auth/middleware.go", second.GetReply())
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool {
		return e.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED && e.GetCorrelationId() == second.GetCorrelationId()
	})
	require.Equal(t, "librarian", ev.GetSource())
	require.True(t, ev.GetMessageAnswered().GetCached())
	require.Equal(t, "librarian", ev.GetMessageAnswered().GetAgent())
	require.Equal(t, "auth/middleware.go", ev.GetMessageAnswered().GetHits()[0].GetPath(), "the cached answer keeps its hits")

	// Confidence at or under 0.8: no lookup.
	key, _ := f.svc.cache.answerKey(context.Background(), "t1", s.GetId(), "", Classification{Target: "librarian", Confidence: 0.8,
		KnowledgeIntent: "LOCATE", Subject: "auth_middleware"})
	require.Empty(t, key)

	cachedNow := func() bool {
		k, _ := f.svc.cache.answerKey(context.Background(), "t1", s.GetId(), "", Classification{Target: "librarian", Confidence: 0.9,
			KnowledgeIntent: "LOCATE", Subject: "auth_middleware"})
		_, ok := f.svc.cache.answer(context.Background(), k)
		return ok
	}
	// Another tenant's finished index run leaves this tenant's answers.
	done := func(tenant string) *librarianv1.IndexNotice {
		return &librarianv1.IndexNotice{TenantId: tenant, Repository: "repositories/r", Progress: &eventv1.IndexingProgress{Done: true}}
	}
	require.NoError(t, f.bus.PublishCore(context.Background(), topology.IndexProgressSubject(f.bus, "r2"), done("t2")))
	require.Eventually(t, func() bool { return f.svc.cache.generation(context.Background(), "t2") == "0.1" }, 10*time.Second, 20*time.Millisecond)
	require.True(t, cachedNow())
	// The tenant's own finished index run retires its librarian answers.
	require.NoError(t, f.bus.PublishCore(context.Background(), topology.IndexProgressSubject(f.bus, "r1"), done("t1")))
	require.Eventually(t, func() bool {
		k, _ := f.svc.cache.answerKey(context.Background(), "t1", s.GetId(), "", Classification{Target: "librarian", Confidence: 0.9,
			KnowledgeIntent: "LOCATE", Subject: "auth_middleware"})
		_, ok := f.svc.cache.answer(context.Background(), k)
		return !ok
	}, 10*time.Second, 20*time.Millisecond)
	third := f.send(t, ctx, s, q)
	require.False(t, third.GetRoute().GetCached())
	require.Equal(t, "cache", third.GetRoute().GetTier(), "the route itself is still cached")
	nextEnvelope(t, reader)
}

// A reroute of a suspended session's request keeps the request frozen: it
// does not time out while the session is suspended.
func TestRerouteWhileSuspended(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	acad := inboxReader(t, f.bus, "academic")
	s, r, env := f.routedThenSuspended(t, ctx, "reroute while suspended")

	f.toGuide(t, &messagev1.Envelope{CorrelationId: env.GetCorrelationId(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1",
		Source: "librarian", Target: "guide", Type: messagev1.MessageType_MESSAGE_TYPE_REROUTE_REQUEST,
		StructuredIntent: env.GetStructuredIntent(), ConfidenceChain: env.GetConfidenceChain(),
		Payload: &messagev1.Envelope_RerouteRequest{RerouteRequest: &messagev1.RerouteRequest{Source: "librarian",
			Reason: "external knowledge", SuggestedTarget: "academic"}}})
	require.Equal(t, r.GetCorrelationId(), nextEnvelope(t, acad).GetCorrelationId())
	require.Equal(t, stateFrozen, f.pendingState(t, r.GetCorrelationId()))

	_, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, statePending, f.pendingState(t, r.GetCorrelationId()))
}

// An agent's knowledge request for a suspended session starts frozen, so
// it cannot time out during the suspension; the resume thaws it with the
// requests of the snapshot, its deadline moved on by the time it was frozen.
func TestAgentRequestWhileSuspended(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	arch := inboxReader(t, f.bus, "archivalist")
	s, r, _ := f.routedThenSuspended(t, ctx, "agent request while suspended")
	f.toGuide(t, &messagev1.Envelope{CorrelationId: ids.New(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1", Source: "architect",
		Type:    messagev1.MessageType_MESSAGE_TYPE_HISTORY_REQUEST,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: "earlier decisions on the cache"}}})
	routed := nextEnvelope(t, arch)
	require.Equal(t, stateFrozen, f.pendingState(t, routed.GetCorrelationId()))
	deadline := func(corr string) (d time.Time) {
		require.NoError(t, f.db.QueryRow(context.Background(), `SELECT deadline FROM pending_requests WHERE correlation_id = $1`, corr).Scan(&d))
		return d
	}
	before := deadline(routed.GetCorrelationId())

	_, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	for _, corr := range []string{r.GetCorrelationId(), routed.GetCorrelationId()} {
		require.Equal(t, statePending, f.pendingState(t, corr))
	}
	require.False(t, deadline(routed.GetCorrelationId()).Before(before), "the deadline moved on, not back")
}

// routedThenSuspended sends a question the Guide routes to the Librarian,
// takes the routed envelope from the Librarian's inbox, then suspends the
// session, which freezes the request.
func (f flowFixture) routedThenSuspended(t *testing.T, ctx context.Context, name string) (*guidev1.Session, *guidev1.SendMessageResponse, *messagev1.Envelope) {
	t.Helper()
	s := f.createSession(t, ctx, name)
	lib := inboxReader(t, f.bus, "librarian")
	r := f.send(t, ctx, s, "where is the function ParseConfig defined?")
	require.Equal(t, "librarian", r.GetRoute().GetTarget())
	env := nextEnvelope(t, lib)
	_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, stateFrozen, f.pendingState(t, r.GetCorrelationId()))
	return s, r, env
}

// Acceptance behaviours 4, 5 and 23: a one-hop reroute goes to the
// suggested target with its history; the third hop goes to the user with
// every reason; each is an EXPLICIT_REDIRECT routing failure.
func TestReroutes(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "reroute")
	lib := inboxReader(t, f.bus, "librarian")
	planner := inboxReader(t, f.bus, "architect")
	arch := inboxReader(t, f.bus, "archivalist")
	acad := inboxReader(t, f.bus, "academic")
	r := f.send(t, ctx, s, "where is the function ParseConfig defined?")
	env := nextEnvelope(t, lib)

	decline := func(from, reason, to string, history []*messagev1.RerouteHop) {
		f.toGuide(t, &messagev1.Envelope{CorrelationId: env.GetCorrelationId(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1",
			Source: from, Target: "guide", Type: messagev1.MessageType_MESSAGE_TYPE_REROUTE_REQUEST,
			StructuredIntent: env.GetStructuredIntent(), ConfidenceChain: env.GetConfidenceChain(), RerouteHistory: history,
			Payload: &messagev1.Envelope_RerouteRequest{RerouteRequest: &messagev1.RerouteRequest{Source: from, Reason: reason, SuggestedTarget: to}}})
	}
	hop1 := &messagev1.RerouteHop{From: "librarian", Reason: "this is a one-line edit", To: "engineer"}
	decline("librarian", hop1.GetReason(), "engineer", []*messagev1.RerouteHop{hop1})
	// The engineer has no inbox: a change for it is the architect's to plan.
	got := nextEnvelope(t, planner)
	require.Equal(t, "architect", got.GetTarget())
	require.Equal(t, env.GetCorrelationId(), got.GetCorrelationId())
	require.Len(t, got.GetRerouteHistory(), 1)
	require.True(t, proto.Equal(hop1, got.GetRerouteHistory()[0]))
	require.True(t, proto.Equal(env.GetStructuredIntent(), got.GetStructuredIntent()), "the intent travels unchanged")
	require.Len(t, got.GetConfidenceChain(), 1)
	require.Equal(t, env.GetUserInput().GetText(), got.GetUserInput().GetText())
	f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool { return e.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_REROUTED })

	// The redirect is a routing failure, sent to the Archivalist too.
	store := nextEnvelope(t, arch)
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST, store.GetType())
	require.Equal(t, CategoryRoutingFailure, store.GetStoreRequest().GetCategory())
	require.Contains(t, store.GetStoreRequest().GetContent(), "failure_signal: EXPLICIT_REDIRECT")
	failures, err := f.svc.ListRoutingFailures(ctx, &guidev1.ListRoutingFailuresRequest{RequestPattern: "ParseConfig function"})
	require.NoError(t, err)
	require.Len(t, failures.GetFailures(), 1)
	require.Equal(t, "librarian", failures.GetFailures()[0].GetRoutedTo())
	require.Equal(t, "architect", failures.GetFailures()[0].GetShouldHaveBeen())
	require.True(t, strings.HasPrefix(failures.GetFailures()[0].GetId(), "route_fail_"))
	acc, err := f.svc.GetRoutingAccuracy(ctx, &guidev1.GetRoutingAccuracyRequest{})
	require.NoError(t, err)
	require.Less(t, acc.GetAccuracy(), 1.0)
	require.Equal(t, int64(1), acc.GetBySignal()["EXPLICIT_REDIRECT"])
	require.Equal(t, "librarian", acc.GetMisroutes()[0].GetRoutedTo())
	// Spec A-33: the failure keeps its decision's confidence and time, for
	// the failure rate per confidence and the time to correction.
	routedConf := env.GetConfidenceChain()[0].GetConfidence()
	bucket := float64(confidenceBucket(routedConf)) / 10
	var byConf *guidev1.ConfidenceAccuracy
	for _, c := range acc.GetByConfidence() {
		if c.GetMinConfidence() == bucket {
			byConf = c
		}
	}
	require.NotNil(t, byConf, "no bucket %.1f in %v", bucket, acc.GetByConfidence())
	require.Equal(t, int64(1), byConf.GetRouted())
	require.Equal(t, int64(1), byConf.GetFailures())
	require.Equal(t, 1.0, byConf.GetFailureRate())
	require.Equal(t, int64(1), acc.GetCorrectionsTimed())
	require.Positive(t, acc.GetTimeToCorrectionP50().AsDuration())
	require.Equal(t, acc.GetTimeToCorrectionP50().AsDuration(), acc.GetTimeToCorrectionMean().AsDuration())
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.failedConfidence.WithLabelValues(bucketLabel(confidenceBucket(routedConf)))))
	require.Equal(t, uint64(1), histogramCount(t, f.svc.metrics.correction))

	// Three hops: the user is asked, nobody else gets the request.
	history := []*messagev1.RerouteHop{hop1,
		{From: "engineer", Reason: "needs a design first", To: "architect"},
		{From: "architect", Reason: "this is a code lookup", To: "librarian"}}
	decline("architect", "this is a code lookup", "librarian", history)
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool {
		return e.GetType() == eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED && e.GetClarificationRequested().GetReason() == "reroute_limit"
	})
	for _, h := range history {
		require.Contains(t, ev.GetText(), h.GetReason())
	}
	require.Contains(t, ev.GetText(), env.GetStructuredIntent().GetOriginalRequest())
	require.Equal(t, stateEscalated, f.pendingState(t, r.GetCorrelationId()))
	_, err = lib.Next(jetstreamWait(300 * time.Millisecond))
	require.Error(t, err, "no agent delivery at the reroute limit")

	// The user picks the academic: the original request goes there.
	require.Len(t, ev.GetClarificationRequested().GetRerouteHistory(), len(history))
	clar := ev.GetClarificationRequested().GetClarification()
	ans, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "the academic please", InReplyTo: clar})
	require.NoError(t, err)
	require.Equal(t, "academic", ans.GetRoute().GetTarget())
	routed := nextEnvelope(t, acad)
	require.Equal(t, env.GetUserInput().GetText(), routed.GetUserInput().GetText())
}

// Acceptance behaviour 6: the answer to a tester's question goes to the
// tester; acceptance behaviour 3: a relayed response reaches the requester
// unchanged, with no chain entry added.
func TestClarificationAndRelay(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "clarify")
	tester := inboxReader(t, f.bus, "tester")
	arch := inboxReader(t, f.bus, "architect")
	corr := ids.New()
	f.toGuide(t, &messagev1.Envelope{CorrelationId: corr, TenantId: "t1", SessionId: s.GetId(), UserId: "u1", Source: "tester",
		Type: messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_REQUEST, StructuredIntent: &messagev1.StructuredIntent{OriginalRequest: "run the tests"},
		Payload: &messagev1.Envelope_ClarificationRequest{ClarificationRequest: &messagev1.ClarificationRequest{
			Question: "Run the slow integration tests too?", Options: []string{"yes", "no"}, RequestingAgent: "tester"}}})
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool {
		return e.GetType() == eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED
	})
	require.Equal(t, "tester", ev.GetSource())
	list, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Len(t, list.GetClarifications(), 1)
	name := list.GetClarifications()[0].GetName()
	resp, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "yes", InReplyTo: name})
	require.NoError(t, err)
	require.Equal(t, "tester", resp.GetRoute().GetTarget())
	got := nextEnvelope(t, tester)
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_RESPONSE, got.GetType())
	require.Equal(t, "yes", got.GetClarificationResponse().GetAnswer())
	require.Equal(t, corr, got.GetCorrelationId())
	require.Equal(t, "run the tests", got.GetStructuredIntent().GetOriginalRequest(), "the request asked about, for the agent to refine")
	require.Equal(t, "guide", got.GetConfidenceChain()[0].GetAgent())
	_, err = f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "again", InReplyTo: name})
	testenv.RequireReason(t, err, codes.NotFound, "PENDING_CLARIFICATION_NOT_FOUND", "pending clarification")

	relayed := &messagev1.Envelope{Id: ids.New(), CorrelationId: ids.New(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1",
		Source: "librarian", Target: "architect", Type: messagev1.MessageType_MESSAGE_TYPE_CONTEXT_RESPONSE,
		ConfidenceChain: []*messagev1.ConfidenceEntry{{Agent: "guide", Confidence: 0.95}, {Agent: "librarian", Confidence: 0.88}},
		Payload:         &messagev1.Envelope_AgentAnswer{AgentAnswer: &messagev1.AgentAnswer{Agent: "librarian", Text: "found it"}}}
	f.toGuide(t, relayed)
	msg, err := arch.Next(jetstreamWait(5 * time.Second))
	require.NoError(t, err)
	out := &messagev1.Envelope{}
	require.NoError(t, proto.Unmarshal(msg.Data(), out))
	require.True(t, proto.Equal(relayed, out), "relayed unchanged")

	// An agent of another tenant's session is refused (a dead letter of
	// that tenant, outside its users' sessions: its admins see it).
	f.toGuide(t, &messagev1.Envelope{CorrelationId: ids.New(), TenantId: "t2", SessionId: s.GetId(), Source: "librarian", Target: "architect",
		Payload: &messagev1.Envelope_AgentAnswer{AgentAnswer: &messagev1.AgentAnswer{Text: "leak"}}})
	require.Eventually(t, func() bool {
		dl, err := f.svc.ListDeadLetters(asAdmin("t2", "admin"), &guidev1.ListDeadLettersRequest{})
		return err == nil && len(dl.GetDeadLetters()) == 1
	}, 10*time.Second, 20*time.Millisecond)
	_, err = arch.Next(jetstreamWait(300 * time.Millisecond))
	require.Error(t, err)
}

// Tier 0 commands run without classification.
func TestSlashCommandsTier0(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "cmds")
	arch := inboxReader(t, f.bus, "architect")
	acad := inboxReader(t, f.bus, "academic")
	for _, tt := range []struct{ text, want string }{
		{"/help", "/session list|new"},
		{"/status", "Waiting for answers: 0"},
		{"/tasks", "orchestrator is not configured"},
		{"/settle", "orchestrator is not configured"},
		{"/stauts", "did you mean /status?"},
		{"/session list", "* this session"},
	} {
		r := f.send(t, ctx, s, tt.text)
		require.Equal(t, "slash_command", r.GetRoute().GetTier())
		require.Equal(t, "guide", r.GetRoute().GetTarget())
		require.Contains(t, r.GetReply(), tt.want)
	}
	plan := f.send(t, ctx, s, "/plan add a /version endpoint")
	require.Equal(t, "architect", plan.GetRoute().GetTarget())
	env := nextEnvelope(t, arch)
	require.Equal(t, "add a /version endpoint", env.GetUserInput().GetText())
	require.Equal(t, "plan", env.GetMetadata()["command"])

	// /reroute corrects the last route and records a USER_CORRECTION.
	re := f.send(t, ctx, s, "/reroute academic")
	require.Equal(t, "academic", re.GetRoute().GetTarget())
	require.Equal(t, "add a /version endpoint", nextEnvelope(t, acad).GetUserInput().GetText())
	failures, err := f.svc.ListRoutingFailures(ctx, &guidev1.ListRoutingFailuresRequest{})
	require.NoError(t, err)
	require.Len(t, failures.GetFailures(), 1)
	require.Equal(t, guidev1.RoutingFailureSignal_ROUTING_FAILURE_SIGNAL_USER_CORRECTION, failures.GetFailures()[0].GetFailureSignal())

	created := f.send(t, ctx, s, "/session new second try")
	require.Contains(t, created.GetReply(), "switched to it")
	old, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_SUSPENDED, old.GetSession().GetState())
	active, err := f.svc.GetActiveSession(ctx, &guidev1.GetActiveSessionRequest{})
	require.NoError(t, err)
	require.Equal(t, "second try", active.GetSession().GetDisplayName())
	back := f.send(t, ctx, active.GetSession(), "/session switch "+s.GetId())
	require.Contains(t, back.GetReply(), "Switched to")
	old, err = f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, old.GetSession().GetState())
	// A mistyped id is refused; it does not suspend this session.
	typo := f.send(t, ctx, s, "/session suspend "+s.GetId()[:8])
	require.Contains(t, typo.GetReply(), "usage: /session suspend [session id]")
	old, err = f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, old.GetSession().GetState())
	susp := f.send(t, ctx, s, "/session suspend")
	require.Contains(t, susp.GetReply(), "is suspended")
}

// A misroute lowers the confidence of the same request next time, below
// the threshold: the user is asked, with the better agent offered first.
func TestFailureFeedback(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{FailurePenalty: 0.2}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "feedback")
	const q = "where is the retry policy documented"
	first := f.send(t, ctx, s, q)
	require.Equal(t, "librarian", first.GetRoute().GetTarget())
	_, err := f.svc.RecordRoutingFailure(ctx, &guidev1.RecordRoutingFailureRequest{OriginalRequest: q, RoutedTo: "librarian",
		ShouldHaveBeen: "academic", FailureSignal: guidev1.RoutingFailureSignal_ROUTING_FAILURE_SIGNAL_EXPLICIT_REDIRECT,
		ClassifiedAs: first.GetRoute().GetIntentType()})
	require.NoError(t, err)
	again := f.send(t, ctx, s, q)
	require.Equal(t, "classifier", again.GetRoute().GetTier(), "the cached route was dropped")
	require.Less(t, again.GetRoute().GetConfidence(), first.GetRoute().GetConfidence())
	require.Contains(t, again.GetRoute().GetReason(), "past misroute")
	if again.GetRoute().GetTarget() == "" {
		require.Contains(t, again.GetReply(), "academic")
	}
	_, err = f.svc.RecordRoutingFailure(ctx, &guidev1.RecordRoutingFailureRequest{OriginalRequest: q, RoutedTo: "nobody",
		ShouldHaveBeen: "academic", FailureSignal: guidev1.RoutingFailureSignal_ROUTING_FAILURE_SIGNAL_EXPLICIT_REDIRECT})
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "routed_to")
	_, err = f.svc.RecordRoutingFailure(ctx, &guidev1.RecordRoutingFailureRequest{OriginalRequest: q, RoutedTo: "librarian", ShouldHaveBeen: "academic"})
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "failure_signal")
}

// A dry run routes a recorded query as a replay would: past routing
// failures lower its confidence there too, and a change the intent gate
// would ask about is not routed.
func TestDryRunCountsRoutingFailures(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{FailurePenalty: 0.2}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "dry run")
	const q = "where is the retry policy documented"
	rec, err := f.svc.StartRecording(ctx, &guidev1.StartRecordingRequest{Parent: s.GetName()})
	require.NoError(t, err)
	first := f.send(t, ctx, s, q)
	require.Equal(t, "librarian", first.GetRoute().GetTarget())
	vague := f.send(t, ctx, s, "fix it")
	require.Empty(t, vague.GetRoute().GetTarget(), "the intent gate asks what to change")
	_, err = f.svc.StopRecording(ctx, &guidev1.StopRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	for range 2 {
		_, err = f.svc.RecordRoutingFailure(ctx, &guidev1.RecordRoutingFailureRequest{OriginalRequest: q, RoutedTo: "librarian",
			ShouldHaveBeen: "academic", FailureSignal: guidev1.RoutingFailureSignal_ROUTING_FAILURE_SIGNAL_USER_CORRECTION})
		require.NoError(t, err)
	}

	dry, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName(), Mode: guidev1.ReplayMode_REPLAY_MODE_DRY_RUN})
	require.NoError(t, err)
	exact, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName(), Mode: guidev1.ReplayMode_REPLAY_MODE_EXACT})
	require.NoError(t, err)
	require.Len(t, dry.GetResults(), 2)
	require.Len(t, exact.GetResults(), 2)
	for i, r := range exact.GetResults() {
		want, got := r.GetRoute(), dry.GetResults()[i].GetRoute()
		require.Empty(t, want.GetTarget(), "asked the user")
		require.Equal(t, want.GetTarget(), got.GetTarget())
		require.Equal(t, want.GetIntentType(), got.GetIntentType())
		require.InDelta(t, want.GetConfidence(), got.GetConfidence(), 1e-9)
		require.Equal(t, want.GetReason(), got.GetReason())
	}
	require.Contains(t, dry.GetResults()[0].GetRoute().GetReason(), "past misroute")
}

// Spec E-07: record a session's queries and replay them three ways, with
// the messages stored each in its own transaction and in group commits.
func TestRecordingReplay(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%v", grouped), func(t *testing.T) {
			t.Parallel()
			testRecordingReplay(t, newFlowFixture(t, Config{}, grouped), grouped)
		})
	}
}

func testRecordingReplay(t *testing.T, f flowFixture, grouped bool) {
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "rec")
	lib := inboxReader(t, f.bus, "librarian")
	rec, err := f.svc.StartRecording(ctx, &guidev1.StartRecordingRequest{Parent: s.GetName(), DisplayName: "demo", Tags: []string{"x"}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rec.GetRecording().GetId(), "rec_"))
	_, err = f.svc.StartRecording(ctx, &guidev1.StartRecordingRequest{Parent: s.GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonRecordingInProgress, "stop the current recording first")
	f.send(t, ctx, s, "where is the function ParseConfig defined?")
	nextEnvelope(t, lib)
	f.send(t, ctx, s, "/status")
	stopped, err := f.svc.StopRecording(ctx, &guidev1.StopRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	require.False(t, stopped.GetRecording().GetRecording())
	require.Equal(t, int32(2), stopped.GetRecording().GetQueryCount())
	require.Equal(t, "librarian", stopped.GetRecording().GetQueries()[0].GetRoutedTo())
	if grouped {
		// The routed query was recorded by its group commit's statement.
		require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.grouped.WithLabelValues("grouped")))
	}
	f.send(t, ctx, s, "/help")
	list, err := f.svc.ListRecordings(ctx, &guidev1.ListRecordingsRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Len(t, list.GetRecordings(), 1)
	require.Equal(t, int32(2), list.GetRecordings()[0].GetQueryCount(), "nothing recorded after stop")

	dry, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName(), Mode: guidev1.ReplayMode_REPLAY_MODE_DRY_RUN})
	require.NoError(t, err)
	require.Len(t, dry.GetResults(), 2)
	require.Equal(t, "classified", dry.GetResults()[0].GetAction())
	require.Equal(t, "librarian", dry.GetResults()[0].GetRoute().GetTarget())
	_, err = lib.Next(jetstreamWait(200 * time.Millisecond))
	require.Error(t, err, "a dry run sends nothing")

	exact, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName(), Mode: guidev1.ReplayMode_REPLAY_MODE_EXACT})
	require.NoError(t, err)
	require.Len(t, exact.GetResults(), 2)
	require.True(t, exact.GetState().GetDone())
	nextEnvelope(t, lib)

	inter, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.ReplayMode_REPLAY_MODE_INTERACTIVE, inter.GetState().GetMode())
	step, err := f.svc.StepReplay(ctx, &guidev1.StepReplayRequest{Name: inter.GetState().GetName(), Action: "modify", Text: "where is the function LoadConfig defined?"})
	require.NoError(t, err)
	require.Equal(t, "modified", step.GetResult().GetAction())
	require.Equal(t, "where is the function LoadConfig defined?", nextEnvelope(t, lib).GetUserInput().GetText())
	step, err = f.svc.StepReplay(ctx, &guidev1.StepReplayRequest{Name: inter.GetState().GetName(), Action: "skip"})
	require.NoError(t, err)
	require.Equal(t, "skipped", step.GetResult().GetAction())
	require.True(t, step.GetState().GetDone())
	require.Equal(t, []int32{1}, step.GetState().GetSkippedIndices())
	_, err = f.svc.StepReplay(ctx, &guidev1.StepReplayRequest{Name: inter.GetState().GetName(), Action: "continue"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonReplayFinished, "replay is done")
}

// A step of an interactive replay that the session does not take leaves
// the replay at that query: it is sent by the next step, not lost.
func TestReplayStepNotTakenIsKept(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "rec")
	lib := inboxReader(t, f.bus, "librarian")
	rec, err := f.svc.StartRecording(ctx, &guidev1.StartRecordingRequest{Parent: s.GetName()})
	require.NoError(t, err)
	queries := []string{"where is the function ParseConfig defined?", "where is the function LoadConfig defined?"}
	for _, q := range queries {
		f.send(t, ctx, s, q)
		nextEnvelope(t, lib)
	}
	_, err = f.svc.StopRecording(ctx, &guidev1.StopRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	inter, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	name := inter.GetState().GetName()

	_, err = f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	_, err = f.svc.StepReplay(ctx, &guidev1.StepReplayRequest{Name: name, Action: "continue"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionNotActive, "session is suspended")
	_, err = f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	for i, q := range queries {
		step, err := f.svc.StepReplay(ctx, &guidev1.StepReplayRequest{Name: name, Action: "continue"})
		require.NoError(t, err)
		require.Equal(t, int32(i), step.GetResult().GetIndex())
		require.Equal(t, q, step.GetResult().GetQuery())
		require.Equal(t, int32(i+1), step.GetState().GetCurrentIndex())
		require.Equal(t, q, nextEnvelope(t, lib).GetUserInput().GetText())
	}
	_, err = lib.Next(jetstreamWait(200 * time.Millisecond))
	require.Error(t, err, "each query was sent once")
}

// An interactive replay of a recording that is still recording, into its
// own session, ends after the queries recorded when it started, though each
// query it sends is recorded again.
func TestReplayOfRecordingInProgressEnds(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "rec")
	rec, err := f.svc.StartRecording(ctx, &guidev1.StartRecordingRequest{Parent: s.GetName()})
	require.NoError(t, err)
	f.send(t, ctx, s, "/help")
	f.send(t, ctx, s, "/status")
	inter, err := f.svc.ReplayRecording(ctx, &guidev1.ReplayRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	var sent []string
	for range 5 {
		step, err := f.svc.StepReplay(ctx, &guidev1.StepReplayRequest{Name: inter.GetState().GetName(), Action: "continue"})
		if err != nil {
			testenv.RequireReason(t, err, codes.FailedPrecondition, reasonReplayFinished, "replay is done")
			break
		}
		sent = append(sent, step.GetResult().GetQuery())
	}
	require.Equal(t, []string{"/help", "/status"}, sent)
	got, err := f.svc.GetRecording(ctx, &guidev1.GetRecordingRequest{Name: rec.GetRecording().GetName()})
	require.NoError(t, err)
	require.Equal(t, int32(4), got.GetRecording().GetQueryCount(), "the replayed queries are recorded")
}

// Acceptance behaviours 1 and 18: the envelope to the architect carries
// the structured intent (the request verbatim, its constraints), the
// Guide's first chain entry and the session id.
func TestStructuredIntentAtIntake(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "intent")
	arch := inboxReader(t, f.bus, "architect")
	const text = "Add caching to the search endpoint, careful about memory"
	r := f.send(t, ctx, s, text)
	require.Equal(t, "architect", r.GetRoute().GetTarget())
	env := nextEnvelope(t, arch)
	require.Equal(t, text, env.GetStructuredIntent().GetOriginalRequest())
	require.Equal(t, []string{"careful about memory"}, env.GetStructuredIntent().GetKeyConstraints())
	require.Equal(t, "EXPLICIT", env.GetStructuredIntent().GetIntentType())
	require.Equal(t, "guide", env.GetConfidenceChain()[0].GetAgent())
	require.Equal(t, s.GetId(), env.GetSessionId())
	require.NotNil(t, env.GetDeadline())
}

// An inbox message an agent never acknowledges becomes a dead letter once
// its consumer gives up, and leaves the inbox.
func TestUndeliverableToDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "dlq")
	cons, err := f.bus.JS.CreateOrUpdateConsumer(context.Background(), topology.AgentsStream(f.bus), jetstream.ConsumerConfig{
		Durable: "flaky-academic", FilterSubject: topology.InboxSubject(f.bus, "academic"), AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: 1, AckWait: 200 * time.Millisecond})
	require.NoError(t, err)
	r := f.send(t, ctx, s, "What are the best practices for retry backoff? Point me to the docs.")
	require.Equal(t, "academic", r.GetRoute().GetTarget())
	msg, err := cons.Next(jetstreamWait(5 * time.Second))
	require.NoError(t, err)
	_ = msg // never acknowledged
	var dl *guidev1.ListDeadLettersResponse
	require.Eventually(t, func() bool {
		// Pulling again lets the server notice the expired delivery.
		_, _ = cons.Next(jetstreamWait(100 * time.Millisecond))
		dl, err = f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: s.GetId()})
		return err == nil && len(dl.GetDeadLetters()) == 1
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, "academic", dl.GetDeadLetters()[0].GetTarget())
	require.Contains(t, dl.GetDeadLetters()[0].GetReason(), "not acknowledged by flaky-academic")
	require.Equal(t, r.GetCorrelationId(), dl.GetDeadLetters()[0].GetCorrelationId())
}

// Spec: an agent's knowledge request through the Guide goes to
// the agent that owns it, and the answer comes back to the agent that
// asked, with its correlation id.
func TestAgentRequestThroughGuide(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "consult")
	arch := inboxReader(t, f.bus, "archivalist")
	architect := inboxReader(t, f.bus, "architect")
	corr := ids.New()
	f.toGuide(t, &messagev1.Envelope{CorrelationId: corr, TenantId: "t1", SessionId: s.GetId(), UserId: "u1", Source: "architect",
		Type:    messagev1.MessageType_MESSAGE_TYPE_HISTORY_REQUEST,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: "similar failures of the cache rollout"}}})
	routed := nextEnvelope(t, arch)
	require.Equal(t, "similar failures of the cache rollout", routed.GetUserInput().GetText())
	require.Equal(t, "architect", routed.GetRoutedRequest().GetRequestedBy())
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_HISTORY_REQUEST, routed.GetRoutedRequest().GetRequestType())
	require.Equal(t, corr, routed.GetRoutedRequest().GetRequestCorrelation())
	require.NotEqual(t, corr, routed.GetCorrelationId())
	f.answer(t, s, routed.GetId()+":answer", "archivalist", routed.GetCorrelationId(), &messagev1.AgentAnswer{
		Text: "The rollout failed twice on memory.", Hits: []*messagev1.Hit{{Title: "rollout"}}})
	back := nextEnvelope(t, architect)
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_HISTORY_RESPONSE, back.GetType())
	require.Equal(t, corr, back.GetCorrelationId())
	require.Equal(t, "The rollout failed twice on memory.", back.GetAgentAnswer().GetText())
	require.Equal(t, "rollout", back.GetAgentAnswer().GetHits()[0].GetTitle(), "the answer goes back whole")
	require.Equal(t, "archivalist", back.GetAgentAnswer().GetAgent())
	require.Equal(t, "archivalist", back.GetSource())
}

// Spec A-33: EMPTY_RESPONSE is an agent that cannot help with the request,
// not a search that found nothing. A knowledge agent answering "nothing
// recorded" records no routing failure; an answer flagged cannot_help, or
// one with neither text nor results, does.
func TestEmptyResponseSignal(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "empty")
	arch := inboxReader(t, f.bus, "archivalist")
	tests := []struct {
		name    string
		answer  *messagev1.AgentAnswer
		failure bool
	}{
		{"no history found", &messagev1.AgentAnswer{Text: "Nothing is recorded about the cache rollout.", Query: "cache rollout"}, false},
		{"agent cannot help", &messagev1.AgentAnswer{Text: "I cannot help with this.", Query: "cache rollout", CannotHelp: true,
			CannotHelpReason: "not my domain"}, true},
		{"nothing at all", &messagev1.AgentAnswer{Query: "cache rollout"}, true},
	}
	failures := 0
	for i, tt := range tests {
		sent := f.send(t, ctx, s, fmt.Sprintf("what did we decide about the cache rollout %d last week", i))
		require.Equal(t, "archivalist", sent.GetRoute().GetTarget(), tt.name)
		env := nextEnvelope(t, arch)
		for env.GetType() != messagev1.MessageType_MESSAGE_TYPE_USER_INPUT {
			env = nextEnvelope(t, arch) // a routing failure sent to the archivalist
		}
		f.answer(t, s, env.GetId()+":answer", "archivalist", env.GetCorrelationId(), tt.answer)
		require.Eventually(t, func() bool { return f.pendingState(t, env.GetCorrelationId()) == stateAnswered }, 10*time.Second, 20*time.Millisecond)
		if tt.failure {
			failures++
		}
		// The failure is recorded after the request is marked answered.
		require.Eventually(t, func() bool {
			acc, err := f.svc.GetRoutingAccuracy(ctx, &guidev1.GetRoutingAccuracyRequest{})
			require.NoError(t, err)
			return acc.GetBySignal()["EMPTY_RESPONSE"] == int64(failures)
		}, 10*time.Second, 20*time.Millisecond, tt.name)
	}
	// The events are handled in order, so a failure for the first answer
	// would be stored by now.
	list, err := f.svc.ListRoutingFailures(ctx, &guidev1.ListRoutingFailuresRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetFailures(), 2)
	for _, fl := range list.GetFailures() {
		require.NotContains(t, fl.GetOriginalRequest(), "rollout 0 ")
	}
}

// histogramCount is how many observations h has.
func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, h.Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// A reroute request handled twice (a redelivery after a failure later in
// its handling) is one routing failure, not two (spec A-33's counts).
func TestRedeliveredRerouteIsOneFailure(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "redelivered")
	lib := inboxReader(t, f.bus, "librarian")
	f.send(t, ctx, s, "where is the function ParseConfig defined?")
	env := nextEnvelope(t, lib)
	decline := &messagev1.Envelope{Id: ids.New(), CorrelationId: env.GetCorrelationId(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1",
		Source: "librarian", Target: "guide", Type: messagev1.MessageType_MESSAGE_TYPE_REROUTE_REQUEST,
		StructuredIntent: env.GetStructuredIntent(), ConfidenceChain: env.GetConfidenceChain(),
		Payload: &messagev1.Envelope_RerouteRequest{RerouteRequest: &messagev1.RerouteRequest{Source: "librarian",
			Reason: "this is a one-line edit", SuggestedTarget: "engineer"}}}
	for range 2 {
		_, err := f.svc.handleEnvelope(context.Background(), decline)
		require.NoError(t, err)
	}
	failures, err := f.svc.ListRoutingFailures(ctx, &guidev1.ListRoutingFailuresRequest{RequestPattern: "ParseConfig function"})
	require.NoError(t, err)
	require.Len(t, failures.GetFailures(), 1)
	acc, err := f.svc.GetRoutingAccuracy(ctx, &guidev1.GetRoutingAccuracyRequest{})
	require.NoError(t, err)
	require.Equal(t, int64(1), acc.GetBySignal()["EXPLICIT_REDIRECT"])
}

// A response relayed to an agent reaches that agent's inbox, however the
// agent's name is spelt; one for no agent that has an inbox is kept as a
// dead letter, not left on a subject nobody reads.
func TestRelayNeedsAnAgent(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "relay")
	lib := inboxReader(t, f.bus, "librarian")
	relay := func(target string) *messagev1.Envelope {
		env := &messagev1.Envelope{Id: ids.New(), CorrelationId: ids.New(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1",
			Source: "archivalist", Target: target, Type: messagev1.MessageType_MESSAGE_TYPE_HISTORY_RESPONSE,
			Payload: &messagev1.Envelope_AgentAnswer{AgentAnswer: &messagev1.AgentAnswer{Agent: "archivalist", Text: "see 2024"}}}
		f.toGuide(t, env)
		return env
	}
	sent := relay("Librarian")
	msg, err := lib.Next(jetstreamWait(5 * time.Second))
	require.NoError(t, err)
	got := &messagev1.Envelope{}
	require.NoError(t, proto.Unmarshal(msg.Data(), got))
	require.True(t, proto.Equal(sent, got), "relayed unchanged")

	relay("designer")
	require.Eventually(t, func() bool {
		dl, err := f.svc.ListDeadLetters(ctx, &guidev1.ListDeadLettersRequest{SessionId: s.GetId()})
		return err == nil && len(dl.GetDeadLetters()) == 1 && dl.GetDeadLetters()[0].GetTarget() == "designer"
	}, 10*time.Second, 20*time.Millisecond)
}

// An answer for the user lands on the session's stream whole, with the
// chain's cumulative confidence, its band and the suggested action (spec
//
func TestRelayAnswerToUser(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "relay to user")
	f.toGuide(t, &messagev1.Envelope{CorrelationId: ids.New(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1",
		Source: "librarian", Target: "user",
		ConfidenceChain: []*messagev1.ConfidenceEntry{{Agent: "guide", Confidence: 0.9}, {Agent: "librarian", Confidence: 0.8}},
		Payload: &messagev1.Envelope_AgentAnswer{AgentAnswer: &messagev1.AgentAnswer{Text: "config.go:12",
			Hits: []*messagev1.Hit{{Path: "config.go", LineStart: 12}}}}})
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool { return e.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED })
	a := ev.GetMessageAnswered()
	require.Equal(t, "librarian", ev.GetSource())
	require.Equal(t, "librarian", a.GetAgent())
	require.Equal(t, "config.go:12", a.GetText())
	require.Equal(t, "config.go", a.GetHits()[0].GetPath())
	require.InDelta(t, 0.72, a.GetCumulativeConfidence(), 1e-9)
	require.Equal(t, "good", a.GetConfidenceBand())
	require.Equal(t, "proceed", a.GetSuggestedAction())
}

// A task's call for help reaches the user; one caused by the wrong context
// source is a routing failure (spec A-33 TASK_HELP_ESCALATION).
func TestTaskHelp(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, true)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "help")
	help := &messagev1.TaskHelp{Text: "The tests need a database I cannot reach.", ContextSourceIssue: "the librarian had no schema",
		RunId: "runs/r1", NodeId: "n1"}
	f.toGuide(t, &messagev1.Envelope{CorrelationId: ids.New(), TenantId: "t1", SessionId: s.GetId(), UserId: "u1", Source: "engineer",
		Type: messagev1.MessageType_MESSAGE_TYPE_TASK_HELP, Payload: &messagev1.Envelope_TaskHelp{TaskHelp: help}})
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool { return e.GetType() == eventv1.EventType_EVENT_TYPE_TASK_HELP })
	require.Equal(t, "engineer", ev.GetSource())
	require.Equal(t, help.GetText(), ev.GetText())
	require.True(t, proto.Equal(help, ev.GetTaskHelp()))
	acc, err := f.svc.GetRoutingAccuracy(ctx, &guidev1.GetRoutingAccuracyRequest{})
	require.NoError(t, err)
	require.Equal(t, int64(1), acc.GetBySignal()["TASK_HELP_ESCALATION"])
}

// An envelope the inbox refuses is acknowledged only once its dead letter
// is kept: while the dead letter cannot be stored, the envelope is handed
// back for another delivery instead of being lost.
func TestRefusedEnvelopeKeptUntilDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	bctx := context.Background()
	env := &messagev1.Envelope{Id: ids.New(), TenantId: "t1", SessionId: ids.New(), Source: "archivalist",
		Type: messagev1.MessageType_MESSAGE_TYPE_HISTORY_RESPONSE}
	_, err := f.db.Exec(bctx, `ALTER TABLE dead_letters RENAME TO dead_letters_away`)
	require.NoError(t, err)
	outcome, err := f.svc.handleEnvelope(bctx, env)
	require.Error(t, err, "the envelope goes back for another delivery")
	require.Empty(t, outcome)

	_, err = f.db.Exec(bctx, `ALTER TABLE dead_letters_away RENAME TO dead_letters`)
	require.NoError(t, err)
	outcome, err = f.svc.handleEnvelope(bctx, env)
	require.NoError(t, err)
	require.Equal(t, "rejected", outcome)
	var n int
	require.NoError(t, f.db.QueryRow(bctx, `SELECT count(*) FROM dead_letters WHERE tenant_id = 't1'`).Scan(&n))
	require.Equal(t, 1, n)
}

// blockingClassifier answers only when its caller gives up.
type blockingClassifier struct{}

func (blockingClassifier) Classify(ctx context.Context, _ string) (Classification, error) {
	<-ctx.Done()
	return Classification{}, ctx.Err()
}

// An envelope from an agent is handled within -guide.inbox-timeout, below
// the inbox's ack wait: handling that runs out fails (the envelope is
// delivered again) instead of going on while the bus delivers it again.
func TestInboxHandlingIsBounded(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{InboxTimeout: 50 * time.Millisecond}, false)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "bounded")
	f.svc.SetClassifier(blockingClassifier{})
	_, err := f.svc.handleEnvelope(context.Background(), &messagev1.Envelope{Id: ids.New(), CorrelationId: ids.New(),
		TenantId: "t1", SessionId: s.GetId(), UserId: "u1", Source: "architect",
		Type:    messagev1.MessageType_MESSAGE_TYPE_CONSULT_REQUEST, // classified
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: "which agent owns this?"}}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

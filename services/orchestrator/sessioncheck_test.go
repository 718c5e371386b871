package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// newReplica starts an Orchestrator replica with cfg on db and bus.
func newReplica(t *testing.T, db *pgxpool.Pool, bus *natsx.Bus, cfg orchestrator.Config) (*harness, context.CancelFunc) {
	t.Helper()
	return newOrchestratorWith(t, db, bus, func(c *orchestrator.Config) {
		*c = cfg
		c.ResyncInterval = 200 * time.Millisecond
	})
}

// finishRun runs a one-node repository run to success, answering its task
// as a worker would.
func finishRun(t *testing.T, h *harness, ctx context.Context, session, repo string, checks bool) *orchestratorv1.Run {
	t.Helper()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, repo), SessionChecks: checks,
		Dag: dagOf(cmd("a", "true"))})
	task := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, run.GetId(), task.GetRunId())
	h.sendResult(t, "t1", run.GetId(), "a", task.GetAttempt(), 0, "ok", ids.New())
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	return run
}

// sessionCheckEvents returns the session check events of a session.
func sessionCheckEvents(t *testing.T, h *harness, session string, match func(text string) bool) {
	t.Helper()
	evs := h.events(t, "t1", session, 1)
	require.Eventually(t, func() bool {
		for _, ev := range evs {
			if ev.GetType() == eventv1.EventType_EVENT_TYPE_RUN_SESSION_CHECK && match(ev.GetText()) {
				return true
			}
		}
		evs = h.events(t, "t1", session, len(evs)+1)
		return false
	}, waitFor, 20*time.Millisecond)
}

// A session check no tester reports on is given up as an error once the
// timeout passed, with an event saying why.
func TestSessionCheckTimesOut(t *testing.T) {
	t.Parallel()
	cfg := orchestrator.DefaultConfig()
	cfg.LeaseTTL = 300 * time.Millisecond
	cfg.SessionCheckTimeout = time.Second
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	h, _ := newReplica(t, db, testenv.NATS(t), cfg)
	ctx := userCtx("t1")
	session := ids.New()
	run := finishRun(t, h, ctx, session, repoWith(t, map[string]string{"a.txt": "a\n"}), true)
	d := h.tasks(t, "tester", 1)[0] // taken, never answered
	require.Equal(t, orchestrator.SessionCheckNode, d.GetNodeId())
	var chk *orchestratorv1.SessionCheck
	require.Eventually(t, func() bool {
		chk = h.get(t, ctx, run.GetName()).GetSessionCheck()
		return chk.GetState() != pipeline.CheckPending
	}, waitFor, 20*time.Millisecond)
	require.Equal(t, pipeline.CheckError, chk.GetState())
	require.Contains(t, chk.GetDetail(), "timed out: no tester worker reported")
	require.False(t, chk.GetFixRequested(), "a timeout asks the Architect for nothing")
	sessionCheckEvents(t, h, session, func(text string) bool { return strings.Contains(text, "timed out") })

	// A late report changes nothing.
	sendCheckResult(t, h, run.GetId(), d.GetAttempt(), &orchestratorv1.SessionCheck{State: pipeline.CheckPassed})
	h.resultsDrained(t, 2)
	require.Equal(t, pipeline.CheckError, h.get(t, ctx, run.GetName()).GetSessionCheck().GetState())
}

// sendCheckResult reports a session check as a tester worker would.
func sendCheckResult(t *testing.T, h *harness, runID string, attempt int32, chk *orchestratorv1.SessionCheck) {
	t.Helper()
	h.publishResult(t, ids.New(), &taskv1.TaskResult{TenantId: "t1", RunId: runID, NodeId: orchestrator.SessionCheckNode, Attempt: attempt,
		WorkerId: "test-tester", SessionCheck: chk,
		Fence: &taskv1.TaskFence{AttemptId: fmt.Sprintf("%s:%s:%d", runID, orchestrator.SessionCheckNode, attempt)}})
}

// A failed session check asks the Architect for a fix DAG, as a plan
// request of the run's session and user, and says so on the session.
func TestFailedSessionCheckAsksTheArchitect(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	repo := repoWith(t, map[string]string{"calc.py": calcPy, "test_calc.py": testCalcPy})
	run := finishRun(t, h, ctx, session, repo, true)
	d := h.tasks(t, "tester", 1)[0]
	require.Equal(t, orchestrator.SessionCheckNode, d.GetNodeId())
	require.NotNil(t, d.GetSessionCheck(), "a session check says so")
	require.Equal(t, repo, d.GetRepository())
	require.Equal(t, run.GetBaseCommit(), d.GetBaseCommit())
	require.Equal(t, session, d.GetSessionId())

	sendCheckResult(t, h, run.GetId(), d.GetAttempt(), &orchestratorv1.SessionCheck{State: pipeline.CheckFailed, InspectorPassed: true,
		Detail: "session tests: 1 failed", TestResult: &orchestratorv1.TestResult{FrameworkId: "python-unittest", Failed: 1,
			Failures: []*orchestratorv1.TestFailure{{TestName: "test_calc.T.test_add", Message: "plus is not add"}}}})
	var chk *orchestratorv1.SessionCheck
	require.Eventually(t, func() bool {
		chk = h.get(t, ctx, run.GetName()).GetSessionCheck()
		return chk.GetState() == pipeline.CheckFailed
	}, waitFor, 20*time.Millisecond, "session check: %v", chk)
	require.True(t, chk.GetFixRequested())

	checked := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_RUN_SESSION_CHECK)
	require.Equal(t, run.GetName(), checked.GetRun().GetRun())
	fix := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_RUN_FIX_REQUESTED)
	require.True(t, fix.GetRun().GetFixRequested())
	req := inboxMessage(t, h, topology.AgentArchitect)
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_USER_INPUT, req.GetType())
	require.Equal(t, session, req.GetSessionId())
	require.Equal(t, "u1", req.GetUserId())
	require.Equal(t, run.GetName(), req.GetCorrelationId(), "the request names its run")
	require.Contains(t, req.GetUserInput().GetText(), "Fix DAG request")
	require.Contains(t, req.GetUserInput().GetText(), "test_calc")

	_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{SessionChecks: true, Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "session checks need a repository")
}

// A replica that stopped after its run succeeded leaves one run's session
// check never dispatched and another's pending but never sent: the replica
// that takes over their leases dispatches both, and their results apply.
func TestSessionChecksOfAStoppedReplicaAreTakenOver(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(t)
	cfgA := orchestrator.DefaultConfig()
	cfgA.ReplicaID, cfgA.LeaseTTL = "replica-a", 300*time.Millisecond
	a, stopA := newReplica(t, db, bus, cfgA)
	ctx := userCtx("t1")
	session := ids.New()
	repo := repoWith(t, map[string]string{"a.txt": "a\n"})
	// Runs without session checks, so that replica a dispatches none; the
	// database is then set as if it had stopped in the middle.
	undispatched := finishRun(t, a, ctx, session, repo, false)
	pending := finishRun(t, a, ctx, session, repo, false)
	stopA()
	bg := context.Background()
	_, err := db.Exec(bg, `UPDATE runs SET session_checks = true, lease_expires = now() - interval '1 second' WHERE tenant_id = 't1' AND id = $1`, undispatched.GetId())
	require.NoError(t, err)
	_, err = db.Exec(bg, `UPDATE runs SET session_checks = true, session_check = '{"state":"pending"}', lease_expires = now() - interval '1 second'
		WHERE tenant_id = 't1' AND id = $1`, pending.GetId())
	require.NoError(t, err)

	cfgB := cfgA
	cfgB.ReplicaID = "replica-b"
	b, _ := newReplica(t, db, bus, cfgB)
	got := map[string]int32{}
	for _, env := range b.tasks(t, "tester", 2) {
		d := env
		require.Equal(t, orchestrator.SessionCheckNode, d.GetNodeId())
		require.NotNil(t, env.GetSessionCheck())
		require.Equal(t, repo, env.GetRepository())
		got[d.GetRunId()] = d.GetAttempt()
	}
	require.Contains(t, got, undispatched.GetId())
	require.Contains(t, got, pending.GetId())
	for _, id := range []string{undispatched.GetId(), pending.GetId()} {
		var owner string
		require.NoError(t, db.QueryRow(bg, `SELECT lease_owner FROM runs WHERE tenant_id = 't1' AND id = $1`, id).Scan(&owner))
		require.Equal(t, "replica-b", owner)
	}
	sessionCheckEvents(t, b, session, func(text string) bool { return strings.Contains(text, "dispatched again") })

	passed := &orchestratorv1.SessionCheck{State: pipeline.CheckPassed, InspectorPassed: true, TesterPassed: true}
	for id, attempt := range got {
		sendCheckResult(t, b, id, attempt, passed)
	}
	for _, run := range []*orchestratorv1.Run{undispatched, pending} {
		require.Eventually(t, func() bool {
			return b.get(t, ctx, run.GetName()).GetSessionCheck().GetState() == pipeline.CheckPassed
		}, waitFor, 20*time.Millisecond, "session check of %s", run.GetName())
	}
	// Nothing awaits a check any more: the leases are no longer renewed.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(bg, `SELECT count(*) FROM runs WHERE tenant_id = 't1' AND lease_expires > now()`).Scan(&n))
		return n == 0
	}, waitFor, 20*time.Millisecond)
}

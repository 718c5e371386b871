package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
	"sylk.dev/sylk/services/worker"
)

// newReplica starts an Orchestrator replica with cfg on db and bus.
func newReplica(t *testing.T, db *pgxpool.Pool, bus *natsx.Bus, cfg orchestrator.Config) (*harness, context.CancelFunc) {
	t.Helper()
	cfg.ResyncInterval = 200 * time.Millisecond
	reg := prometheus.NewRegistry()
	svc, err := orchestrator.New(cfg, app.Deps{Log: logx.Discard(), DB: db, Bus: bus, Registerer: reg})
	require.NoError(t, err)
	stop := start(t, svc.Run)
	require.Eventually(t, func() bool {
		_, err := bus.JS.Stream(context.Background(), bus.Stream(topology.StreamTasks))
		return err == nil
	}, waitFor, 10*time.Millisecond)
	return &harness{svc: svc, reg: reg, db: db, bus: bus}, stop
}

// finishRun runs a one-node repository run to success, answering its task
// as a worker would.
func finishRun(t *testing.T, h *harness, ctx context.Context, session, repo string, checks bool) *orchestratorv1.Run {
	t.Helper()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: repo, SessionChecks: checks,
		Dag: dagOf(cmd("a", "true"))})
	task := h.tasks(t, "engineer", 1)[0].GetTaskDispatch()
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
			if ev.GetType() == orchestrator.EventSessionCheck && match(ev.GetText()) {
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
	d := h.tasks(t, "tester", 1)[0].GetTaskDispatch() // taken, never answered
	require.Equal(t, orchestrator.SessionCheckNode, d.GetNodeId())
	var chk *orchestratorv1.SessionCheck
	require.Eventually(t, func() bool {
		chk = h.get(t, ctx, run.GetName()).GetSessionCheck()
		return chk.GetState() != worker.CheckPending
	}, waitFor, 20*time.Millisecond)
	require.Equal(t, worker.CheckError, chk.GetState())
	require.Contains(t, chk.GetDetail(), "timed out: no tester worker reported")
	require.False(t, chk.GetFixRequested(), "a timeout asks the Architect for nothing")
	sessionCheckEvents(t, h, session, func(text string) bool { return strings.Contains(text, "timed out") })

	// A late report changes nothing.
	late, err := protojson.Marshal(&orchestratorv1.SessionCheck{State: worker.CheckPassed})
	require.NoError(t, err)
	sendCheckResult(t, h, run.GetId(), d.GetAttempt(), string(late))
	h.resultsDrained(t, 2)
	require.Equal(t, worker.CheckError, h.get(t, ctx, run.GetName()).GetSessionCheck().GetState())
}

// sendCheckResult reports a session check as a tester worker would.
func sendCheckResult(t *testing.T, h *harness, runID string, attempt int32, chk string) {
	t.Helper()
	env := &messagev1.Envelope{
		Id: ids.New(), TenantId: "t1", Type: messagev1.MessageType_MESSAGE_TYPE_TASK_COMPLETE,
		Metadata: map[string]string{worker.MetaSessionCheck: chk},
		Payload: &messagev1.Envelope_TaskResult{TaskResult: &messagev1.TaskResult{
			RunId: runID, NodeId: orchestrator.SessionCheckNode, Attempt: attempt, WorkerId: "test-tester"}},
	}
	_, err := h.bus.Publish(context.Background(), topology.ResultSubject(h.bus), ids.New(), env)
	require.NoError(t, err)
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
		d := env.GetTaskDispatch()
		require.Equal(t, orchestrator.SessionCheckNode, d.GetNodeId())
		require.Equal(t, "1", env.GetMetadata()[worker.MetaSessionCheck])
		require.Equal(t, repo, env.GetMetadata()[worker.MetaRepository])
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

	passed, err := protojson.Marshal(&orchestratorv1.SessionCheck{State: worker.CheckPassed, InspectorPassed: true, TesterPassed: true})
	require.NoError(t, err)
	for id, attempt := range got {
		sendCheckResult(t, b, id, attempt, string(passed))
	}
	for _, run := range []*orchestratorv1.Run{undispatched, pending} {
		require.Eventually(t, func() bool {
			return b.get(t, ctx, run.GetName()).GetSessionCheck().GetState() == worker.CheckPassed
		}, waitFor, 20*time.Millisecond, "session check of %s", run.GetName())
	}
	// Nothing awaits a check any more: the leases are no longer renewed.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(bg, `SELECT count(*) FROM runs WHERE tenant_id = 't1' AND lease_expires > now()`).Scan(&n))
		return n == 0
	}, waitFor, 20*time.Millisecond)
}

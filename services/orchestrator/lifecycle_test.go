package orchestrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// longLease is a lease far longer than any wait in these tests: a run
// another replica takes over before it could only have been handed over.
const longLease = 10 * time.Minute

// leaseOf reads a run's lease owner and whether its lease is live.
func leaseOf(t *testing.T, db *pgxpool.Pool, runID string) (owner string, live bool) {
	t.Helper()
	require.NoError(t, db.QueryRow(context.Background(), `SELECT lease_owner, coalesce(lease_expires > now(), false) FROM runs WHERE id = $1`,
		runID).Scan(&owner, &live))
	return owner, live
}

// A replica that stops gracefully releases its runs' leases and says so:
// the other replica takes them over at once, not when the leases would have
// expired, and carries them on.
func TestGracefulStopHandsRunsOverAtOnce(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(t)
	cfgA := orchestrator.DefaultConfig()
	cfgA.ReplicaID, cfgA.LeaseTTL = "replica-a", longLease
	a, stopA := newReplica(t, db, bus, cfgA)
	ctx := userCtx("t1")
	run := a.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("x", "true"), cmd("y", "true", "x"))})
	x := a.tasks(t, "engineer", 1)[0]
	require.Equal(t, "x", x.GetNodeId())
	owner, live := leaseOf(t, db, run.GetId())
	require.Equal(t, "replica-a", owner)
	require.True(t, live)

	cfgB := cfgA
	cfgB.ReplicaID = "replica-b"
	b, _ := newReplica(t, db, bus, cfgB)
	<-b.svc.Started()
	require.Zero(t, metric(t, b.reg, "sylk_orchestrator_runs_taken_over_total", ""), "a live lease is not taken over")

	stopped := time.Now()
	stopA()
	require.Eventually(t, func() bool {
		owner, live := leaseOf(t, db, run.GetId())
		return owner == "replica-b" && live
	}, 10*time.Second, 10*time.Millisecond, "replica b takes the run over")
	took := time.Since(stopped)
	t.Logf("run taken over %s after replica a was stopped (lease TTL %s)", took, longLease)
	require.Equal(t, 1.0, metric(t, b.reg, "sylk_orchestrator_runs_taken_over_total", ""))

	// Replica b carries the run on: x's result, then y.
	b.sendResult(t, "t1", run.GetId(), "x", x.GetAttempt(), 0, "ok", ids.New())
	y := b.tasks(t, "engineer", 1)[0]
	require.Equal(t, "y", y.GetNodeId())
	b.sendResult(t, "t1", run.GetId(), "y", y.GetAttempt(), 0, "ok", ids.New())
	b.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
}

// A result a replica took and died holding (never acknowledged) is applied
// by the replica that takes over within the short result ack wait, not the
// 30 s of a default consumer.
func TestResultsADeadReplicaHeldAreAppliedWithinTheAckWait(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(t)
	cfg := orchestrator.DefaultConfig()
	cfg.ReplicaID, cfg.LeaseTTL, cfg.ResultAckWait = "replica-a", longLease, time.Second
	a, stopA := newReplica(t, db, bus, cfg)
	ctx := userCtx("t1")
	run := a.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("x", "true"))})
	x := a.tasks(t, "engineer", 1)[0]
	stopA()

	// The dead replica: it takes the result from the shared consumer and
	// never answers it.
	dead, err := bus.EnsureConsumer(context.Background(), topology.ResultConsumer(bus, natsx.ConsumerSpec{MaxDeliver: -1, AckWait: cfg.ResultAckWait}))
	require.NoError(t, err)
	a.sendResult(t, "t1", run.GetId(), "x", x.GetAttempt(), 0, "ok", ids.New())
	batch, err := dead.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	n := 0
	for range batch.Messages() {
		n++
	}
	require.Equal(t, 1, n, "the dead replica holds the result")
	held := time.Now()

	cfgB := cfg
	cfgB.ReplicaID = "replica-b"
	b, _ := newReplica(t, db, bus, cfgB)
	b.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	took := time.Since(held)
	t.Logf("result applied %s after the dead replica took it (ack wait %s)", took, cfg.ResultAckWait)
	require.Less(t, took, 10*time.Second, "applied within a few ack waits")
}

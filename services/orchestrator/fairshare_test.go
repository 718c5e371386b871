package orchestrator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

func (h *harness) dispatched(t *testing.T, runID string) int {
	t.Helper()
	var n int
	require.NoError(t, h.db.QueryRow(context.Background(), `SELECT count(*) FROM nodes WHERE run_id = $1 AND state = 'DISPATCHED'`, runID).Scan(&n))
	return n
}

func independent(n int) *orchestratorv1.Dag {
	d := &orchestratorv1.Dag{}
	for i := range n {
		d.Nodes = append(d.Nodes, cmd(fmt.Sprintf("n%d", i), "x"))
	}
	return d
}

// TestGlobalCapAndFairShares: two replicas share a global cap of 10 through
// Redis: 2 slots are reserved for interactive runs and the other 8 are
// shared between the sessions that want them; a running node is never
// preempted, so shares converge as nodes finish.
func TestGlobalCapAndFairShares(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(t)
	rc := testenv.Redis(t)
	replica := func(id string) *harness {
		cfg := orchestrator.DefaultConfig()
		cfg.ReplicaID = id
		cfg.GlobalMaxConcurrency = 10
		cfg.ResyncInterval = time.Hour // only results and slot releases move runs on
		reg := prometheus.NewRegistry()
		svc, err := orchestrator.New(cfg, app.Deps{Log: logx.Discard(), DB: db, Bus: bus, Redis: rc, Registerer: reg})
		require.NoError(t, err)
		testenv.Start(t, svc.Run)
		return &harness{svc: svc, reg: reg, db: db, bus: bus}
	}
	h1, h2 := replica("r1"), replica("r2")
	require.Eventually(t, func() bool {
		_, err := bus.JS.Stream(context.Background(), bus.Stream(topology.StreamTasks))
		return err == nil
	}, waitFor, 10*time.Millisecond)
	ctx := userCtx("t1")
	a := h1.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: ids.New(), MaxConcurrency: 10, Dag: independent(10)})
	require.Equal(t, 8, h1.dispatched(t, a.GetId()), "alone, a session may use every non-reserved slot")
	b := h2.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: ids.New(), MaxConcurrency: 10, Dag: independent(10)})
	require.Equal(t, 0, h2.dispatched(t, b.GetId()), "no free general slot: b waits")

	// Interactive work gets the reserve at once.
	u := h2.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: ids.New(), Interactive: true, Dag: independent(2)})
	require.Equal(t, 2, h2.dispatched(t, u.GetId()))

	// As a's nodes finish, the freed slots go to b until both hold 4.
	h1.tasks(t, "engineer", 10)
	for i := range 4 {
		h1.sendResult(t, "t1", a.GetId(), fmt.Sprintf("n%d", i), 1, 0, "", fmt.Sprintf("a%d", i))
	}
	require.Eventually(t, func() bool { return h2.dispatched(t, b.GetId()) == 4 }, waitFor, 20*time.Millisecond)
	require.Equal(t, 4, h1.dispatched(t, a.GetId()), "a is at its share and gets nothing new")
	require.Equal(t, 2, h1.dispatched(t, u.GetId()))
}

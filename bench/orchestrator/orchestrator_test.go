// Package orchestrator_bench measures the Orchestrator on a large DAG:
// 10,000 no-op nodes (width 100, depth 100) at max_concurrency 64, through
// real PostgreSQL, NATS JetStream and an in-process worker running each
// node's command as a process.
package orchestrator_bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/services/orchestrator"
	"sylk.dev/sylk/services/worker"
)

const (
	width       = 100
	depth       = 100
	concurrency = 64
	noop        = "true"
)

// grid is the benchmark DAG: node (l, i) depends on (l-1, i) and
// (l-1, i+1 mod width), so work flows layer to layer without a barrier.
func grid() *orchestratorv1.Dag {
	d := &orchestratorv1.Dag{}
	for l := range depth {
		for i := range width {
			n := &orchestratorv1.Node{Id: fmt.Sprintf("n%d-%d", l, i), Command: noop}
			if l > 0 {
				n.DependsOn = []string{fmt.Sprintf("n%d-%d", l-1, i), fmt.Sprintf("n%d-%d", l-1, (i+1)%width)}
			}
			d.Nodes = append(d.Nodes, n)
		}
	}
	return d
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// noopLatency measures running the no-op command through the same executor
// the worker uses: one at a time (latency), and n at once over total calls
// (the machine's throughput for it).
func noopLatency(b *testing.B, total int) (single, perTaskParallel time.Duration) {
	root := b.TempDir()
	bd, err := toolexec.NewBoundary(root)
	require.NoError(b, err)
	cfg := toolexec.DefaultConfig()
	cfg.Slots = concurrency
	ex, err := toolexec.New(cfg, bd, nil)
	require.NoError(b, err)
	ctx := context.Background()
	var lat []time.Duration
	for range 50 {
		start := time.Now()
		_, err := ex.Execute(ctx, toolexec.Invocation{Command: noop, WorkingDir: root})
		require.NoError(b, err)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan struct{}, total)
	for range total {
		work <- struct{}{}
	}
	close(work)
	for range concurrency {
		wg.Go(func() {
			for range work {
				_, _ = ex.Execute(ctx, toolexec.Invocation{Command: noop, WorkingDir: root})
			}
		})
	}
	wg.Wait()
	return percentile(lat, 0.5), time.Since(start) / time.Duration(total)
}

func BenchmarkDAG10k(b *testing.B) {
	for range b.N {
		runOnce(b)
	}
}

func runOnce(b *testing.B) {
	db, _ := testenv.Postgres(b, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })

	ocfg := orchestrator.DefaultConfig()
	ocfg.MaxConcurrencyLimit = concurrency
	ocfg.ResyncInterval = time.Minute
	ocfg.MaxUpstreamBytes = 0
	osvc, err := orchestrator.New(ocfg, app.Deps{Log: logx.Discard(), DB: db, Bus: bus, Registerer: prometheus.NewRegistry()})
	require.NoError(b, err)
	wcfg := worker.DefaultConfig()
	wcfg.Roles = []string{"engineer"}
	wcfg.Concurrency = concurrency
	wcfg.WorkspaceRoot = b.TempDir()
	wcfg.Tools.Slots = concurrency
	wsvc, err := worker.New(wcfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()})
	require.NoError(b, err)
	wg.Go(func() { _ = osvc.Run(ctx) })
	wg.Go(func() { _ = wsvc.Run(ctx) })

	single, perTask := noopLatency(b, 2000)
	d := grid()
	nodes := len(d.GetNodes())
	uctx := identity.NewContext(ctx, identity.Identity{TenantID: "bench", UserID: "u", Role: identity.RoleAdmin})
	// A small run first, so that streams and consumers exist.
	warm, err := osvc.CreateRun(uctx, &orchestratorv1.CreateRunRequest{Dag: &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{{Id: "w", Command: noop}}}})
	require.NoError(b, err)
	waitDone(b, db, warm.GetRun().GetId())

	b.ResetTimer()
	start := time.Now()
	resp, err := osvc.CreateRun(uctx, &orchestratorv1.CreateRunRequest{Dag: d, MaxConcurrency: concurrency})
	require.NoError(b, err)
	created := time.Since(start)
	state := waitDone(b, db, resp.GetRun().GetId())
	total := time.Since(start)
	b.StopTimer()
	require.Equal(b, "SUCCEEDED", state)
	run := resp.GetRun()

	// Overhead of a node: dispatched to result applied, less the time its
	// process ran (what the worker reports).
	rows, err := db.Query(ctx, `SELECT extract(epoch FROM end_time - start_time) * 1e6 - duration_us FROM nodes WHERE run_id = $1`, run.GetId())
	require.NoError(b, err)
	var over []time.Duration
	for rows.Next() {
		var us float64
		require.NoError(b, rows.Scan(&us))
		over = append(over, time.Duration(us)*time.Microsecond)
	}
	require.NoError(b, rows.Err())
	slices.Sort(over)
	require.Len(b, over, nodes)

	critical := time.Duration(depth) * single
	throughput := time.Duration(nodes) * perTask
	ideal := max(critical, throughput)
	b.Logf("DAG: %d nodes (width %d, depth %d, 2 dependencies each), max_concurrency %d, %d CPUs", nodes, width, depth, concurrency, runtime.NumCPU())
	b.Logf("no-op task (%q through toolexec): %s alone (p50); %s per task at %d at once", noop, single, perTask, concurrency)
	b.Logf("ideal: %s (critical path %s, throughput bound %s)", ideal, critical, throughput)
	b.Logf("total: %s (CreateRun %s), %.2fx ideal", total, created, float64(total)/float64(ideal))
	b.Logf("scheduling overhead per node (dispatch to result applied, less the process): p50 %s, p99 %s, max %s",
		percentile(over, 0.5), percentile(over, 0.99), over[len(over)-1])
	b.ReportMetric(float64(percentile(over, 0.5).Microseconds())/1000, "overhead-p50-ms")
	b.ReportMetric(float64(percentile(over, 0.99).Microseconds())/1000, "overhead-p99-ms")
	b.ReportMetric(total.Seconds(), "total-s")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric(float64(total)/float64(ideal), "x-ideal")
}

// waitDone polls the run's state in the database (GetRun would load all
// 10,000 node statuses each time).
func waitDone(b *testing.B, db *pgxpool.Pool, id string) string {
	var state string
	require.Eventually(b, func() bool {
		require.NoError(b, db.QueryRow(context.Background(), `SELECT state FROM runs WHERE id = $1`, id).Scan(&state))
		return state != "RUNNING" && state != "PENDING"
	}, 20*time.Minute, 20*time.Millisecond)
	return state
}

// Package orchestrator_bench measures the Orchestrator on a large DAG:
// 10,000 no-op nodes (width 100, depth 100) at max_concurrency 64, through
// real PostgreSQL, NATS JetStream and an in-process worker running each
// node's command as a process.
package orchestrator_bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/internal/procstat"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
	"sylk.dev/sylk/services/worker"
)

const (
	concurrency = 64
	noop        = "true"
	// toolSlots is the worker's subprocess pool: concurrency pipeline slots
	// besides the default 20% user reserve, so that every dispatched node
	// can run at once and no node waits for a slot inside the worker.
	toolSlots = concurrency * 100 / 80
)

// width and depth are the DAG's shape: 100 x 100 unless SYLK_BENCH_WIDTH
// and SYLK_BENCH_DEPTH say otherwise (for quick runs while developing).
var (
	width = envInt("SYLK_BENCH_WIDTH", 100)
	depth = envInt("SYLK_BENCH_DEPTH", 100)
	// confine is whether the nodes' commands run confined (the default);
	// SYLK_BENCH_CONFINE=0 runs them unconfined, for comparison.
	confine = os.Getenv("SYLK_BENCH_CONFINE") != "0"
	// namespaced runs them in namespaces of their own
	// (SYLK_BENCH_NAMESPACES=1), as a worker beside sylk-task-init does;
	// without, they share the test process's, as in any test binary.
	namespaced = os.Getenv("SYLK_BENCH_NAMESPACES") == "1"
)

// tools are the executor settings of the worker and of the no-op baseline.
func tools(b *testing.B, cfg toolexec.Config) toolexec.Config {
	cfg.Slots = toolSlots
	cfg.Confine = confine
	if namespaced {
		cfg.Namespaces, cfg.TaskInit = toolexec.NamespacesOn, testenv.TaskInit(b)
	} else {
		// The benchmark measures scheduling, not isolation: run as root
		// (here, without namespaces) the no-op commands need no task user.
		cfg.UnsafeRunTasksAsRoot = os.Geteuid() == 0
	}
	return cfg
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

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
// (the machine's throughput for it, and the CPU each call took in all).
func noopLatency(b *testing.B, total int) (single, perTaskParallel, cpu time.Duration) {
	root := b.TempDir()
	bd, err := toolexec.NewBoundary(root)
	require.NoError(b, err)
	ex, err := toolexec.New(tools(b, toolexec.DefaultConfig()), bd, nil)
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
	cpu0 := procstat.Read()
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
	elapsed := time.Since(start)
	shares, procs, busy := procstat.Between(cpu0, procstat.Read(), total)
	if busy > 0 {
		self := time.Duration(0)
		for _, sh := range shares {
			if sh.Name == procstat.Self {
				self = sh.Per
			}
		}
		b.Logf("no-op at %d at once: CPU per task %s (%.0f%% of %d CPUs busy): the process %s, starting and reaping it %s",
			concurrency, busy, 100*float64(busy)*float64(total)/float64(elapsed)/float64(runtime.NumCPU()), runtime.NumCPU(), procs, self)
	}
	return percentile(lat, 0.5), elapsed / time.Duration(total), busy
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
	oreg := prometheus.NewRegistry()
	osvc, err := orchestrator.New(ocfg, app.Deps{Log: logx.Discard(), DB: db, Bus: bus, Registerer: oreg})
	require.NoError(b, err)
	wcfg := worker.DefaultConfig()
	wcfg.Roles = []string{"engineer"}
	wcfg.Concurrency = concurrency
	wcfg.WorkspaceRoot = b.TempDir()
	wcfg.Tools = tools(b, wcfg.Tools)
	wsvc, err := worker.New(wcfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()})
	require.NoError(b, err)
	wg.Go(func() { _ = osvc.Run(ctx) })
	wg.Go(func() { _ = wsvc.Run(ctx) })

	single, perTask, noopCPU := noopLatency(b, 2000)
	d := grid()
	nodes := len(d.GetNodes())
	uctx := identity.NewContext(ctx, identity.Identity{TenantID: "bench", UserID: "u", Role: identity.RoleAdmin})
	// A small run first, so that streams and consumers exist.
	warm, err := osvc.CreateRun(uctx, &orchestratorv1.CreateRunRequest{Dag: &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{{Id: "w", Command: noop}}}})
	require.NoError(b, err)
	waitDone(b, db, warm.GetRun().GetId())

	testenv.Checkpoint(b)
	seq0 := tasksSeq(b, bus)
	batches0, reports0 := resultBatches(b, oreg)
	wal0 := walLSN(b, db)
	b.ResetTimer()
	cpu0 := procstat.Read()
	start := time.Now()
	resp, err := osvc.CreateRun(uctx, &orchestratorv1.CreateRunRequest{Dag: d, MaxConcurrency: concurrency})
	require.NoError(b, err)
	created := time.Since(start)
	state := waitDone(b, db, resp.GetRun().GetId())
	total := time.Since(start)
	cpu1 := procstat.Read()
	b.StopTimer()
	walBytes := walLSN(b, db) - wal0
	// The no-op's cost is measured again after the run, and the two
	// measurements averaged: a single one varies by several percent.
	single2, perTask2, noopCPU2 := noopLatency(b, 2000)
	b.Logf("no-op task before and after the run: %s and %s alone, %s and %s per task at once", single, single2, perTask, perTask2)
	single, perTask, noopCPU = (single+single2)/2, (perTask+perTask2)/2, (noopCPU+noopCPU2)/2
	msgs := tasksSeq(b, bus) - seq0
	batches1, reports1 := resultBatches(b, oreg)
	batches, reports := batches1-batches0, reports1-reports0
	require.Equal(b, "SUCCEEDED", state)
	run := resp.GetRun()

	// Overhead of a node: dispatched to result applied, less the time its
	// process ran (what the worker reports).
	// Its parts, from the worker's timestamps: dispatched to received by the
	// worker (commit, publish, delivery), the worker's own time besides the
	// process, and reported by the worker to applied by the Orchestrator
	// (result in transit, batching, the applying transaction's start).
	rows, err := db.Query(ctx, `SELECT extract(epoch FROM end_time - start_time) * 1e6 - duration_us,
			extract(epoch FROM worker_received_time - start_time) * 1e6,
			extract(epoch FROM worker_reported_time - worker_received_time) * 1e6 - duration_us,
			extract(epoch FROM end_time - worker_reported_time) * 1e6
		FROM nodes WHERE run_id = $1`, run.GetId())
	require.NoError(b, err)
	var over, toWorker, inWorker, toApplied []time.Duration
	for rows.Next() {
		var us, tw, iw, ta float64
		require.NoError(b, rows.Scan(&us, &tw, &iw, &ta))
		over = append(over, time.Duration(us)*time.Microsecond)
		toWorker = append(toWorker, time.Duration(tw)*time.Microsecond)
		inWorker = append(inWorker, time.Duration(iw)*time.Microsecond)
		toApplied = append(toApplied, time.Duration(ta)*time.Microsecond)
	}
	require.NoError(b, rows.Err())
	for _, d := range [][]time.Duration{over, toWorker, inWorker, toApplied} {
		slices.Sort(d)
	}
	require.Len(b, over, nodes)

	critical := time.Duration(depth) * single
	throughput := time.Duration(nodes) * perTask
	ideal := max(critical, throughput)
	b.Logf("DAG: %d nodes (width %d, depth %d, 2 dependencies each), max_concurrency %d, %d CPUs, commands confined: %t, in namespaces: %t",
		nodes, width, depth, concurrency, runtime.NumCPU(), confine, namespaced)
	b.Logf("no-op task (%q through toolexec, mean of the two): %s alone (p50); %s per task at %d at once", noop, single, perTask, concurrency)
	b.Logf("ideal: %s (critical path %s, throughput bound %s)", ideal, critical, throughput)
	b.Logf("total: %s (CreateRun %s), %.2fx ideal", total, created, float64(total)/float64(ideal))
	b.Logf("scheduling overhead per node (dispatch to result applied, less the process): p50 %s, p99 %s, max %s",
		percentile(over, 0.5), percentile(over, 0.99), over[len(over)-1])
	for _, part := range []struct {
		name string
		d    []time.Duration
	}{
		{"dispatched -> received by the worker", toWorker},
		{"in the worker, less the process", inWorker},
		{"reported by the worker -> applied", toApplied},
	} {
		b.Logf("  %-40s p50 %s, p99 %s", part.name, percentile(part.d, 0.5), percentile(part.d, 0.99))
	}
	// Where the machine's CPU went, per node: the nodes' own processes, and
	// what scheduling them cost each part of the mesh.
	if shares, procs, busy := procstat.Between(cpu0, cpu1, nodes); busy > 0 {
		share := float64(busy) * float64(nodes) / float64(total) / float64(runtime.NumCPU())
		b.Logf("CPU per node: %s in all (%.0f%% of %d CPUs busy), of which the node's process %s", busy,
			100*share, runtime.NumCPU(), procs)
		for _, sh := range shares {
			name := sh.Name
			if name == procstat.Self {
				name += " (orchestrator, worker)"
			}
			b.Logf("  %-40s %s", name, sh.Per)
		}
		// The CPU that scheduling may take: the nodes' processes cost what
		// the no-op costs alone, and within 1.5x of the ideal, at the share
		// of the CPUs this run kept busy, everything else must fit in what
		// is left.
		sched := busy - noopCPU
		budget := time.Duration(1.5*float64(ideal)*float64(runtime.NumCPU())*share/float64(nodes)) - noopCPU
		b.Logf("CPU per node for scheduling (the run's less the no-op's %s): %s; within 1.5x of the ideal at %.0f%% busy: %s",
			noopCPU, sched, 100*share, budget)
		b.ReportMetric(float64(sched.Microseconds()), "sched-cpu-us/node")
		b.ReportMetric(float64(budget.Microseconds()), "sched-cpu-budget-us/node")
	}
	b.Logf("PostgreSQL wrote %.0f bytes of WAL per node", walBytes/float64(nodes))
	b.ReportMetric(walBytes/float64(nodes), "wal-bytes/node")
	// Little's law: with max_concurrency nodes out at once, each spends
	// max_concurrency / throughput out, whatever the scheduler does.
	b.Logf("time out per node implied by %d at once at %.0f nodes/s: %s",
		concurrency, float64(nodes)/total.Seconds(), time.Duration(float64(concurrency)/float64(nodes)*float64(total)))
	b.ReportMetric(float64(percentile(toApplied, 0.5).Microseconds())/1000, "result-to-applied-p50-ms")
	b.ReportMetric(float64(percentile(toApplied, 0.99).Microseconds())/1000, "result-to-applied-p99-ms")
	b.ReportMetric(float64(percentile(over, 0.5).Microseconds())/1000, "overhead-p50-ms")
	b.ReportMetric(float64(percentile(over, 0.99).Microseconds())/1000, "overhead-p99-ms")
	// Without global slots every batch of results costs one database round
	// trip per run it touches (a single run here).
	b.Logf("results applied in %d batches (%.1f per batch): %.3f database round trips per node to apply results and dispatch; "+
		"%.2f JetStream messages per node on the task stream (dispatch and result)",
		int(batches), reports/batches, batches/float64(nodes), float64(msgs)/float64(nodes))
	b.ReportMetric(reports/batches, "results-per-batch")
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

// walLSN is the server's current write-ahead log position, in bytes.
func walLSN(b *testing.B, db *pgxpool.Pool) float64 {
	var lsn float64
	require.NoError(b, db.QueryRow(context.Background(), `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn))
	return lsn
}

// tasksSeq is the last sequence of the task stream (dispatches and results).
func tasksSeq(b *testing.B, bus *natsx.Bus) uint64 {
	st, err := bus.JS.Stream(context.Background(), bus.Stream(topology.StreamTasks))
	require.NoError(b, err)
	info, err := st.Info(context.Background())
	require.NoError(b, err)
	return info.State.LastSeq
}

// resultBatches reads how many result batches the orchestrator applied and
// how many reports they held.
func resultBatches(b *testing.B, reg *prometheus.Registry) (batches, reports float64) {
	mfs, err := reg.Gather()
	require.NoError(b, err)
	for _, mf := range mfs {
		if mf.GetName() == "sylk_orchestrator_result_batch_size" {
			h := mf.GetMetric()[0].GetHistogram()
			return float64(h.GetSampleCount()), h.GetSampleSum()
		}
	}
	b.Fatal("no result batch metric")
	return 0, 0
}

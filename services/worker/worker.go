// Package worker runs DAG nodes: it consumes task dispatches for its roles
// from JetStream, runs each node's command in a fresh temporary workspace
// through pkg/toolexec (secret-stripped environment, boundary check,
// adaptive timeout, SIGINT/SIGTERM/SIGKILL to the process group, output cap,
// shared subprocess pool), and reports the result to the Orchestrator.
package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/toolexec"
)

// NoModelOutput is what a prompt-only node reports: no language model acts in
// this worker yet, and the result says so rather than pretend otherwise.
const NoModelOutput = "No language model is configured: the local provider generated nothing for this prompt."

// NoModelReason is why a node whose prompt no model acted on changed
// nothing.
const NoModelReason = "no language model is configured, so nothing acted on the prompt (the offline provider writes no code); configure a provider (docs/llm.md) and run the node again"

// Timings of the consume loop and of result publishing.
const (
	fetchBackoff   = time.Second
	publishTimeout = 30 * time.Second
	// reportFor is how long a finished task's result is offered to a bus
	// that does not take it, before the task is handed back to the queue
	// (and run again): long enough for a bus to come back, as a command's
	// effects may not bear a second run.
	reportFor = 15 * time.Minute
	// maxReportBackoff bounds the wait between two offers.
	maxReportBackoff = 5 * time.Second
	// payloadSlack is room left in a NATS message for the message's
	// headers and fields other than the outputs.
	payloadSlack = 8 << 10
)

// Service is the worker.
type Service struct {
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal
	cfg     Config
	log     *slog.Logger
	bus     *natsx.Bus
	exec    *toolexec.Executor
	toolEnv map[string]string
	metrics metrics
	// running maps a running attempt (runningKey) to the cancel function
	// of the task running it.
	running sync.Map
	// controls maps a running attempt (runningKey) to its task's
	// *taskControl (user actions, spec F-13).
	controls sync.Map
	// model, when set, lets the Engineer write code.
	model Model
	// know are the knowledge agents the task agents consult.
	know knowledge
	// modelLocal: the model is the gate with only the offline provider.
	modelLocal bool
	// stopping is set once the worker is asked to stop (drain.go): a
	// running pipeline then hands its state to a fresh pipeline at the
	// Engineer's next turn instead of starting its next loop here.
	stopping atomic.Bool
	// scratch hands out task directories (scratch.go).
	scratch *scratchPool
	// reportBounds bounds publishResult (reportFor, publishTimeout and
	// maxReportBackoff, but in tests); retried, when set, is told of each
	// offer that failed.
	reportBounds struct {
		within, each, backoff time.Duration
		retried               func(attempt int)
	}
}

type metrics struct {
	tasks       *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	running     *prometheus.GaugeVec
	corrections *prometheus.CounterVec
	handoffs    *prometheus.CounterVec
}

// newMetrics registers the worker's metrics with f.
func newMetrics(f promauto.Factory) metrics {
	return metrics{
		tasks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_worker_tasks_total",
			Help: "Tasks run, by role and outcome (succeeded, failed, timed_out, cancelled).",
		}, []string{"role", "outcome"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sylk_worker_task_duration_seconds",
			Help:    "Wall time of task commands.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"role"}),
		corrections: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_worker_corrections_total",
			Help: "Inspector and Tester corrections checked by the feedback validation gate, by role and decision.",
		}, []string{"role", "decision"}),
		handoffs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_worker_pipeline_handoffs_total",
			Help: "Pipelines that handed their state to a fresh pipeline (spec F-23), by trigger: context, user or shutdown (the worker stopping).",
		}, []string{"trigger"}),
		running: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sylk_worker_tasks_running",
			Help: "Tasks running now.",
		}, []string{"role"}),
	}
}

// New builds the worker; it needs deps.Bus, and uses deps.Redis for the
// cluster-wide subprocess pool (Config.SlotsShared).
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Bus == nil {
		return nil, errors.New("worker: a NATS bus is required")
	}
	if err := os.MkdirAll(cfg.WorkspaceRoot, 0o700); err != nil {
		return nil, fmt.Errorf("worker: workspace root: %w", err)
	}
	// Made first, so that commands are kept out of it as it resolves.
	if err := os.MkdirAll(cfg.CacheRoot, 0o700); err != nil {
		return nil, fmt.Errorf("worker: cache root: %w", err)
	}
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	// Caches shared by a whole tenant, before each user had their own,
	// hold what any of its users' tasks may have planted.
	if old, _ := filepath.Glob(filepath.Join(cfg.CacheRoot, "tenant-*")); len(old) > 0 {
		for _, d := range old {
			if err := os.RemoveAll(d); err != nil {
				log.Warn("remove a tenant-wide cache", slog.String("dir", d), logx.Err(err))
			}
		}
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	ex, err := newPooledExecutor(cfg, deps.Redis, log.With(logx.KeyComponent, "worker"))
	if err != nil {
		return nil, err
	}
	// The cache root itself is covered in a command's namespaces; the
	// directories above it are the host's.
	if err := ex.CheckReachable(cfg.CacheRoot); err != nil {
		ex.Close()
		return nil, fmt.Errorf("worker.cache-root: %w", err)
	}
	f := promauto.With(reg)
	registerCacheMetrics(f, ex)
	f.NewCounterFunc(prometheus.CounterOpts{Name: "sylk_worker_orphans_killed_total",
		Help: "Processes a task command left running outside its process group, killed after it ended."},
		func() float64 { return float64(toolexec.OrphansKilled()) })
	registerIsolationMetrics(f, ex)
	return &Service{
		cfg:     cfg,
		log:     log.With(logx.KeyComponent, "worker"),
		bus:     deps.Bus,
		exec:    ex,
		toolEnv: goEnv(),
		scratch: newScratchPool(cfg.WorkspaceRoot, scratchReuse(cfg, ex)),
		metrics: newMetrics(f),
		know:    newKnowledge(deps.Peers.Librarian, deps.Peers.Archivalist, deps.Peers.Academic),
	}, nil
}

// scratchReuse is how many task directories are kept for later tasks: as
// many as run at once while commands are not confined or run in namespaces
// of their own, none while they are confined without. A confined command's
// rights are to its directory itself, so a process it left behind could
// otherwise read and write the next task's files in the same directory. A
// cgroup per command does not change this: a command can start a process
// in another cgroup (clone3 into any cgroup whose cgroup.procs its user may
// write), so its cgroup being empty does not prove that nothing it started
// is left. A PID namespace does: when the command ends, the kernel kills
// every process left in it, and none can leave it. (A descriptor of the
// directory can still outlive it, in another task of the same user: the
// pool keeps a directory for that user's tasks only.)
func scratchReuse(cfg Config, ex *toolexec.Executor) int {
	if ns, _ := ex.Namespaced(); ex.Confined() && !ns {
		return 0
	}
	return cfg.Concurrency
}

// registerIsolationMetrics exposes how task commands are kept apart:
// confinement, namespaces and the egress proxy's decisions.
func registerIsolationMetrics(f promauto.Factory, ex *toolexec.Executor) {
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "sylk_worker_confined",
		Help: "1 when task commands run confined to their workspace (Landlock), 0 when they do not."},
		func() float64 {
			if ex.Confined() {
				return 1
			}
			return 0
		})
	f.NewCounterFunc(prometheus.CounterOpts{Name: "sylk_worker_egress_refused_total",
		Help: "Connections of task commands the egress proxy refused: their destination is not on -toolexec.network-allow."},
		func() float64 { return float64(ex.Egress().Refused) })
	f.NewCounterFunc(prometheus.CounterOpts{Name: "sylk_worker_egress_allowed_total",
		Help: "Connections of task commands the egress proxy made to a destination of -toolexec.network-allow."},
		func() float64 { return float64(ex.Egress().Allowed) })
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "sylk_worker_namespaced",
		Help: "1 when task commands run in namespaces of their own (toolexec.namespaces), 0 when they do not."},
		func() float64 {
			if ok, _ := ex.Namespaced(); ok {
				return 1
			}
			return 0
		})
}

// registerCacheMetrics exposes the tool output cache's use (spec C-33).
func registerCacheMetrics(f promauto.Factory, ex *toolexec.Executor) {
	for _, m := range []struct {
		name, help string
		counter    bool
		pick       func(toolexec.CacheStats) float64
	}{
		{"sylk_worker_tool_cache_hits_total", "Tool calls answered from the output cache: their files were unchanged.", true,
			func(c toolexec.CacheStats) float64 { return float64(c.Hits) }},
		{"sylk_worker_tool_cache_misses_total", "Calls of cacheable tools that ran.", true,
			func(c toolexec.CacheStats) float64 { return float64(c.Misses) }},
		{"sylk_worker_tool_cache_evictions_total", "Cached tool outputs dropped to stay within the cache's bounds.", true,
			func(c toolexec.CacheStats) float64 { return float64(c.Evictions) }},
		{"sylk_worker_tool_cache_bytes", "Bytes of tool output cached.", false,
			func(c toolexec.CacheStats) float64 { return float64(c.Bytes) }},
	} {
		read := func() float64 { return m.pick(ex.CacheStats()) }
		if m.counter {
			f.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, read)
		} else {
			f.NewGaugeFunc(prometheus.GaugeOpts{Name: m.name, Help: m.help}, read)
		}
	}
}

// slotPoolName names the cluster-wide subprocess pool in Redis.
const slotPoolName = "workers"

// newExecutor builds a tool executor with an in-process slot pool.
func newExecutor(cfg Config) (*toolexec.Executor, error) { return newPooledExecutor(cfg, nil, nil) }

// newPooledExecutor builds the tool executor: commands run only inside the
// workspace root, with the worker's output cap, taking subprocess slots
// from the cluster-wide pool when cfg.SlotsShared and rc is set; that pool
// logs its Redis outages to log.
func newPooledExecutor(cfg Config, rc *redisx.Client, log *slog.Logger) (*toolexec.Executor, error) {
	b, err := toolexec.NewBoundary(cfg.WorkspaceRoot)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	tools := cfg.Tools
	tools.MaxOutputBytes = cfg.MaxOutputBytes
	// No task reads another user's caches; each writes its own user's
	// (userCaches).
	tools.ConfineHidden = append(slices.Clone(tools.ConfineHidden), cfg.CacheRoot)
	var pool toolexec.SlotPool
	if cfg.SlotsShared && rc != nil {
		cp := toolexec.NewClusterPoolFor(rc, slotPoolName, tools, cfg.SlotLease)
		cp.SetLogger(log)
		pool = cp
	}
	return toolexec.New(tools, b, pool)
}

// goEnv keeps Go builds in tasks offline: no toolchain is downloaded. The
// build and module caches are the user's (userCaches).
func goEnv() map[string]string {
	out := map[string]string{}
	if os.Getenv("GOTOOLCHAIN") == "" {
		out["GOTOOLCHAIN"] = "local"
	}
	return out
}

// userCaches returns the Go build and module caches of the tasks of one
// user of a tenant, made when missing: directories of their own under
// -worker.cache-root, so that no task can plant code in another user's
// builds (a build cache entry or an unpacked module is used as found) nor
// read what they compiled. Users are kept apart, not only tenants, as their
// sessions and runs are.
func (s *Service) userCaches(tenant, user string) (gocache, gomodcache string, err error) {
	sum := sha256.Sum256([]byte(tenant + "\x00" + user))
	dir := filepath.Join(s.cfg.CacheRoot, "user-"+hex.EncodeToString(sum[:12]))
	gocache, gomodcache = filepath.Join(dir, "go-build"), filepath.Join(dir, "go-mod")
	for _, d := range []string{gocache, gomodcache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", fmt.Errorf("user cache: %w", err)
		}
	}
	return gocache, gomodcache, nil
}

// Register does nothing: the worker serves no gRPC API.
func (s *Service) Register(*grpc.Server) {}

// Package worker runs DAG nodes: it consumes task dispatches for its roles
// from JetStream, runs each node's command in a fresh temporary workspace
// through pkg/toolexec (secret-stripped environment, boundary check,
// adaptive timeout, SIGINT/SIGTERM/SIGKILL to the process group, output cap,
// shared subprocess pool), and reports the result to the Orchestrator.
package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// NoModelOutput is what a prompt-only node reports: no language model acts in
// this worker yet, and the result says so rather than pretend otherwise.
const NoModelOutput = "No language model is configured: the local provider generated nothing for this prompt."

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
	// payloadSlack is room left in a NATS message for the envelope's
	// headers and fields other than the outputs.
	payloadSlack = 8 << 10
)

// Service is the worker.
type Service struct {
	cfg     Config
	log     *slog.Logger
	bus     *natsx.Bus
	exec    *toolexec.Executor
	toolEnv map[string]string
	metrics metrics
	// running maps a cancel target ("<run>/<node>/<attempt>") to the
	// cancel function of the task running it.
	running sync.Map
	// controls maps "<tenant>|<run>/<node>/<attempt>" to the running task's
	// *taskControl (user actions, spec F-13).
	controls sync.Map
	// model, when set, lets the Engineer write code.
	model Model
	// modelLocal: the model is the gate with only the offline provider.
	modelLocal bool
	// scratch hands out task directories (workspace.go).
	scratch *scratchPool
	// report bounds publishResult (reportFor, publishTimeout and
	// maxReportBackoff, but in tests); retried, when set, is told of each
	// offer that failed.
	report struct {
		within, each, backoff time.Duration
		retried               func(attempt int)
	}
}

// errCancelledByOrchestrator is the cause of a task stopped by a cancel
// signal.
var errCancelledByOrchestrator = errors.New("cancelled by the orchestrator")

// cancelSubject is where the Orchestrator signals cancellations (see
// orchestrator.CancelSubject).
func cancelSubject(b *natsx.Bus) string { return b.Subject("signal", "task", "cancel") }

func cancelTarget(runID, nodeID string, attempt int32) string {
	return fmt.Sprintf("%s/%s/%d", runID, nodeID, attempt)
}

// onCancel stops the task a cancel signal names, if it runs here.
func (s *Service) onCancel(m *nats.Msg) {
	var env messagev1.Envelope
	if err := proto.Unmarshal(m.Data, &env); err != nil || env.GetSignal().GetType() != messagev1.SignalType_SIGNAL_TYPE_CANCEL_TASK {
		return
	}
	if c, ok := s.running.Load(env.GetTenantId() + "|" + env.GetSignal().GetTargetId()); ok {
		c.(context.CancelCauseFunc)(errCancelledByOrchestrator)
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
			Help: "Pipelines that handed their state to a fresh pipeline (spec F-23), by trigger: context or user.",
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
	ex, err := newPooledExecutor(cfg, deps.Redis)
	if err != nil {
		return nil, err
	}
	f := promauto.With(reg)
	registerCacheMetrics(f, ex)
	f.NewCounterFunc(prometheus.CounterOpts{Name: "sylk_worker_orphans_killed_total",
		Help: "Processes a task command left running outside its process group, killed after it ended."},
		func() float64 { return float64(toolexec.OrphansKilled()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "sylk_worker_confined",
		Help: "1 when task commands run confined to their workspace (Landlock), 0 when they do not."},
		func() float64 {
			if ex.Confined() {
				return 1
			}
			return 0
		})
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "sylk_worker_namespaced",
		Help: "1 when task commands run in namespaces of their own (toolexec.namespaces), 0 when they do not."},
		func() float64 {
			if ok, _ := ex.Namespaced(); ok {
				return 1
			}
			return 0
		})
	return &Service{
		cfg:     cfg,
		log:     log.With(logx.KeyComponent, "worker"),
		bus:     deps.Bus,
		exec:    ex,
		toolEnv: goEnv(),
		scratch: newScratchPool(cfg.WorkspaceRoot, scratchReuse(cfg, ex)),
		metrics: newMetrics(f),
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
func newExecutor(cfg Config) (*toolexec.Executor, error) { return newPooledExecutor(cfg, nil) }

// newPooledExecutor builds the tool executor: commands run only inside the
// workspace root, with the worker's output cap, taking subprocess slots
// from the cluster-wide pool when cfg.SlotsShared and rc is set.
func newPooledExecutor(cfg Config, rc *redisx.Client) (*toolexec.Executor, error) {
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
		pool = toolexec.NewClusterPoolFor(rc, slotPoolName, tools, cfg.SlotLease)
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

// Run provisions the task stream and consumes each role's queue with
// Concurrency loops until ctx is done. It returns nil on a clean stop.
func (s *Service) Run(ctx context.Context) error {
	defer s.exec.Close()
	defer s.scratch.close()
	err := s.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (s *Service) run(ctx context.Context) error {
	if err := topology.EnsureTasks(ctx, s.bus); err != nil {
		return err
	}
	// Finished pipelines' stage checkpoints go to the Archivalist's inbox.
	if err := topology.EnsureAgents(ctx, s.bus); err != nil {
		return err
	}
	consumers := make([]jetstream.Consumer, len(s.cfg.Roles))
	for i, role := range s.cfg.Roles {
		cons, err := s.bus.EnsureConsumer(ctx, natsx.ConsumerSpec{
			Stream:         s.bus.Stream(topology.StreamTasks),
			Durable:        "worker-" + role,
			FilterSubjects: []string{topology.TaskSubject(s.bus, role)},
			AckWait:        s.cfg.AckWait,
			// One more than the worker takes: the last delivery is reported
			// as failed (giveUp), never dropped by the server.
			MaxDeliver: s.cfg.MaxDeliveries + 1,
		})
		if err != nil {
			return err
		}
		consumers[i] = cons
	}
	sub, err := s.bus.Conn.Subscribe(cancelSubject(s.bus), s.onCancel)
	if err != nil {
		return fmt.Errorf("subscribe to cancel signals: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	csub, err := s.bus.Conn.Subscribe(ControlSubject(s.bus), s.onControl)
	if err != nil {
		return fmt.Errorf("subscribe to task controls: %w", err)
	}
	defer func() { _ = csub.Unsubscribe() }()
	g, gctx := errgroup.WithContext(ctx)
	for i, role := range s.cfg.Roles {
		for range s.cfg.Concurrency {
			g.Go(func() error { return s.loop(gctx, role, consumers[i]) })
		}
	}
	if ok, why := s.exec.InCgroups(); ok {
		s.log.InfoContext(ctx, "task commands run in a cgroup each: what a command leaves in it is killed when it ends")
	} else {
		s.log.InfoContext(ctx, "task commands share the worker's cgroup: the orphan sweep ends what they leave running",
			logx.Err(why))
	}
	if ok, why := s.exec.Namespaced(); ok {
		s.log.InfoContext(ctx, "task commands run in namespaces of their own: they see no other task's directory or processes, and what they leave running ends with them",
			slog.String("toolexec.network", s.cfg.Tools.Network))
	} else {
		s.log.InfoContext(ctx, "task commands share the worker's namespaces", logx.Err(why))
	}
	if s.exec.Confined() {
		s.log.InfoContext(ctx, "task commands confined", slog.Int("landlock_abi", toolexec.LandlockABI()))
	} else {
		s.log.WarnContext(ctx, "task commands are not confined: they can read and write whatever the worker's user can",
			slog.Bool("toolexec.confine", s.cfg.Tools.Confine), slog.Int("landlock_abi", toolexec.LandlockABI()))
	}
	s.log.InfoContext(ctx, "worker started", slog.Any("roles", s.cfg.Roles), slog.Int("concurrency", s.cfg.Concurrency), slog.String("worker_id", s.cfg.ID))
	return g.Wait()
}

// loop pulls one task at a time, so that no task waits in a local buffer
// while its ack timer runs.
func (s *Service) loop(ctx context.Context, role string, cons jetstream.Consumer) error {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1, jetstream.FetchContext(ctx))
		if err == nil {
			for msg := range batch.Messages() {
				s.handle(ctx, role, msg)
			}
			err = batch.Error()
		}
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "fetch task", slog.String("role", role), logx.Err(err))
			wait(ctx, fetchBackoff)
		}
	}
	return nil
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// handle runs one dispatch and reports its result. A task interrupted by
// shutdown is handed back to the queue for another worker.
func (s *Service) handle(ctx context.Context, role string, msg jetstream.Msg) {
	received := timestamppb.Now()
	ctx = natsx.ContextFrom(ctx, msg.Headers())
	var env messagev1.Envelope
	if err := proto.Unmarshal(msg.Data(), &env); err != nil || env.GetTaskDispatch() == nil {
		s.log.ErrorContext(ctx, "dropping a message that is not a task dispatch", slog.String("subject", msg.Subject()))
		_ = msg.Term()
		return
	}
	task := env.GetTaskDispatch()
	log := s.log.With(logx.KeyTenantID, env.GetTenantId(), logx.KeyRunID, task.GetRunId(), logx.KeyNodeID, task.GetNodeId(), slog.Int("attempt", int(task.GetAttempt())), slog.String("role", role))
	if meta, err := msg.Metadata(); err == nil && meta.NumDelivered >= uint64(s.cfg.MaxDeliveries) {
		s.giveUp(ctx, log, role, &env, msg, meta.NumDelivered)
		return
	}

	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	go s.heartbeat(hbCtx, msg)
	taskCtx, cancelTask := context.WithCancelCause(ctx)
	key := env.GetTenantId() + "|" + cancelTarget(task.GetRunId(), task.GetNodeId(), task.GetAttempt())
	s.running.Store(key, cancelTask)
	ctl := newTaskControl(false)
	ctl.engineerReads = s.engineerReads(task)
	s.controls.Store(key, ctl)
	s.metrics.running.WithLabelValues(role).Inc()
	result, cancelled := s.runTaskEnv(withControl(taskCtx, ctl), role, &env)
	s.metrics.running.WithLabelValues(role).Dec()
	s.controls.Delete(key)
	s.running.Delete(key)
	byOrchestrator := errors.Is(context.Cause(taskCtx), errCancelledByOrchestrator)
	cancelTask(nil)
	if cancelled && byOrchestrator {
		stopHeartbeat()
		log.InfoContext(ctx, "task cancelled by the orchestrator")
		s.metrics.tasks.WithLabelValues(role, "cancelled").Inc()
		s.reportCancelled(ctx, log, role, &env, result, received)
		_ = msg.Term()
		return
	}
	if result.retry {
		stopHeartbeat()
		log.InfoContext(ctx, "no subprocess slot free; the task goes back to the queue")
		_ = msg.NakWithDelay(fetchBackoff)
		return
	}
	if cancelled {
		stopHeartbeat()
		log.InfoContext(ctx, "task interrupted by shutdown; returned to the queue")
		_ = msg.Nak()
		return
	}
	out := resultEnvelope(&env, role, result.msg, result.meta)
	result.msg.ReceivedAt = received
	s.fitPayload(out, result)
	result.msg.ReportedAt = timestamppb.Now()
	err := s.publishResult(ctx, out)
	stopHeartbeat()
	if err != nil {
		log.ErrorContext(ctx, "report task result; the task will be redelivered", logx.Err(err))
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	if err := msg.Ack(); err != nil {
		log.WarnContext(ctx, "ack task", logx.Err(err))
	}
	outcome := "succeeded"
	switch {
	case result.msg.GetTimedOut():
		outcome = "timed_out"
	case out.Type == messagev1.MessageType_MESSAGE_TYPE_TASK_FAILED:
		outcome = "failed"
	}
	s.metrics.tasks.WithLabelValues(role, outcome).Inc()
	s.metrics.duration.WithLabelValues(role).Observe(result.msg.GetDuration().AsDuration().Seconds())
	log.InfoContext(ctx, "task done", slog.String("outcome", outcome), slog.Int("exit_code", int(result.msg.GetExitCode())), slog.Duration(logx.KeyDuration, result.msg.GetDuration().AsDuration()))
}

// reportCancelled sends the Orchestrator what a cancelled task's command
// printed before it was stopped, when it printed anything: the node stays
// cancelled, its output marked partial (spec C-32). One attempt: the
// output is a courtesy, and the cancel is already recorded.
func (s *Service) reportCancelled(ctx context.Context, log *slog.Logger, role string, env *messagev1.Envelope, o taskOutcome, received *timestamppb.Timestamp) {
	if o.msg == nil || o.msg.GetStdout() == "" && o.msg.GetStderr() == "" {
		return
	}
	o.msg.ReceivedAt = received
	out := resultEnvelope(env, role, o.msg, map[string]string{MetaCancelled: "1"})
	s.fitPayload(out, o)
	o.msg.ReportedAt = timestamppb.Now()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	r := o.msg
	id := fmt.Sprintf("%s:%s:%d:cancelled", r.GetRunId(), r.GetNodeId(), r.GetAttempt())
	if _, err := s.bus.Publish(pctx, topology.ResultSubject(s.bus), id, out); err != nil {
		log.WarnContext(ctx, "report a cancelled task's partial output", logx.Err(err))
	}
}

// resultEnvelope is the envelope reporting r, the result of the dispatch
// env, to the Orchestrator.
func resultEnvelope(env *messagev1.Envelope, role string, r *messagev1.TaskResult, meta map[string]string) *messagev1.Envelope {
	out := &messagev1.Envelope{
		Id:            ids.New(),
		CorrelationId: env.GetCorrelationId(),
		ParentId:      env.GetId(),
		TenantId:      env.GetTenantId(),
		SessionId:     env.GetSessionId(),
		UserId:        env.GetUserId(),
		Source:        role,
		Target:        topology.AgentOrchestrator,
		Type:          messagev1.MessageType_MESSAGE_TYPE_TASK_COMPLETE,
		CreatedAt:     timestamppb.Now(),
		Attempt:       env.GetTaskDispatch().GetAttempt(),
		Metadata:      meta,
		Payload:       &messagev1.Envelope_TaskResult{TaskResult: r},
	}
	if r.GetExitCode() != 0 || r.GetError() != "" {
		out.Type = messagev1.MessageType_MESSAGE_TYPE_TASK_FAILED
	}
	return out
}

// giveUp reports a dispatch delivered Config.MaxDeliveries times as failed
// instead of running it again. It came back each time without a result: no
// subprocess slot came free in time, a worker stopped, or one died while it
// ran, perhaps because of it. Were it handed back once more, JetStream
// would drop it and its node would stay dispatched with no word; run
// again without a bound, a task that kills its worker would take the
// workers down one after another.
func (s *Service) giveUp(ctx context.Context, log *slog.Logger, role string, env *messagev1.Envelope, msg jetstream.Msg, n uint64) {
	task := env.GetTaskDispatch()
	r := &messagev1.TaskResult{RunId: task.GetRunId(), NodeId: task.GetNodeId(), Attempt: task.GetAttempt(), WorkerId: s.cfg.ID,
		ExitCode: -1, ReceivedAt: timestamppb.Now(),
		Error: fmt.Sprintf("the task came back to the queue %d times without a result: no subprocess slot came free in time, "+
			"or a worker stopped or failed while it ran (the task may make its worker fail); it was not run again", n-1)}
	r.ReportedAt = timestamppb.Now()
	if err := s.publishResult(ctx, resultEnvelope(env, role, r, nil)); err != nil {
		log.ErrorContext(ctx, "report a task given up; it stays in the queue", logx.Err(err))
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	_ = msg.Ack()
	s.metrics.tasks.WithLabelValues(role, "given_up").Inc()
	log.WarnContext(ctx, "task given up after its deliveries", slog.Uint64("deliveries", n))
}

// heartbeat tells JetStream the task is still being worked on.
func (s *Service) heartbeat(ctx context.Context, msg jetstream.Msg) {
	t := time.NewTicker(s.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = msg.InProgress()
		}
	}
}

// publishResult reports a result, retrying with backoff. A finished task is
// reported even when shutdown has begun (ctx done), but then with a single
// attempt, so that shutdown is not held up.
func (s *Service) publishResult(ctx context.Context, env *messagev1.Envelope) error {
	r := env.GetTaskResult()
	msgID := fmt.Sprintf("%s:%s:%d:result", r.GetRunId(), r.GetNodeId(), r.GetAttempt())
	within, each := cmp.Or(s.report.within, reportFor), cmp.Or(s.report.each, publishTimeout)
	maxBackoff := cmp.Or(s.report.backoff, maxReportBackoff)
	deadline := time.Now().Add(within)
	backoff := min(250*time.Millisecond, maxBackoff)
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), each)
		_, err := s.bus.Publish(pctx, topology.ResultSubject(s.bus), msgID, env)
		cancel()
		// The task's heartbeat goes on meanwhile, so it is not handed to
		// another worker while its result waits for the bus.
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if s.report.retried != nil {
			s.report.retried(attempt)
		}
		wait(ctx, backoff)
		backoff = min(2*backoff, maxBackoff)
	}
}

// taskOutcome is a TaskResult plus the tool result it was rendered from.
type taskOutcome struct {
	msg  *messagev1.TaskResult
	tool *toolexec.Result
	// meta carries the patch, the structured report and the pipeline status
	// to the Orchestrator (result envelope metadata, keys Meta*).
	meta map[string]string
	// retry is set when the task could not run yet (no subprocess slot) and
	// should go back to the queue.
	retry bool
}

// Envelope metadata between the Orchestrator and the workers.
const (
	MetaNodeSpec   = "sylk.node_spec"   // dispatch: base64 sylk.orchestrator.v1.Node
	MetaRepository = "sylk.repository"  // dispatch: the run's repository path
	MetaBaseCommit = "sylk.base_commit" // dispatch: the run's starting commit
	MetaPatch      = "sylk.patch"       // result: git diff from the starting commit
	MetaReport     = "sylk.report"      // result: protojson sylk.orchestrator.v1.TaskReport
	MetaPipeline   = "sylk.pipeline"    // result: protojson sylk.orchestrator.v1.PipelineStatus
	MetaGitAudit   = "sylk.git_audit"   // result: the task's git calls, one a line
	// MetaSessionCheck marks a session-level check (spec F-06): dispatch
	// "1", result protojson sylk.orchestrator.v1.SessionCheck.
	MetaSessionCheck = "sylk.session_check"
	// MetaResultPatch is the run's merged patch a session check applies.
	MetaResultPatch = "sylk.result_patch"
	// MetaHandoff is a pipeline's handoff to a fresh pipeline (spec F-23):
	// result, protojson sylk.orchestrator.v1.PipelineHandoff.
	MetaHandoff = "sylk.handoff"
	// MetaStartPatch is the patch a handed-off pipeline left, which the new
	// pipeline's workspace starts from: dispatch, a git diff from the
	// starting commit.
	MetaStartPatch = "sylk.start_patch"
	// MetaCancelled marks the result of a task the Orchestrator cancelled
	// ("1"): what its command printed before it was stopped (spec C-32).
	MetaCancelled = "sylk.cancelled"
)

// maxPatchBytes bounds a patch carried in a result.
const maxPatchBytes = 256 << 10

// runTask runs a dispatch without metadata (tests).
func (s *Service) runTask(ctx context.Context, role string, task *messagev1.TaskDispatch) (taskOutcome, bool) {
	return s.runTaskEnv(ctx, role, &messagev1.Envelope{Priority: messagev1.Priority_PRIORITY_PIPELINE,
		Payload: &messagev1.Envelope_TaskDispatch{TaskDispatch: task}})
}

// runTaskEnv runs a dispatch: in a fresh workspace (a clone of the run's
// repository at its starting commit when there is one), the node's edits
// and command, or the whole Engineer -> Inspector -> Tester pipeline for
// pipeline nodes. It reports cancelled when ctx ended before the task did.
func (s *Service) runTaskEnv(ctx context.Context, role string, env *messagev1.Envelope) (taskOutcome, bool) {
	task := env.GetTaskDispatch()
	meta := env.GetMetadata()
	res := &messagev1.TaskResult{
		RunId:    task.GetRunId(),
		NodeId:   task.GetNodeId(),
		Attempt:  task.GetAttempt(),
		WorkerId: s.cfg.ID,
		Duration: durationpb.New(0),
	}
	fail := func(msg string) (taskOutcome, bool) {
		res.ExitCode = -1
		res.Error = msg
		return taskOutcome{msg: res}, false
	}
	spec := &orchestratorv1.Node{}
	if raw := meta[MetaNodeSpec]; raw != "" {
		b, err := base64.StdEncoding.DecodeString(raw)
		if err != nil || proto.Unmarshal(b, spec) != nil {
			return fail("the dispatch's node spec is malformed")
		}
	}
	repo := meta[MetaRepository]
	if task.GetCommand() == "" && len(spec.GetEdits()) == 0 && !spec.GetPipeline() && (s.model == nil || role != dagRoleEngineer) && meta[MetaSessionCheck] == "" {
		res.Stdout = NoModelOutput
		return taskOutcome{msg: res, meta: reportMeta(&orchestratorv1.TaskReport{
			Implemented: "nothing: " + NoModelOutput, Tested: "not tested", Decisions: "none", Deviations: "none",
			Concerns: "no language model is configured"}, nil)}, false
	}
	limit := s.cfg.MaxOutputBytes
	if l := task.GetOutputLimitBytes(); l > 0 && l < int64(limit) {
		limit = int(l)
	}
	// Directories are reused only among the tasks of one user (scratchPool).
	scope := env.GetTenantId() + "\x00" + env.GetUserId()
	ws, err := s.scratch.get(scope)
	if err != nil {
		s.log.ErrorContext(ctx, "create task workspace", logx.Err(err))
		if ws != "" {
			removeWorkspace(ws)
		}
		return fail("could not create the task workspace")
	}
	defer s.scratch.put(scope, ws)

	dir := ws
	vars := map[string]string{"HOME": ws, "TMPDIR": filepath.Join(ws, ".tmp")}
	if up := task.GetUpstreamOutputs(); len(up) > 0 {
		// Dependencies' outputs (spec F-04): one file per dependency.
		updir := filepath.Join(ws, ".upstream")
		if err := s.scratch.mkdir(scope, updir); err != nil {
			return fail("could not create the task workspace")
		}
		for id, out := range up {
			if err := os.WriteFile(filepath.Join(updir, filepath.Base(filepath.Clean("/"+id))), []byte(out), 0o600); err != nil {
				return fail("could not create the task workspace")
			}
		}
		vars[UpstreamDirEnv] = updir
	}
	for k, v := range s.toolEnv {
		vars[k] = v
	}
	var writable []string
	if gocache, gomodcache, err := s.userCaches(env.GetTenantId(), env.GetUserId()); err == nil {
		vars["GOCACHE"], vars["GOMODCACHE"] = gocache, gomodcache
		writable = []string{gocache, gomodcache}
	} else {
		// Go then caches under the task's HOME, for this task only.
		s.log.WarnContext(ctx, "create the user's tool caches", logx.Err(err))
	}
	var wsp *workspace
	if repo != "" {
		wsp, err = openWorkspace(ctx, s.log, ws, repo, meta[MetaBaseCommit], toolexec.GitEnv(s.cfg.Tools.ExtraSecretPatterns),
			func(cmd *exec.Cmd) error { return s.exec.StartIn(cmd, ws) })
		if err != nil {
			if ctx.Err() != nil {
				return taskOutcome{}, true
			}
			s.log.WarnContext(ctx, "prepare repository workspace", logx.Err(err))
			return fail("could not prepare the repository workspace: " + err.Error())
		}
		defer wsp.close()
		dir = wsp.dir
		vars["PATH"] = wsp.guardDir() + string(os.PathListSeparator) + os.Getenv("PATH")
		vars["GIT_EXEC_PATH"] = wsp.execPath()
		// Commits the agent makes itself have an author, whatever the host.
		for _, k := range []string{"GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"} {
			vars[k] = "Sylk Engineer"
		}
		for _, k := range []string{"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"} {
			vars[k] = "engineer@sylk.invalid"
		}
		if sp := meta[MetaStartPatch]; sp != "" {
			// A pipeline carrying on from a handoff starts from the old
			// pipeline's files (spec F-23).
			if err := wsp.applyPatch(ctx, sp); err != nil {
				return fail("could not apply the handed-off pipeline's changes: " + err.Error())
			}
		}
	}
	var timeout time.Duration
	if d := task.GetTimeout().AsDuration(); task.GetTimeout() != nil && d > 0 {
		timeout = d
	}
	runCmd := func(ctx context.Context, command string) (toolexec.Result, error) {
		return s.exec.Execute(ctx, toolexec.Invocation{Command: command, WorkingDir: dir, Workspace: ws, Env: vars,
			Writable: writable, CacheScope: scope,
			Class: toolexec.ClassPipeline, Priority: int(env.GetPriority()), Timeout: timeout})
	}
	if meta[MetaSessionCheck] != "" {
		return s.sessionCheck(ctx, wsp, dir, meta, runCmd, res)
	}
	out := taskOutcome{msg: res}
	report := &orchestratorv1.TaskReport{Decisions: "none", Deviations: "none", Concerns: "none", Tested: "not tested",
		Briefing: briefingLine(spec.GetRetryBriefing())}
	var pipe *orchestratorv1.PipelineStatus
	var answer *modelAnswer
	start := time.Now()
	if spec.GetPipeline() && role == dagRoleEngineer {
		var err error
		pipe, err = s.runPipeline(ctx, env, spec, dir, wsp, runCmd, res, report, &out)
		if err != nil {
			return s.stepError(ctx, err, res, &out)
		}
	} else {
		edited, err := applyEdits(dir, editsOf(spec))
		if err != nil {
			return fail(err.Error())
		}
		ctl := controlOf(ctx, false)
		var generated []string
		if role == dagRoleEngineer {
			sctx, done := ctl.stage(ctx, stageEngineer)
			generated, answer, err = s.generate(sctx, env, spec, dir, nil)
			interrupted := errors.Is(context.Cause(sctx), errInterrupted)
			done()
			switch {
			case ctx.Err() != nil:
				return taskOutcome{}, true
			case interrupted:
				_, why := ctl.isInterrupted()
				return fail(interruptedError(stageEngineer, why))
			case err != nil:
				return fail("engineer: " + err.Error())
			}
		}
		report.Implemented = implementedText(edited, task.GetCommand(), generated, answer)
		if task.GetCommand() != "" {
			sctx, done := ctl.stage(ctx, stageCommand)
			r, err := runCmd(sctx, task.GetCommand())
			interrupted := errors.Is(context.Cause(sctx), errInterrupted)
			done()
			switch {
			case ctx.Err() != nil && err == nil:
				// Cancelled: what it printed until then is kept (spec C-32).
				fillResult(res, &r, limit)
				res.Duration = durationpb.New(time.Since(start))
				out.tool = &r
				return out, true
			case ctx.Err() != nil:
				return taskOutcome{}, true
			case interrupted:
				// The partial output is kept (spec F-13).
				fillResult(res, &r, limit)
				_, why := ctl.isInterrupted()
				res.ExitCode, res.Error = -1, interruptedError(stageCommand, why)
				out.tool = &r
				report.Implemented = res.Error
			case err != nil:
				return s.stepError(ctx, err, res, &out)
			default:
				fillResult(res, &r, limit)
				out.tool = &r
			}
		}
	}
	res.Duration = durationpb.New(time.Since(start))
	switch {
	case answer != nil:
		report.Decisions = orNone(answer.Decisions)
		report.Deviations = orNone(answer.Deviations)
		report.Concerns = orNone(answer.Concerns)
	case task.GetPrompt() != "" && pipe == nil:
		report.Concerns = "the prompt was not acted on: " + NoModelOutput
		if task.GetCommand() == "" && res.GetStdout() == "" {
			res.Stdout = NoModelOutput
		}
	}
	if wsp != nil {
		// Nothing the task left running may change the checkout while the
		// worker's own git reads it.
		toolexec.SweepOrphans()
		files, err := wsp.changedFiles(ctx)
		if err == nil {
			report.FilesChanged = files
			f := SecurityFindings(files)
			if h := wsp.hidden; len(h) > 0 {
				f = append(f, fmt.Sprintf("not in the patch, hidden by ignore rules the task wrote: %s", strings.Join(h[:min(len(h), 20)], ", ")))
			}
			if len(f) > 0 {
				report.Concerns = strings.Join(f, "; ")
			}
		}
		if res.GetExitCode() == 0 && res.GetError() == "" {
			// The files are staged already: no second pass over them.
			patch, cerr := "", err
			if err == nil {
				patch, cerr = wsp.commit(ctx, conventionalMessage(task.GetNodeId(), spec.GetName()), files)
			}
			switch err := cerr; {
			case err != nil:
				res.ExitCode, res.Error = -1, "could not commit the task's changes: "+err.Error()
			case len(patch) > maxPatchBytes:
				res.ExitCode, res.Error = -1, fmt.Sprintf("the task's patch of %d bytes exceeds the limit of %d", len(patch), maxPatchBytes)
			default:
				out.meta = mergeMeta(out.meta, map[string]string{MetaPatch: patch})
			}
		}
		calls := append(wsp.audit.list(), wsp.agentCalls()...)
		out.meta = mergeMeta(out.meta, map[string]string{MetaGitAudit: strings.Join(calls, "\n")})
	}
	out.meta = mergeMeta(out.meta, reportMeta(report, pipe))
	return out, false
}

// UpstreamDirEnv names the directory holding one file per dependency, named
// after it, with its stdout.
const UpstreamDirEnv = "SYLK_UPSTREAM_DIR"

// dagRoleEngineer is the role that runs pipelines.
const dagRoleEngineer = "engineer"

// stepError maps an executor error: no slot (back to the queue), a
// cancellation, or a command that could not start.
func (s *Service) stepError(ctx context.Context, err error, res *messagev1.TaskResult, out *taskOutcome) (taskOutcome, bool) {
	switch {
	case errors.Is(err, toolexec.ErrPoolTimeout):
		return taskOutcome{retry: true}, false
	case ctx.Err() != nil:
		return taskOutcome{}, true
	}
	s.log.ErrorContext(ctx, "start task command", logx.Err(err))
	res.ExitCode = -1
	res.Error = "could not start the command"
	out.msg = res
	return *out, false
}

func fillResult(res *messagev1.TaskResult, r *toolexec.Result, limit int) {
	res.ExitCode = int32(r.ExitCode)
	res.TimedOut = r.TimedOut
	if r.TimedOut {
		res.Error = fmt.Sprintf("timed out after %s (stopped with %s)", r.Timeout, r.KillSignal)
	}
	res.Stdout, res.StdoutTruncated = r.RenderStdout(limit)
	res.Stderr, res.StderrTruncated = r.RenderStderr(limit)
}

func editsOf(n *orchestratorv1.Node) map[string]string {
	if len(n.GetEdits()) == 0 {
		return nil
	}
	out := make(map[string]string, len(n.GetEdits()))
	for _, e := range n.GetEdits() {
		out[e.GetPath()] = e.GetContent()
	}
	return out
}

func implementedText(edited []string, command string, generated []string, a *modelAnswer) string {
	var parts []string
	if len(edited) > 0 {
		parts = append(parts, "wrote "+strings.Join(edited, ", "))
	}
	if a != nil {
		parts = append(parts, "the model wrote "+strings.Join(generated, ", ")+": "+orNone(a.Summary))
	}
	if command != "" {
		parts = append(parts, "ran `"+command+"`")
	}
	if a == nil {
		parts = append(parts, "no code was generated (no language model is configured)")
	}
	return strings.Join(parts, "; ")
}

func mergeMeta(a, b map[string]string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range b {
		a[k] = v
	}
	return a
}

func reportMeta(r *orchestratorv1.TaskReport, p *orchestratorv1.PipelineStatus) map[string]string {
	m := map[string]string{}
	if b, err := protojson.Marshal(r); err == nil {
		m[MetaReport] = string(b)
	}
	if p != nil {
		if b, err := protojson.Marshal(p); err == nil {
			m[MetaPipeline] = string(b)
		}
	}
	return m
}

func passWord(ok bool) string {
	if ok {
		return "passed"
	}
	return "failed"
}

// fitPayload shrinks the outputs when the result would not fit in one NATS
// message, splitting the room left between stdout and stderr. A command's
// outputs are rendered again from what it printed; a pipeline's (its log
// and an interrupted stage's output) are cut in the middle. Rendering can
// make an output longer than its share (each byte that is not UTF-8 may
// become a three-byte U+FFFD), so the share is halved until the result
// fits: a result that does not fit is never published, and its task would
// run again and again.
func (s *Service) fitPayload(env *messagev1.Envelope, o taskOutcome) {
	room := int(s.bus.Conn.MaxPayload()) - payloadSlack
	if proto.Size(env) <= room {
		return
	}
	r := o.msg
	stdout, stderr := r.Stdout, r.Stderr
	outCut, errCut := r.StdoutTruncated, r.StderrTruncated
	r.Stdout, r.Stderr = "", ""
	per := max((room-proto.Size(env))/2-128, 0)
	for {
		if o.tool != nil {
			r.Stdout, r.StdoutTruncated = o.tool.RenderStdout(per)
			r.Stderr, r.StderrTruncated = o.tool.RenderStderr(per)
		} else {
			var cut bool
			r.Stdout, cut = toolexec.ClipMiddle(stdout, per, "")
			r.StdoutTruncated = outCut || cut
			r.Stderr, cut = toolexec.ClipMiddle(stderr, per, "")
			r.StderrTruncated = errCut || cut
		}
		if per == 0 || proto.Size(env) <= room {
			return
		}
		per /= 2
	}
}

// removeWorkspace deletes a workspace, first making directories writable
// when a command removed their write permission.
func removeWorkspace(ws string) {
	if err := os.RemoveAll(ws); err == nil {
		return
	}
	_ = filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(ws)
}

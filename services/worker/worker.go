// Package worker runs DAG nodes: it consumes task dispatches for its roles
// from JetStream, runs each node's command in a fresh temporary workspace
// with a stripped environment, a timeout and an output cap, and reports the
// result to the Orchestrator.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// NoModelOutput is what a prompt-only node reports: no language model acts in
// this worker yet, and the result says so rather than pretend otherwise.
const NoModelOutput = "No language model is configured: the local provider generated nothing for this prompt."

// defaultPath is the command search path when the worker's own is unset.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passEnv are the only variables of the worker's environment that reach a
// command; everything else (credentials above all) stays out.
var passEnv = []string{"PATH", "LANG", "LC_ALL", "TZ"}

// Timings of the consume loop and of result publishing.
const (
	fetchBackoff   = time.Second
	publishTimeout = 30 * time.Second
	publishRetries = 5
	// payloadSlack is room left in a NATS message for the envelope's
	// headers and fields other than the outputs.
	payloadSlack = 8 << 10
)

// Service is the worker.
type Service struct {
	cfg     Config
	log     *slog.Logger
	bus     *natsx.Bus
	metrics metrics
}

type metrics struct {
	tasks    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	running  *prometheus.GaugeVec
}

// New builds the worker; it needs deps.Bus and nothing else.
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
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	return &Service{
		cfg: cfg,
		log: log.With(logx.KeyComponent, "worker"),
		bus: deps.Bus,
		metrics: metrics{
			tasks: f.NewCounterVec(prometheus.CounterOpts{
				Name: "sylk_worker_tasks_total",
				Help: "Tasks run, by role and outcome (succeeded, failed, timed_out).",
			}, []string{"role", "outcome"}),
			duration: f.NewHistogramVec(prometheus.HistogramOpts{
				Name:    "sylk_worker_task_duration_seconds",
				Help:    "Wall time of task commands.",
				Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
			}, []string{"role"}),
			running: f.NewGaugeVec(prometheus.GaugeOpts{
				Name: "sylk_worker_tasks_running",
				Help: "Tasks running now.",
			}, []string{"role"}),
		},
	}, nil
}

// Register does nothing: the worker serves no gRPC API.
func (s *Service) Register(*grpc.Server) {}

// Run provisions the task stream and consumes each role's queue with
// Concurrency loops until ctx is done. It returns nil on a clean stop.
func (s *Service) Run(ctx context.Context) error {
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
	consumers := make([]jetstream.Consumer, len(s.cfg.Roles))
	for i, role := range s.cfg.Roles {
		cons, err := s.bus.EnsureConsumer(ctx, natsx.ConsumerSpec{
			Stream:         s.bus.Stream(topology.StreamTasks),
			Durable:        "worker-" + role,
			FilterSubjects: []string{topology.TaskSubject(s.bus, role)},
			AckWait:        s.cfg.AckWait,
		})
		if err != nil {
			return err
		}
		consumers[i] = cons
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, role := range s.cfg.Roles {
		for range s.cfg.Concurrency {
			g.Go(func() error { return s.loop(gctx, role, consumers[i]) })
		}
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
	ctx = natsx.ContextFrom(ctx, msg.Headers())
	var env messagev1.Envelope
	if err := proto.Unmarshal(msg.Data(), &env); err != nil || env.GetTaskDispatch() == nil {
		s.log.ErrorContext(ctx, "dropping a message that is not a task dispatch", slog.String("subject", msg.Subject()))
		_ = msg.Term()
		return
	}
	task := env.GetTaskDispatch()
	log := s.log.With(logx.KeyTenantID, env.GetTenantId(), logx.KeyRunID, task.GetRunId(), logx.KeyNodeID, task.GetNodeId(), slog.Int("attempt", int(task.GetAttempt())), slog.String("role", role))

	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	go s.heartbeat(hbCtx, msg)
	s.metrics.running.WithLabelValues(role).Inc()
	result, cancelled := s.runTask(ctx, role, task)
	s.metrics.running.WithLabelValues(role).Dec()
	if cancelled {
		stopHeartbeat()
		log.InfoContext(ctx, "task interrupted by shutdown; returned to the queue")
		_ = msg.Nak()
		return
	}
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
		Attempt:       task.GetAttempt(),
		Payload:       &messagev1.Envelope_TaskResult{TaskResult: result.msg},
	}
	if result.msg.GetExitCode() != 0 || result.msg.GetError() != "" {
		out.Type = messagev1.MessageType_MESSAGE_TYPE_TASK_FAILED
	}
	s.fitPayload(out, result)
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
	backoff := 250 * time.Millisecond
	var err error
	for range publishRetries {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		_, err = s.bus.Publish(pctx, topology.ResultSubject(s.bus), msgID, env)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait(ctx, backoff)
		backoff *= 2
	}
	return err
}

// taskOutcome is a TaskResult plus the raw captures it was rendered from.
type taskOutcome struct {
	msg            *messagev1.TaskResult
	stdout, stderr *capture
}

// runTask runs the dispatch's command, or answers a prompt-only node. It
// reports cancelled when ctx ended before the command finished.
func (s *Service) runTask(ctx context.Context, role string, task *messagev1.TaskDispatch) (taskOutcome, bool) {
	res := &messagev1.TaskResult{
		RunId:    task.GetRunId(),
		NodeId:   task.GetNodeId(),
		Attempt:  task.GetAttempt(),
		WorkerId: s.cfg.ID,
	}
	if task.GetCommand() == "" {
		res.Stdout = NoModelOutput
		res.Duration = durationpb.New(0)
		return taskOutcome{msg: res}, false
	}
	limit := s.cfg.MaxOutputBytes
	if l := task.GetOutputLimitBytes(); l > 0 && l < int64(limit) {
		limit = int(l)
	}
	timeout := s.cfg.DefaultTimeout
	if d := task.GetTimeout().AsDuration(); task.GetTimeout() != nil && d > 0 {
		timeout = d
	}
	ws, err := os.MkdirTemp(s.cfg.WorkspaceRoot, "sylk-task-")
	if err == nil {
		err = os.Mkdir(filepath.Join(ws, ".tmp"), 0o700)
	}
	if err != nil {
		s.log.ErrorContext(ctx, "create task workspace", logx.Err(err))
		res.ExitCode = -1
		res.Error = "could not create the task workspace"
		res.Duration = durationpb.New(0)
		if ws != "" {
			removeWorkspace(ws)
		}
		return taskOutcome{msg: res}, false
	}
	defer removeWorkspace(ws)

	r := execute(ctx, execSpec{
		Command:     task.GetCommand(),
		Dir:         ws,
		Env:         taskEnv(ws),
		Timeout:     timeout,
		KillGrace:   s.cfg.KillGrace,
		OutputLimit: limit,
	})
	if r.Cancelled {
		return taskOutcome{}, true
	}
	res.ExitCode = int32(r.ExitCode)
	res.Duration = durationpb.New(r.Duration)
	res.TimedOut = r.TimedOut
	switch {
	case r.StartErr != nil:
		s.log.ErrorContext(ctx, "start task command", logx.Err(r.StartErr))
		res.Error = "could not start the command"
	case r.TimedOut:
		res.Error = fmt.Sprintf("timed out after %s", timeout)
	}
	res.Stdout, res.StdoutTruncated = r.Stdout.render(limit)
	res.Stderr, res.StderrTruncated = r.Stderr.render(limit)
	return taskOutcome{msg: res, stdout: r.Stdout, stderr: r.Stderr}, false
}

// fitPayload shrinks the outputs when the result would not fit in one NATS
// message, splitting the room left between stdout and stderr.
func (s *Service) fitPayload(env *messagev1.Envelope, o taskOutcome) {
	room := int(s.bus.Conn.MaxPayload()) - payloadSlack
	if o.stdout == nil || proto.Size(env) <= room {
		return
	}
	r := o.msg
	r.Stdout, r.Stderr = "", ""
	per := max((room-proto.Size(env))/2-128, 0)
	r.Stdout, r.StdoutTruncated = o.stdout.render(per)
	r.Stderr, r.StderrTruncated = o.stderr.render(per)
}

// taskEnv is the whole environment a command sees.
func taskEnv(ws string) []string {
	env := make([]string, 0, len(passEnv)+2)
	for _, k := range passEnv {
		v, ok := os.LookupEnv(k)
		if k == "PATH" && (!ok || v == "") {
			v, ok = defaultPath, true
		}
		if ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, "HOME="+ws, "TMPDIR="+filepath.Join(ws, ".tmp"))
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

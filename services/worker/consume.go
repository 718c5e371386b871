package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

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
		cons, err := s.bus.EnsureConsumer(ctx, topology.TaskConsumer(s.bus, role, natsx.ConsumerSpec{
			AckWait: s.cfg.AckWait,
			// One more than the worker takes: the last delivery is reported
			// as failed (giveUp), never dropped by the server.
			MaxDeliver: s.cfg.MaxDeliveries + 1,
		}))
		if err != nil {
			return err
		}
		consumers[i] = cons
	}
	for _, sub := range []struct {
		subject, what string
		handle        nats.MsgHandler
	}{
		{topology.TaskCancelSubject(s.bus), "cancel signals", s.onCancel},
		{topology.TaskControlSubject(s.bus), "task controls", s.onControl},
	} {
		ns, err := s.bus.Conn.Subscribe(sub.subject, sub.handle)
		if err != nil {
			return fmt.Errorf("subscribe to %s: %w", sub.what, err)
		}
		defer func() { _ = ns.Unsubscribe() }()
	}
	s.MarkStarted()
	work, stopWork := s.hardStop(ctx)
	defer stopWork()
	g, gctx := errgroup.WithContext(ctx)
	for i, role := range s.cfg.Roles {
		for range s.cfg.Concurrency {
			g.Go(func() error { return s.loop(gctx, work, role, consumers[i]) })
		}
	}
	s.logIsolation(ctx)
	s.log.InfoContext(ctx, "worker started", slog.Any("roles", s.cfg.Roles), slog.Int("concurrency", s.cfg.Concurrency), slog.String("worker_id", s.cfg.ID),
		slog.Duration("ack_wait", s.cfg.AckWait), slog.Duration("heartbeat", s.cfg.Heartbeat), slog.Duration("drain_timeout", s.cfg.DrainTimeout))
	return g.Wait()
}

// logIsolation says how far task commands are kept apart from the worker
// and from each other.
func (s *Service) logIsolation(ctx context.Context) {
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
	if ok, why := s.exec.EndsWithProcess(); ok {
		s.log.InfoContext(ctx, "task commands end with the worker: should it die, nothing they started runs on")
	} else {
		s.log.WarnContext(ctx, "should the worker die, what task commands started in the background runs on until its next start sweeps it",
			logx.Err(why))
	}
	if uid, gid, other := s.exec.TaskUser(); other {
		s.log.InfoContext(ctx, "task commands run as the task user, not as the worker's root", slog.Int("uid", uid), slog.Int("gid", gid))
	}
	if s.cfg.Tools.Network == toolexec.NetworkHost {
		s.log.WarnContext(ctx, "task commands share the worker's network: they reach every port of the host, its stores included (toolexec.network host)")
	} else {
		s.log.InfoContext(ctx, "task commands reach nothing of the host; the network only through the egress proxy's allow-list",
			slog.Any("toolexec.network-allow", s.cfg.Tools.NetworkAllow))
	}
	if s.exec.Confined() {
		s.log.InfoContext(ctx, "task commands confined", slog.Int("landlock_abi", toolexec.LandlockABI()))
	} else {
		s.log.WarnContext(ctx, "task commands are not confined: they can read and write whatever the worker's user can",
			slog.Bool("toolexec.confine", s.cfg.Tools.Confine), slog.Int("landlock_abi", toolexec.LandlockABI()))
	}
}

// loop pulls one task at a time, so that no task waits in a local buffer
// while its ack timer runs, until ctx is done; the tasks run under work,
// which outlives ctx by the drain timeout (hardStop).
func (s *Service) loop(ctx, work context.Context, role string, cons jetstream.Consumer) error {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1, jetstream.FetchContext(ctx))
		if err == nil {
			for msg := range batch.Messages() {
				if ctx.Err() != nil {
					s.handBack(work, role, msg)
					continue
				}
				s.handle(work, role, msg)
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

// runningKey names a running attempt in Service.running and
// Service.controls: "<tenant>|<run>/<node>/<attempt>".
func runningKey(tenant, runID, nodeID string, attempt int32) string {
	return fmt.Sprintf("%s|%s/%s/%d", tenant, runID, nodeID, attempt)
}

// onCancel stops the task a cancel signal names, if it runs here.
func (s *Service) onCancel(m *nats.Msg) {
	var c taskv1.TaskCancel
	if err := proto.Unmarshal(m.Data, &c); err != nil {
		return
	}
	if stop, ok := s.running.Load(runningKey(c.GetTenantId(), c.GetRunId(), c.GetNodeId(), c.GetAttempt())); ok {
		stop.(context.CancelCauseFunc)(errCancelledByOrchestrator)
	}
}

// handle runs one dispatch and reports its result. A task interrupted by
// shutdown is handed back to the queue for another worker.
func (s *Service) handle(ctx context.Context, role string, msg jetstream.Msg) {
	received := timestamppb.Now()
	ctx = natsx.ContextFrom(ctx, msg.Headers())
	var d taskv1.TaskDispatch
	if err := proto.Unmarshal(msg.Data(), &d); err != nil || d.GetRunId() == "" || d.GetNodeId() == "" {
		s.log.ErrorContext(ctx, "dropping a message that is not a task dispatch", slog.String("subject", msg.Subject()))
		_ = msg.Term()
		return
	}
	log := s.log.With(logx.KeyTenantID, d.GetTenantId(), logx.KeyRunID, d.GetRunId(), logx.KeyNodeID, d.GetNodeId(),
		slog.Int("attempt", int(d.GetAttempt())), slog.String("role", role))
	claim, ok := s.claimDispatch(ctx, log, msg, &d) // claim.go
	if !ok {
		return
	}
	if meta, err := msg.Metadata(); err == nil && meta.NumDelivered >= uint64(s.cfg.MaxDeliveries) {
		s.giveUp(ctx, log, role, &d, msg, meta.NumDelivered, claim)
		return
	}
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	go s.heartbeat(hbCtx, msg)
	claim.heartbeat(ctx)
	result, cancelled, byOrchestrator := s.runTracked(ctx, role, &d)
	if fenced, why := claim.wasFenced(); fenced {
		stopHeartbeat()
		claim.end(ctx, false)
		log.WarnContext(ctx, "task stopped, its result not reported: "+why)
		s.metrics.tasks.WithLabelValues(role, "fenced").Inc()
		_ = msg.Term()
		return
	}
	if result.msg != nil {
		result.msg.ClaimToken = claim.token
	}
	switch {
	case cancelled && byOrchestrator:
		stopHeartbeat()
		log.InfoContext(ctx, "task cancelled by the orchestrator")
		s.metrics.tasks.WithLabelValues(role, "cancelled").Inc()
		s.reportCancelled(ctx, log, result, received)
		claim.end(ctx, true)
		_ = msg.Term()
	case result.retry:
		stopHeartbeat()
		claim.end(ctx, false)
		log.InfoContext(ctx, "no subprocess slot free; the task goes back to the queue")
		_ = msg.NakWithDelay(fetchBackoff)
	case cancelled:
		stopHeartbeat()
		claim.end(ctx, false)
		log.InfoContext(ctx, "task interrupted by shutdown (drain timeout); handed back to the queue for another worker")
		_ = msg.Nak()
	default:
		claim.end(ctx, s.report(ctx, log, role, msg, result, received, stopHeartbeat))
	}
}

// runTracked runs a dispatch where the cancel signals and the user's task
// controls reach it, and says whether the Orchestrator cancelled it.
func (s *Service) runTracked(ctx context.Context, role string, d *taskv1.TaskDispatch) (out taskOutcome, cancelled, byOrchestrator bool) {
	taskCtx, cancelTask := context.WithCancelCause(ctx)
	key := runningKey(d.GetTenantId(), d.GetRunId(), d.GetNodeId(), d.GetAttempt())
	s.running.Store(key, cancelTask)
	ctl := newTaskControl(false)
	ctl.engineerReads = s.engineerReads(d.GetNode())
	s.controls.Store(key, ctl)
	s.metrics.running.WithLabelValues(role).Inc()
	out, cancelled = s.runTask(withControl(taskCtx, ctl), role, d)
	s.metrics.running.WithLabelValues(role).Dec()
	s.controls.Delete(key)
	s.running.Delete(key)
	byOrchestrator = errors.Is(context.Cause(taskCtx), errCancelledByOrchestrator)
	cancelTask(nil)
	return out, cancelled, byOrchestrator
}

// report sends a finished task's result and acknowledges its dispatch; a
// result the bus does not take sends the task back to the queue. It says
// whether the result was sent.
func (s *Service) report(ctx context.Context, log *slog.Logger, role string, msg jetstream.Msg, result taskOutcome,
	received *timestamppb.Timestamp, stopHeartbeat func()) bool {
	r := result.msg
	r.ReceivedTime = received
	s.fitPayload(result)
	r.ReportedTime = timestamppb.Now()
	err := s.publishResult(ctx, r)
	stopHeartbeat()
	if err != nil {
		log.ErrorContext(ctx, "report task result; the task will be redelivered", logx.Err(err))
		_ = msg.NakWithDelay(5 * time.Second)
		return false
	}
	if err := msg.Ack(); err != nil {
		log.WarnContext(ctx, "ack task", logx.Err(err))
	}
	outcome := "succeeded"
	switch {
	case r.GetTimedOut():
		outcome = "timed_out"
	case r.GetExitCode() != 0 || r.GetError() != "":
		outcome = "failed"
	}
	s.metrics.tasks.WithLabelValues(role, outcome).Inc()
	s.metrics.duration.WithLabelValues(role).Observe(r.GetDuration().AsDuration().Seconds())
	log.InfoContext(ctx, "task done", slog.String("outcome", outcome), slog.Int("exit_code", int(r.GetExitCode())),
		slog.Duration(logx.KeyDuration, r.GetDuration().AsDuration()))
	return true
}

// giveUp reports a dispatch delivered Config.MaxDeliveries times as failed
// instead of running it again. It came back each time without a result: no
// subprocess slot came free in time, a worker stopped, or one died while it
// ran, perhaps because of it. Were it handed back once more, JetStream
// would drop it and its node would stay dispatched with no word; run
// again without a bound, a task that kills its worker would take the
// workers down one after another.
func (s *Service) giveUp(ctx context.Context, log *slog.Logger, role string, d *taskv1.TaskDispatch, msg jetstream.Msg, n uint64,
	claim *taskClaim) {
	r := s.newResult(d)
	r.ClaimToken = claim.token
	r.ExitCode, r.ReceivedTime = -1, timestamppb.Now()
	r.Error = fmt.Sprintf("the task came back to the queue %d times without a result: no subprocess slot came free in time, "+
		"or a worker stopped or failed while it ran (the task may make its worker fail); it was not run again", n-1)
	r.ReportedTime = timestamppb.Now()
	if err := s.publishResult(ctx, r); err != nil {
		log.ErrorContext(ctx, "report a task given up; it stays in the queue", logx.Err(err))
		claim.end(ctx, false)
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	claim.end(ctx, true)
	_ = msg.Ack()
	s.metrics.tasks.WithLabelValues(role, "given_up").Inc()
	log.WarnContext(ctx, "task given up after its deliveries", slog.Uint64("deliveries", n))
}

// heartbeat tells JetStream the task is still being worked on.
func (s *Service) heartbeat(ctx context.Context, msg jetstream.Msg) {
	t := time.NewTicker(s.cfg.Heartbeat)
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

package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
)

// Graceful stop. The context Run is given ends the intake: once it is done
// (SIGTERM), the worker fetches no new task. The tasks run under a context
// of their own (hardStop), which lives on for -worker.drain-timeout: the
// running tasks keep their heartbeats, finish and report their results
// meanwhile. When the drain timeout ends first, that context is cancelled:
// the tasks still running are stopped and handed back to the queue at once
// (handle), where another worker takes them without waiting for an ack
// timeout. A pipeline (spec F-23) does not wait for its end: at the
// Engineer's next turn it hands its state and its files to a fresh pipeline
// (reason worker_shutdown), which the Orchestrator dispatches to another
// worker, so that its work carries on rather than starts again. Run
// returns once every task has been reported or handed back.

// errDrainTimeout is why the tasks still running when the drain timeout
// ended were stopped.
var errDrainTimeout = errors.New("the worker stopped and its drain timeout ended")

// hardStop returns the context tasks run under: it ends DrainTimeout after
// ctx does, or when stop is called.
func (s *Service) hardStop(ctx context.Context) (work context.Context, stop func()) {
	work, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-work.Done():
			return
		}
		s.stopping.Store(true)
		s.log.Info("stopping: no new task is taken; the running ones get the drain timeout to finish, and pipelines hand their state to a fresh pipeline at the Engineer's next turn",
			slog.Any("running", s.runningTasks()), slog.Duration("drain_timeout", s.cfg.DrainTimeout))
		t := time.NewTimer(s.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			if running := s.runningTasks(); len(running) > 0 {
				s.log.Warn("drain timeout ended: stopping the running tasks and handing them back to the queue",
					slog.Any("running", running))
			}
			cancel(errDrainTimeout)
		case <-work.Done():
		}
	}()
	return work, func() { cancel(nil) }
}

// runningTasks lists the attempts running now (runningKey).
func (s *Service) runningTasks() []string {
	out := []string{}
	s.running.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	return out
}

// handBack returns a task delivered while the worker was stopping to the
// queue at once, unrun.
func (s *Service) handBack(ctx context.Context, role string, msg jetstream.Msg) {
	log := s.log.With(slog.String("role", role))
	var d taskv1.TaskDispatch
	if proto.Unmarshal(msg.Data(), &d) == nil {
		log = log.With(logx.KeyTenantID, d.GetTenantId(), logx.KeyRunID, d.GetRunId(), logx.KeyNodeID, d.GetNodeId(),
			slog.Int("attempt", int(d.GetAttempt())))
	}
	if err := msg.Nak(); err != nil {
		log.WarnContext(ctx, "hand a task back to the queue; it is redelivered after the ack wait", logx.Err(err))
		return
	}
	log.InfoContext(ctx, "stopping: a task delivered meanwhile was handed back to the queue unrun")
}

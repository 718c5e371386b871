package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// effects are what a committed scheduling decision still has to tell the
// outside world, in order: task dispatches and session events. They are
// carried out after the commit, so nothing is announced that did not happen.
type effects struct {
	tenant, runID, session string
	// user created the run: the Archivalist's records of it are theirs.
	user  string
	steps []step
	// completed is the run's terminal state when this decision ended it.
	completed string
	durations []time.Duration
	// wakeAt is when a node waiting for its retry becomes ready.
	wakeAt *time.Time
	// cancels are running attempts the workers must stop.
	cancels []cancelTask
	// merge is set when a repository run succeeded: its patches are merged.
	merge *mergeJob
	// archive are records for the Archivalist (pipeline handoffs; the
	// workflow checkpoint and failure records are added when it is carried
	// out).
	archive []*messagev1.Envelope
	// completedID is the completion's event id when completed is set.
	completedID string
	// release are global dispatch slots to give back; waiting is set when
	// the run had ready nodes but no slot (with their top priority).
	release   []string
	satisfied bool
	waiting   bool
	waitPrio  int32
	created   time.Time
}

type mergeJob struct{ repo, base string }

type cancelTask struct {
	node    string
	attempt int32
}

// step is a dispatch (with the event announcing it) or a lone event.
type step struct {
	dispatch *dispatchMsg
	// event, published under eventID, is checked and stamped when the
	// decision is taken (topology.PrepareEvent).
	event   *eventv1.Event
	eventID string
}

type dispatchMsg struct {
	subject string
	msgID   string
	task    *taskv1.TaskDispatch
	node    string
	attempt int32
	// republish marks a recovery re-send of a dispatch already announced.
	republish bool
}

// event adds a session event (published under id) to the decision's
// effects; a run without a session has none.
func (e *effects) event(id string, ev *eventv1.Event) {
	if e.session == "" {
		return
	}
	ev.SessionId = e.session
	// A malformed event is reported when it is published.
	_ = topology.PrepareEvent(ev)
	e.steps = append(e.steps, step{event: ev, eventID: id})
}

func runName(id string) string { return "runs/" + id }

// withRun runs fn in a transaction holding the run's lock, then carries out
// the effects fn collected. With skipLocked it returns (false, nil) at once
// when another transaction holds the run.
func (s *Service) withRun(ctx context.Context, tenant, runID string, skipLocked bool, fn func(tx pgx.Tx, run *runRow, eff *effects) error) (bool, error) {
	// A stop waits for the decision to be carried out (lifecycle.go).
	s.inflight.enter()
	defer s.inflight.leave()
	var eff *effects
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		lock := lockRun
		if skipLocked {
			lock = tryLockRun
		}
		run, err := lock(ctx, tx, tenant, runID)
		if err != nil {
			return err
		}
		eff = &effects{tenant: tenant, runID: runID, session: run.SessionID, user: run.UserID}
		return fn(tx, run, eff)
	})
	if errors.Is(err, errNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.carryOut(ctx, eff)
	return true, nil
}

// carryOut publishes a committed decision's dispatches and events. A
// dispatch that cannot be published is undone (the node goes back to
// PENDING), so that the next resync dispatches it again; events are best
// effort.
func (s *Service) carryOut(ctx context.Context, eff *effects) {
	if eff == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
	defer cancel()
	log := s.log.With(logx.KeyTenantID, eff.tenant, logx.KeyRunID, eff.runID)
	s.publishSteps(ctx, log, eff)
	if eff.completed != "" {
		if rec, err := workflowCheckpoint(ctx, s.db, eff.tenant, eff.session, eff.user, eff.runID, eff.completed, eff.completedID); err != nil {
			log.WarnContext(ctx, "build the workflow checkpoint", logx.Err(err))
		} else {
			eff.archive = append(eff.archive, rec)
		}
	}
	if eff.completed != "" {
		// failurememory.go (spec E-09, G-25): the failed attempts, also
		// those a later attempt recovered from.
		if recs, err := failureRecords(ctx, s.db, eff.tenant, eff.session, eff.user, eff.runID); err != nil {
			log.WarnContext(ctx, "build the failure records", logx.Err(err))
		} else {
			eff.archive = append(eff.archive, recs...)
		}
	}
	s.archive(ctx, log, eff.archive)
	for _, c := range eff.cancels {
		s.signalCancel(ctx, log, eff.tenant, eff.runID, c)
		eff.release = append(eff.release, slotMember(eff.tenant, eff.runID, c.node, c.attempt))
	}
	s.settleSlots(ctx, log, eff)
	if eff.wakeAt != nil {
		s.wakeAt(eff.tenant, eff.runID, *eff.wakeAt)
	}
	for _, d := range eff.durations {
		s.metrics.nodeDuration.Observe(d.Seconds())
	}
	if eff.merge != nil {
		s.mergeRun(ctx, log, eff.tenant, eff.runID, eff.merge.repo, eff.merge.base)
		s.startSessionCheck(ctx, log, eff.tenant, eff.runID) // sessioncheck.go (spec F-06)
	}
	if eff.completed != "" {
		s.kickDelivery() // delivery.go
		s.metrics.runs.WithLabelValues(eff.completed).Inc()
		log.InfoContext(ctx, "run completed", slog.String("state", eff.completed))
	}
}

// publishSteps publishes a decision's dispatches and events in order. The
// dispatches go out without waiting for each ack (the task queues keep the
// priority and spawn order of the nodes); the acks are awaited together.
func (s *Service) publishSteps(ctx context.Context, log *slog.Logger, eff *effects) {
	acks := make([]jetstream.PubAckFuture, len(eff.steps))
	sendErrs := make([]error, len(eff.steps))
	for i, st := range eff.steps {
		if st.dispatch != nil {
			acks[i], sendErrs[i] = s.bus.PublishAsync(ctx, st.dispatch.subject, st.dispatch.msgID, st.dispatch.task)
		}
	}
	for i, st := range eff.steps {
		if st.event != nil {
			s.publishEvent(ctx, log, eff.tenant, eff.session, st.eventID, st.event)
			continue
		}
		m := st.dispatch
		err := sendErrs[i]
		if err == nil {
			_, err = natsx.AwaitAck(ctx, acks[i])
		}
		switch {
		case err != nil && m.republish:
			log.ErrorContext(ctx, "re-publish task", logx.KeyNodeID, m.node, logx.Err(err))
		case err != nil:
			log.WarnContext(ctx, "publish task; the node goes back to pending", logx.KeyNodeID, m.node, logx.Err(err))
			eff.release = append(eff.release, slotMember(eff.tenant, eff.runID, m.node, m.attempt))
			if err := undoDispatch(ctx, s.db, eff.tenant, eff.runID, m.node, m.attempt); err != nil {
				log.ErrorContext(ctx, "undo dispatch", logx.KeyNodeID, m.node, logx.Err(err))
			}
		case !m.republish:
			s.metrics.dispatched.Inc()
			role := m.task.GetRole()
			s.publishEvent(ctx, log, eff.tenant, eff.session, m.msgID+":dispatched", nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_DISPATCHED, eff.runID,
				fmt.Sprintf("node %s dispatched to %s (attempt %d)", m.node, role, m.attempt),
				&eventv1.NodeEvent{Node: m.node, Attempt: m.attempt, Role: role, State: orchestratorv1.NodeState_NODE_STATE_DISPATCHED}))
		}
	}
}

// carryOutOrdered carries out a decision's effects in the background, after
// those of the previous call, so that the next batch of results is applied
// while these dispatches are published; at most one such call is pending.
// Should this replica stop before they are published, the nodes are
// DISPATCHED in the database and the run's recovery re-sends them.
func (s *Service) carryOutOrdered(ctx context.Context, eff *effects) {
	s.carryMu.Lock()
	prev := s.carryDone
	done := make(chan struct{})
	s.carryDone = done
	s.carryMu.Unlock()
	if prev != nil {
		<-prev
	}
	s.inflight.enter() // a stop waits for these effects (lifecycle.go)
	go func() {
		defer close(done)
		defer s.inflight.leave()
		s.carryOut(ctx, eff)
	}()
}

// waitCarriedOut waits for the effects carryOutOrdered started.
func (s *Service) waitCarriedOut() {
	s.carryMu.Lock()
	prev := s.carryDone
	s.carryMu.Unlock()
	if prev != nil {
		<-prev
	}
}

// completedEventID is the id of a run's completion event: a reopened run
// completes again under a new id, which the event stream does not drop as a
// duplicate.
func completedEventID(ctx context.Context, q querier, run *runRow) string {
	var n int32
	if err := q.QueryRow(ctx, `SELECT reopened FROM runs WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID).Scan(&n); err != nil || n == 0 {
		return run.ID + ":completed"
	}
	return fmt.Sprintf("%s:completed:%d", run.ID, n)
}

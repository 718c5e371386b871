package guide

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/logx"
)

// The reaper enforces the session limits in the background: it suspends
// sessions idle for longer than their auto_suspend_after, fails sessions
// older than their session_timeout, and expires routed requests that got
// no answer within the request timeout (an error event and a dead letter).
// Every pass claims its rows with FOR UPDATE SKIP LOCKED, so several Guide
// replicas share the work without taking the same row twice.

// reap runs a pass every ReaperInterval until ctx is done.
func (s *Service) reap(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ReaperInterval)
	defer t.Stop()
	for {
		if _, err := s.reapOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "reaper pass", logx.Err(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reapStats counts what a pass did.
type reapStats struct {
	suspended, failed, expired, pruned int
}

// reapOnce runs one pass.
func (s *Service) reapOnce(ctx context.Context) (reapStats, error) {
	var st reapStats
	var err error
	if st.failed, err = s.reapSessions(ctx, failTransition, `state IN ('created', 'active', 'suspended') AND create_time <
		$1::timestamptz - make_interval(secs => (CASE WHEN session_timeout_ms > 0 THEN session_timeout_ms ELSE $3 END) / 1000.0)`,
		s.cfg.SessionTimeout, "timeout"); err != nil {
		return st, err
	}
	if st.suspended, err = s.reapSessions(ctx, suspendTransition, `state = 'active' AND last_active_time <
		$1::timestamptz - make_interval(secs => (CASE WHEN auto_suspend_after_ms > 0 THEN auto_suspend_after_ms ELSE $3 END) / 1000.0)`,
		s.cfg.SessionAutoSuspendAfter, "idle"); err != nil {
		return st, err
	}
	if st.expired, err = s.expireRequests(ctx); err != nil {
		return st, err
	}
	if st.pruned, err = s.pruneOutbox(ctx); err != nil {
		return st, err
	}
	return st, nil
}

// pruneBatch bounds the outbox rows one pass deletes.
const pruneBatch = 1000

// pruneOutbox deletes the outbox rows the relay will never publish: older
// than its window and than the request timeout, by which time the request
// they stand for has timed out and waits as a dead letter. A bus down for
// longer than the window (see outbox.go) would otherwise leave its rows for
// good.
func (s *Service) pruneOutbox(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-outboxWindow - s.cfg.RequestTimeout)
	tag, err := s.db.Exec(ctx, `DELETE FROM outbox WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM outbox WHERE create_time < $1 LIMIT $2 FOR UPDATE SKIP LOCKED))`, cutoff, pruneBatch)
	if err != nil {
		return 0, fmt.Errorf("prune the outbox: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// reapSessions applies t to the sessions matching where, one transaction
// per batch.
func (s *Service) reapSessions(ctx context.Context, t transition, where string, def time.Duration, cause string) (int, error) {
	var done []session
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE `+where+`
			ORDER BY last_active_time LIMIT $2 FOR UPDATE SKIP LOCKED`, s.now(), s.cfg.ReaperBatch, def.Milliseconds())
		if err != nil {
			return fmt.Errorf("select sessions to %s: %w", t.verb, err)
		}
		due, err := pgx.CollectRows(rows, scanWith(scanSession))
		if err != nil {
			return err
		}
		for _, x := range due {
			var dags dagState
			if t.to == stateSuspended {
				dags = s.dagState(ctx, owner{tenant: x.TenantID, user: x.UserID}, x.ID)
			}
			note := ""
			if t.to == stateFailed {
				timeout := x.Config.SessionTimeout
				if timeout == 0 {
					timeout = s.cfg.SessionTimeout
				}
				note = fmt.Sprintf("session timed out after %s", timeout)
			}
			next, err := s.applyLocked(ctx, tx, x, t, note, cause, dags)
			if err != nil {
				return err
			}
			done = append(done, next)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, x := range done {
		s.afterTransition(ctx, x, t, x.FailureReason)
	}
	return len(done), nil
}

// expireRequests ends routed requests past their deadline: each becomes a
// dead letter and an error event on its session's stream.
func (s *Service) expireRequests(ctx context.Context) (int, error) {
	var expired []pendingRequest
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+pendingColumns+` FROM pending_requests
			WHERE state = $1 AND deadline < $2 ORDER BY deadline LIMIT $3 FOR UPDATE SKIP LOCKED`, statePending, s.now(), s.cfg.ReaperBatch)
		if err != nil {
			return fmt.Errorf("select expired requests: %w", err)
		}
		if expired, err = pgx.CollectRows(rows, scanWith(scanPending)); err != nil {
			return err
		}
		for _, p := range expired {
			if _, err := setPendingState(ctx, tx, p.TenantID, p.CorrelationID, statePending, stateTimedOut); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, p := range expired {
		// Every deadline is set the request timeout ahead (on routing, a
		// reroute or a replay) and moved on by the time a session spent
		// suspended, so that is how long the request waited; its creation
		// may be much older.
		waited := s.cfg.RequestTimeout.Round(time.Second)
		env := decodeEnvelope(p.Envelope)
		if env != nil {
			// The dead letter belongs to the request's tenant, whatever the
			// stored envelope says.
			env.TenantId, env.SessionId = p.TenantID, p.SessionID
			_ = s.deadLetter(ctx, env, fmt.Sprintf("no answer from the %s within %s", p.Target, waited)) // logged
		}
		s.metrics.timeouts.WithLabelValues(p.Target).Inc()
		ev := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT, p.SessionID, p.CorrelationID,
			fmt.Sprintf("No answer from the %s within %s. The request is kept as a dead letter and can be replayed.", p.Target, waited))
		ev.Payload = &eventv1.Event_MessageUnanswered{MessageUnanswered: &eventv1.MessageUnanswered{
			Target: p.Target, Reason: apierr.ReasonDeadlineExceeded, Waited: durationpb.New(waited)}}
		// A request replayed or rerouted may time out again under its
		// correlation id: each deadline is an event of its own.
		if err := s.publishEvent(ctx, p.TenantID, fmt.Sprintf("%s.timeout.%d", p.CorrelationID, p.Deadline.UnixNano()), ev); err != nil {
			s.log.WarnContext(ctx, "publish timeout event", slog.String(logx.KeyCorrelationID, p.CorrelationID), logx.Err(err))
		}
	}
	return len(expired), nil
}

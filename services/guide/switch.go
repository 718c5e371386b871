package guide

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// SwitchSession suspends the caller's other active sessions, each with a
// snapshot, and activates the named one (resuming or activating it), in
// one transaction.
func (s *Service) SwitchSession(ctx context.Context, req *guidev1.SwitchSessionRequest) (*guidev1.SwitchSessionResponse, error) {
	who, id, err := callerSession(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	target, suspended, err := s.switchTo(ctx, ownerOf(who), id, nil)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "switch session", err)
	}
	resp := &guidev1.SwitchSessionResponse{Session: target.proto()}
	for _, x := range suspended {
		resp.Suspended = append(resp.Suspended, x.proto())
	}
	return resp, nil
}

// switchTo runs a switch in its own transaction (tx nil) or in tx, and
// publishes the events after commit (tx nil) or through after.
func (s *Service) switchTo(ctx context.Context, o owner, id string, tx pgx.Tx) (session, []session, error) {
	sw, err := s.prepareSwitch(ctx, o, id)
	if err != nil {
		return session{}, nil, err
	}
	if tx != nil {
		err = sw.run(ctx, tx)
	} else {
		err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return sw.run(ctx, tx) })
	}
	if err != nil {
		return session{}, nil, err
	}
	if tx == nil {
		s.afterSwitch(ctx, sw.target, sw.targetT, sw.suspended)
	}
	return sw.target, sw.suspended, nil
}

// sessionSwitch is a switch to session id of o: the sessions it suspends
// and the transition that activates the target (nil when it is active).
type sessionSwitch struct {
	s         *Service
	o         owner
	id        string
	dags      map[string]dagState // of the sessions to suspend, by id
	target    session
	targetT   *transition
	suspended []session
}

// prepareSwitch asks the orchestrator for the runs of the sessions the
// switch will suspend, before anything is locked.
func (s *Service) prepareSwitch(ctx context.Context, o owner, id string) (*sessionSwitch, error) {
	active, err := listSessions(ctx, s.db, o, stateActive, nil, maxSessionPageSize)
	if err != nil {
		return nil, err
	}
	sw := &sessionSwitch{s: s, o: o, id: id, dags: map[string]dagState{}}
	for _, a := range active {
		if a.ID != id {
			sw.dags[a.ID] = s.dagState(ctx, o, a.ID)
		}
	}
	return sw, nil
}

// run suspends the user's other active sessions, each with its snapshot,
// and activates the target, in tx.
func (sw *sessionSwitch) run(ctx context.Context, tx pgx.Tx) error {
	locked, err := lockForSwitch(ctx, tx, sw.o, sw.id)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(locked, func(x session) bool { return x.ID == sw.id })
	if i < 0 {
		return sessionNotFound(sw.id)
	}
	sw.target = locked[i]
	if sw.targetT, err = switchTransition(sw.target); err != nil {
		return err
	}
	for _, x := range locked {
		if x.ID == sw.id || x.State != stateActive {
			continue
		}
		d, ok := sw.dags[x.ID]
		if !ok {
			d = dagState{err: "session became active during the switch; DAG state not captured"}
		}
		sx, err := sw.s.applyLocked(ctx, tx, x, suspendTransition, "", "switch", d)
		if err != nil {
			return err
		}
		sw.suspended = append(sw.suspended, sx)
	}
	if sw.targetT != nil {
		sw.target, err = sw.s.applyLocked(ctx, tx, sw.target, *sw.targetT, "", "switch", dagState{})
	}
	return err
}

// lockForSwitch takes the user's switch lock, then locks the user's active
// sessions and session id, in id order.
func lockForSwitch(ctx context.Context, tx pgx.Tx, o owner, id string) ([]session, error) {
	// One switch per user at a time: a concurrent switch could activate a
	// session this one's snapshot does not see.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, "guide.switch/"+o.tenant+"/"+o.user); err != nil {
		return nil, fmt.Errorf("lock the user's sessions: %w", err)
	}
	// Every row involved is locked in id order, so that concurrent switches
	// of one user cannot deadlock.
	rows, err := tx.Query(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE tenant_id = $1 AND user_id = $2 AND (state = 'active' OR id = $3) ORDER BY id FOR UPDATE`, o.tenant, o.user, id)
	if err != nil {
		return nil, fmt.Errorf("lock sessions: %w", err)
	}
	locked, err := pgx.CollectRows(rows, scanWith(scanSession))
	if err != nil {
		return nil, fmt.Errorf("lock sessions: %w", err)
	}
	return locked, nil
}

// switchTransition is the transition that makes target active: nil when
// it is, an error when it cannot be.
func switchTransition(target session) (*transition, error) {
	var t transition
	switch target.State {
	case stateActive:
		return nil, nil
	case stateSuspended:
		t = resumeTransition
	case stateCreated:
		t = activateTransition
	default:
		return nil, stateError(reasonTransitionNotAllowed, target.State, "switch to it", stateCreated, stateActive, stateSuspended)
	}
	return &t, nil
}

func (s *Service) afterSwitch(ctx context.Context, target session, targetT *transition, suspended []session) {
	for _, x := range suspended {
		s.afterTransition(ctx, x, suspendTransition, "")
	}
	if targetT != nil {
		s.afterTransition(ctx, target, *targetT, "")
	}
}

// GetActiveSession returns the caller's most recently activated active session.
func (s *Service) GetActiveSession(ctx context.Context, _ *guidev1.GetActiveSessionRequest) (*guidev1.GetActiveSessionResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sess, err := activeSession(ctx, s.db, ownerOf(who))
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get active session", err)
	}
	return &guidev1.GetActiveSessionResponse{Session: sess.proto()}, nil
}

func activeSession(ctx context.Context, q querier, o owner) (session, error) {
	sess, err := scanSession(q.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions
		WHERE tenant_id = $1 AND user_id = $2 AND state = 'active'
		ORDER BY activate_time DESC NULLS LAST, id DESC LIMIT 1`, o.tenant, o.user))
	if errors.Is(err, pgx.ErrNoRows) {
		return session{}, apierr.NotFound("active session", "of the caller")
	}
	if err != nil {
		return session{}, fmt.Errorf("load active session: %w", err)
	}
	return sess, nil
}

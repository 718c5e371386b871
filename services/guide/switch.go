package guide

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// SwitchSession suspends the caller's other active sessions, each with a
// snapshot, and activates the named one (resuming or activating it), in
// one transaction.
func (s *Service) SwitchSession(ctx context.Context, req *guidev1.SwitchSessionRequest) (*guidev1.SwitchSessionResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseSessionName("name", req.GetName())
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
	// The orchestrator is asked before locking anything.
	active, err := listSessions(ctx, s.db, o, stateActive, nil, maxSessionPageSize)
	if err != nil {
		return session{}, nil, err
	}
	dags := map[string]dagState{}
	for _, a := range active {
		if a.ID != id {
			dags[a.ID] = s.dagState(ctx, o, a.ID)
		}
	}
	var target session
	var suspended []session
	var targetT *transition
	run := func(tx pgx.Tx) error {
		// One switch per user at a time: a concurrent switch could activate
		// a session this one's snapshot does not see.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, "guide.switch/"+o.tenant+"/"+o.user); err != nil {
			return fmt.Errorf("lock the user's sessions: %w", err)
		}
		// Lock every row involved in id order, so concurrent switches of one
		// user cannot deadlock.
		rows, err := tx.Query(ctx, `SELECT `+sessionColumns+` FROM sessions
			WHERE tenant_id = $1 AND user_id = $2 AND (state = 'active' OR id = $3) ORDER BY id FOR UPDATE`, o.tenant, o.user, id)
		if err != nil {
			return fmt.Errorf("lock sessions: %w", err)
		}
		var locked []session
		for rows.Next() {
			x, err := scanSession(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("lock sessions: %w", err)
			}
			locked = append(locked, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock sessions: %w", err)
		}
		found := false
		for _, x := range locked {
			if x.ID == id {
				target, found = x, true
			}
		}
		if !found {
			return sessionNotFound(id)
		}
		switch target.State {
		case stateSuspended:
			t := resumeTransition
			targetT = &t
		case stateCreated:
			t := activateTransition
			targetT = &t
		case stateActive:
		default:
			return stateError(reasonTransitionNotAllowed, target.State, "switch to it", stateCreated, stateActive, stateSuspended)
		}
		for _, x := range locked {
			if x.ID == id || x.State != stateActive {
				continue
			}
			d, ok := dags[x.ID]
			if !ok {
				d = dagState{err: "session became active during the switch; DAG state not captured"}
			}
			sx, err := s.applyLocked(ctx, tx, x, suspendTransition, "", "switch", d)
			if err != nil {
				return err
			}
			suspended = append(suspended, sx)
		}
		if targetT != nil {
			if target, err = s.applyLocked(ctx, tx, target, *targetT, "", "switch", dagState{}); err != nil {
				return err
			}
		}
		return nil
	}
	if tx != nil {
		if err := run(tx); err != nil {
			return session{}, nil, err
		}
	} else if err := pgx.BeginFunc(ctx, s.db, run); err != nil {
		return session{}, nil, err
	}
	if tx == nil {
		s.afterSwitch(ctx, target, targetT, suspended)
	}
	return target, suspended, nil
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

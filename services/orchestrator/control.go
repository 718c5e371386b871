package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Control actions on runs and nodes.
type action int

const (
	actCancel action = iota
	actPause
	actResume
)

func (a action) String() string {
	return [...]string{"cancel", "pause", "resume"}[a]
}

// control applies an action to a run, or to one node of it, under the
// run's lock.
func (s *Service) control(ctx context.Context, tenant, runID, nodeID string, act action) (bool, error) {
	return s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		if terminalRun(run.State) {
			return errRunEnded.Withf("run %s already ended: %s", runName(run.ID), run.State)
		}
		if nodeID != "" {
			return s.controlNode(ctx, tx, run, nodeID, act, eff)
		}
		switch act {
		case actCancel:
			if err := cancelRun(ctx, tx, run, eff); err != nil {
				return err
			}
			return s.recordCancelled(ctx, tx, run) // audit.go
		case actPause:
			if run.State == statePaused {
				return errRunPaused.Withf("run %s is already paused", runName(run.ID))
			}
			if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'PAUSED' WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID); err != nil {
				return err
			}
			eff.event(fmt.Sprintf("%s:paused:%s", run.ID, ids.New()), runEvent(eventv1.EventType_EVENT_TYPE_RUN_PAUSED, run.ID,
				"run "+runName(run.ID)+" paused", &eventv1.RunEvent{State: orchestratorv1.RunState_RUN_STATE_PAUSED}))
			return nil
		default:
			if run.State != statePaused {
				return errRunNotPaused.Withf("run %s is not paused", runName(run.ID))
			}
			if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'RUNNING', start_time = coalesce(start_time, now())
				WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID); err != nil {
				return err
			}
			run.State = stateRunning
			eff.event(fmt.Sprintf("%s:resumed:%s", run.ID, ids.New()), runEvent(eventv1.EventType_EVENT_TYPE_RUN_RESUMED, run.ID,
				"run "+runName(run.ID)+" resumed", &eventv1.RunEvent{State: orchestratorv1.RunState_RUN_STATE_RUNNING}))
			return s.advance(ctx, tx, run, eff)
		}
	})
}

// cancelRun cancels a run and its pending and running nodes; the workers
// running its nodes are told to stop them.
func cancelRun(ctx context.Context, tx pgx.Tx, run *runRow, eff *effects) error {
	rows, err := tx.Query(ctx, `WITH old AS (
			SELECT node_id, state FROM nodes
			WHERE tenant_id = $1 AND run_id = $2 AND state IN ('PENDING', 'DISPATCHED'))
		UPDATE nodes n SET state = 'CANCELLED', end_time = now() FROM old
		WHERE n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = old.node_id
		RETURNING n.node_id, n.attempt, old.state = 'DISPATCHED'`, run.TenantID, run.ID)
	if err != nil {
		return err
	}
	var node string
	var attempt int32
	var running bool
	if _, err := pgx.ForEachRow(rows, []any{&node, &attempt, &running}, func() error {
		if running {
			eff.cancels = append(eff.cancels, cancelTask{node: node, attempt: attempt})
		}
		return nil
	}); err != nil {
		return err
	}
	if err := finishRun(ctx, tx, run.TenantID, run.ID, stateCancelled); err != nil {
		return err
	}
	eff.completed, eff.completedID = stateCancelled, run.ID+":completed"
	eff.event(eff.completedID, runEvent(eventv1.EventType_EVENT_TYPE_RUN_COMPLETED, run.ID, "run "+runName(run.ID)+" cancelled",
		&eventv1.RunEvent{State: orchestratorv1.RunState_RUN_STATE_CANCELLED}))
	return nil
}

func (s *Service) controlNode(ctx context.Context, tx pgx.Tx, run *runRow, nodeID string, act action, eff *effects) error {
	var st string
	var attempt int32
	var paused bool
	err := tx.QueryRow(ctx, `SELECT state, attempt, paused FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
		run.TenantID, run.ID, nodeID).Scan(&st, &attempt, &paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return nodeNotFound(runName(run.ID), nodeID)
	}
	if err != nil {
		return err
	}
	if st != statePending && st != stateDispatched {
		return errNodeEnded.Withf("node %s already ended: %s", nodeID, st)
	}
	switch act {
	case actCancel:
		if _, err := tx.Exec(ctx, `UPDATE nodes SET state = 'CANCELLED', end_time = now()
			WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, run.TenantID, run.ID, nodeID); err != nil {
			return err
		}
		if st == stateDispatched {
			eff.cancels = append(eff.cancels, cancelTask{node: nodeID, attempt: attempt})
		}
		eff.event(fmt.Sprintf("%s:%s:%d:cancelled", run.ID, nodeID, attempt), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED, run.ID,
			"node "+nodeID+" cancelled", &eventv1.NodeEvent{Node: nodeID, Attempt: attempt, State: orchestratorv1.NodeState_NODE_STATE_CANCELLED}))
	case actPause, actResume:
		if act == actPause && paused {
			return errNodePaused.Withf("node %s is already paused", nodeID)
		}
		if act == actResume && !paused {
			return errNodeNotPaused.Withf("node %s is already resumed", nodeID)
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET paused = $4 WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
			run.TenantID, run.ID, nodeID, act == actPause); err != nil {
			return err
		}
	}
	return s.advance(ctx, tx, run, eff)
}

// controlRPC is the shared body of CancelRun, PauseRun and ResumeRun.
func (s *Service) controlRPC(ctx context.Context, name, nodeID string, act action) (_ *orchestratorv1.Run, err error) {
	defer func() { err = apierr.Status(ctx, s.log, act.String()+" run", err) }()
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(name)
	if err != nil {
		return nil, err
	}
	if len(nodeID) > 64 {
		return nil, apierr.Invalid("node_id", "at most 64 characters")
	}
	if err := s.checkRun(ctx, who, id); err != nil {
		return nil, err
	}
	found, err := s.control(ctx, who.TenantID, id, nodeID, act)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, runNotFound(name)
	}
	s.log.InfoContext(ctx, "run "+act.String(), logx.KeyTenantID, who.TenantID, logx.KeyRunID, id, logx.KeyUserID, who.UserID,
		slog.String("node", nodeID))
	return s.loadRun(ctx, who.TenantID, "", id)
}

// CancelRun stops a run that has not finished: the run and its pending and
// running nodes become CANCELLED, and the workers running its nodes are told
// to stop them (their results are then ignored). With node_id only that
// node is cancelled, and its dependents are skipped.
func (s *Service) CancelRun(ctx context.Context, req *orchestratorv1.CancelRunRequest) (*orchestratorv1.CancelRunResponse, error) {
	r, err := s.controlRPC(ctx, req.GetName(), req.GetNodeId(), actCancel)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.CancelRunResponse{Run: r}, nil
}

// PauseRun stops dispatching a run's nodes, or one node's.
func (s *Service) PauseRun(ctx context.Context, req *orchestratorv1.PauseRunRequest) (*orchestratorv1.PauseRunResponse, error) {
	r, err := s.controlRPC(ctx, req.GetName(), req.GetNodeId(), actPause)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.PauseRunResponse{Run: r}, nil
}

// ResumeRun undoes PauseRun.
func (s *Service) ResumeRun(ctx context.Context, req *orchestratorv1.ResumeRunRequest) (*orchestratorv1.ResumeRunResponse, error) {
	r, err := s.controlRPC(ctx, req.GetName(), req.GetNodeId(), actResume)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.ResumeRunResponse{Run: r}, nil
}

// sessionControl applies act to every unfinished run of a session and
// returns the names of the runs it changed.
func (s *Service) sessionControl(ctx context.Context, session string, act action) (_ []string, err error) {
	defer func() { err = apierr.Status(ctx, s.log, act.String()+" session runs", err) }()
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	if session == "" {
		return nil, apierr.Invalid("session", "is required")
	}
	sid, err := parseSessionID("session", session)
	if err != nil {
		return nil, err
	}
	if err := s.ownSession(ctx, who, sid); err != nil {
		return nil, err
	}
	runs, err := sessionRuns(ctx, s.db, who.TenantID, runOwner(who), sid)
	if err != nil {
		return nil, fmt.Errorf("list session runs: %w", err)
	}
	var changed []string
	for _, id := range runs {
		_, err := s.control(ctx, who.TenantID, id, "", act)
		if refused(err) {
			continue
		}
		if err != nil {
			return changed, err
		}
		changed = append(changed, runName(id))
	}
	return changed, nil
}

// ownSession answers NotFound, as reading it does, unless session sid is
// who's own: the Guide says whose it is (an admin's included: sessions
// belong to their users), and, with or without a Guide, a session with a
// run another user created is not who's.
func (s *Service) ownSession(ctx context.Context, who identity.Identity, sid string) error {
	if _, err := s.sessions.Get(ctx, who, sid, "the session"); err != nil {
		return err
	}
	var others bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE tenant_id = $1 AND session_id = $2 AND user_id <> $3)`,
		who.TenantID, sid, who.UserID).Scan(&others)
	if err != nil {
		return fmt.Errorf("check session owner: %w", err)
	}
	if others {
		return apierr.NotFound("session", "sessions/"+sid)
	}
	return nil
}

// PauseSessionRuns pauses every unfinished run of a session.
func (s *Service) PauseSessionRuns(ctx context.Context, req *orchestratorv1.PauseSessionRunsRequest) (*orchestratorv1.PauseSessionRunsResponse, error) {
	runs, err := s.sessionControl(ctx, req.GetSession(), actPause)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.PauseSessionRunsResponse{Runs: runs}, nil
}

// ResumeSessionRuns resumes every paused run of a session.
func (s *Service) ResumeSessionRuns(ctx context.Context, req *orchestratorv1.ResumeSessionRunsRequest) (*orchestratorv1.ResumeSessionRunsResponse, error) {
	runs, err := s.sessionControl(ctx, req.GetSession(), actResume)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.ResumeSessionRunsResponse{Runs: runs}, nil
}

// CancelSessionRuns cancels every unfinished run of a session.
func (s *Service) CancelSessionRuns(ctx context.Context, req *orchestratorv1.CancelSessionRunsRequest) (*orchestratorv1.CancelSessionRunsResponse, error) {
	runs, err := s.sessionControl(ctx, req.GetSession(), actCancel)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.CancelSessionRunsResponse{Runs: runs}, nil
}

// signalCancel tells the workers to stop a running attempt (best effort:
// a worker that misses it finishes the attempt, whose result is ignored).
func (s *Service) signalCancel(ctx context.Context, log *slog.Logger, tenant, runID string, c cancelTask) {
	msg := &taskv1.TaskCancel{TenantId: tenant, RunId: runID, NodeId: c.node, Attempt: c.attempt, Reason: "cancelled by the user"}
	if err := s.bus.PublishCore(ctx, topology.TaskCancelSubject(s.bus), msg); err != nil {
		log.WarnContext(ctx, "publish cancel signal", logx.KeyNodeID, c.node, logx.Err(err))
	}
}

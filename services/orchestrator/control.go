package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
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

// errState is a control action that does not apply to the run's state.
type errState struct{ msg string }

func (e *errState) Error() string { return e.msg }

// control applies an action to a run, or to one node of it, under the
// run's lock.
func (s *Service) control(ctx context.Context, tenant, runID, nodeID string, act action) (bool, error) {
	return s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		if terminalRun(run.State) {
			return &errState{fmt.Sprintf("run %s already ended: %s", runName(run.ID), run.State)}
		}
		if nodeID != "" {
			return s.controlNode(ctx, tx, run, nodeID, act, eff)
		}
		switch act {
		case actCancel:
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
			eff.event(EventRunCompleted, eff.completedID, "run "+runName(run.ID)+" cancelled",
				map[string]any{"run": runName(run.ID), "state": stateCancelled})
			return nil
		case actPause:
			if run.State == statePaused {
				return &errState{fmt.Sprintf("run %s is already paused", runName(run.ID))}
			}
			if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'PAUSED' WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID); err != nil {
				return err
			}
			eff.event(EventRunPaused, fmt.Sprintf("%s:paused:%s", run.ID, ids.New()), "run "+runName(run.ID)+" paused",
				map[string]any{"run": runName(run.ID)})
			return nil
		default:
			if run.State != statePaused {
				return &errState{fmt.Sprintf("run %s is not paused", runName(run.ID))}
			}
			if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'RUNNING', start_time = coalesce(start_time, now())
				WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID); err != nil {
				return err
			}
			run.State = stateRunning
			eff.event(EventRunResumed, fmt.Sprintf("%s:resumed:%s", run.ID, ids.New()), "run "+runName(run.ID)+" resumed",
				map[string]any{"run": runName(run.ID)})
			return s.advance(ctx, tx, run, eff)
		}
	})
}

func (s *Service) controlNode(ctx context.Context, tx pgx.Tx, run *runRow, nodeID string, act action, eff *effects) error {
	var st string
	var attempt int32
	var paused bool
	err := tx.QueryRow(ctx, `SELECT state, attempt, paused FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
		run.TenantID, run.ID, nodeID).Scan(&st, &attempt, &paused)
	if err == pgx.ErrNoRows {
		return &errNodeNotFound{node: nodeID}
	}
	if err != nil {
		return err
	}
	if st != statePending && st != stateDispatched {
		return &errState{fmt.Sprintf("node %s already ended: %s", nodeID, st)}
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
		eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:%d:cancelled", run.ID, nodeID, attempt), "node "+nodeID+" cancelled",
			map[string]any{"run": runName(run.ID), "node": nodeID, "state": stateCancelled, "exit_code": 0})
	case actPause, actResume:
		if (act == actPause) == paused {
			return &errState{fmt.Sprintf("node %s is already %sd", nodeID, act)}
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET paused = $4 WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
			run.TenantID, run.ID, nodeID, act == actPause); err != nil {
			return err
		}
	}
	return s.advance(ctx, tx, run, eff)
}

type errNodeNotFound struct{ node string }

func (e *errNodeNotFound) Error() string { return "node " + e.node + " not found" }

// controlRPC is the shared body of CancelRun, PauseRun and ResumeRun.
func (s *Service) controlRPC(ctx context.Context, name, nodeID string, act action) (*orchestratorv1.Run, error) {
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(name)
	if err != nil {
		return nil, err
	}
	if len(nodeID) > 64 {
		return nil, status.Error(codes.InvalidArgument, "node_id: at most 64 characters")
	}
	if err := s.checkRun(ctx, who, id); err != nil {
		return nil, err
	}
	found, err := s.control(ctx, who.TenantID, id, nodeID, act)
	if err != nil {
		if e, ok := err.(*errState); ok {
			return nil, status.Error(codes.FailedPrecondition, e.msg)
		}
		if e, ok := err.(*errNodeNotFound); ok {
			return nil, status.Errorf(codes.NotFound, "run %s has no node %q", name, e.node)
		}
		return nil, s.internal(ctx, act.String()+" run", err)
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "run %s not found", name)
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
func (s *Service) sessionControl(ctx context.Context, session string, act action) ([]string, error) {
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	if session == "" {
		return nil, status.Error(codes.InvalidArgument, "session: is required")
	}
	sid, err := parseSessionID("session", session)
	if err != nil {
		return nil, err
	}
	runs, err := sessionRuns(ctx, s.db, who.TenantID, runOwner(who), sid)
	if err != nil {
		return nil, s.internal(ctx, "list session runs", err)
	}
	var changed []string
	for _, id := range runs {
		_, err := s.control(ctx, who.TenantID, id, "", act)
		if _, skip := err.(*errState); skip {
			continue
		}
		if err != nil {
			return changed, s.internal(ctx, act.String()+" session runs", err)
		}
		changed = append(changed, runName(id))
	}
	return changed, nil
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

// CancelTarget is a cancel signal's target_id for one attempt.
func CancelTarget(runID, nodeID string, attempt int32) string {
	return fmt.Sprintf("%s/%s/%d", runID, nodeID, attempt)
}

// ParseCancelTarget splits a CancelTarget.
func ParseCancelTarget(t string) (runID, nodeID string, attempt int32, ok bool) {
	parts := strings.Split(t, "/")
	if len(parts) != 3 {
		return "", "", 0, false
	}
	var a int32
	if _, err := fmt.Sscanf(parts[2], "%d", &a); err != nil {
		return "", "", 0, false
	}
	return parts[0], parts[1], a, true
}

// signalCancel tells the workers to stop a running attempt (best effort:
// a worker that misses it finishes the attempt, whose result is ignored).
func (s *Service) signalCancel(ctx context.Context, log *slog.Logger, tenant, runID string, c cancelTask) {
	env := &messagev1.Envelope{
		Id: ids.New(), CorrelationId: runID, TenantId: tenant, Source: topology.AgentOrchestrator,
		Type: messagev1.MessageType_MESSAGE_TYPE_SIGNAL, CreatedAt: timestamppb.Now(),
		Payload: &messagev1.Envelope_Signal{Signal: &messagev1.Signal{
			Type: messagev1.SignalType_SIGNAL_TYPE_CANCEL_TASK, TargetId: CancelTarget(runID, c.node, c.attempt), Reason: "cancelled by the user",
		}},
	}
	if err := s.bus.PublishCore(ctx, CancelSubject(s.bus), env); err != nil {
		log.WarnContext(ctx, "publish cancel signal", logx.KeyNodeID, c.node, logx.Err(err))
	}
}

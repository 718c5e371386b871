package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// Suspending a session takes a snapshot of it (spec A-16): its context,
// pending questions and requests, whose deadlines stop running, and its
// runs' state in the orchestrator. Resuming restores the latest.

// A snapshot holds the node states of its runs up to maxSnapshotNodes in
// all, and their results (each up to maxResultBytes) up to
// maxSnapshotResultBytes; past them a run's DagSnapshot says it is
// truncated. Only runs that have not ended, maxFullRuns at most, are read
// with their nodes.
const (
	maxResultBytes         = 1024
	maxSnapshotNodes       = 20000
	maxSnapshotResultBytes = 1 << 20
	maxFullRuns            = 20
)

// dagState is the orchestrator's view of a session's runs, or why it could
// not be had.
type dagState struct {
	dags []*guidev1.DagSnapshot
	err  string
}

// dagState asks the orchestrator for the session's runs, as their owner.
func (s *Service) dagState(ctx context.Context, o owner, sessionID string) dagState {
	if s.orchestrator == nil {
		return dagState{err: "orchestrator not configured"}
	}
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(context.WithoutCancel(ctx),
		identity.Identity{TenantID: o.tenant, UserID: o.user, Role: identity.RoleMember}), s.cfg.PeerTimeout)
	defer cancel()
	runs, err := s.sessionRuns(cctx, sessionID, 100, false)
	if err != nil {
		s.log.WarnContext(ctx, "list runs for snapshot", slog.String(logx.KeySessionID, sessionID), logx.Err(err))
		return dagState{err: "orchestrator unavailable: " + truncate(err.Error(), 200)}
	}
	var out dagState
	nodes, results := 0, 0
	for _, r := range runs {
		d := &guidev1.DagSnapshot{
			Run:              r.GetName(),
			State:            r.GetState().String(),
			NodeStates:       map[string]string{},
			CompletedResults: map[string]string{},
		}
		for _, n := range r.GetNodes() {
			if nodes == maxSnapshotNodes {
				d.Truncated = true
				break
			}
			nodes++
			d.NodeStates[n.GetNodeId()] = n.GetState().String()
			switch n.GetState() {
			case orchestratorv1.NodeState_NODE_STATE_PENDING, orchestratorv1.NodeState_NODE_STATE_DISPATCHED:
				d.PendingNodes = append(d.PendingNodes, n.GetNodeId())
			case orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, orchestratorv1.NodeState_NODE_STATE_NO_CHANGES:
				if results+maxResultBytes > maxSnapshotResultBytes {
					d.Truncated = true
					continue
				}
				res := truncate(n.GetStdout(), maxResultBytes)
				results += len(res)
				d.CompletedResults[n.GetNodeId()] = res
			}
		}
		out.dags = append(out.dags, d)
	}
	return out
}

// runEnded reports whether a run is over.
func runEnded(st orchestratorv1.RunState) bool {
	switch st {
	case orchestratorv1.RunState_RUN_STATE_SUCCEEDED, orchestratorv1.RunState_RUN_STATE_FAILED, orchestratorv1.RunState_RUN_STATE_CANCELLED,
		orchestratorv1.RunState_RUN_STATE_NO_CHANGES:
		return true
	}
	return false
}

// sessionRuns returns a session's newest runs (at most limit). A listed run
// carries only its state, so those that have not ended, and the newest
// when newest is set, are read in full with their nodes; at most
// maxFullRuns of them, as a run's answer may hold megabytes of output.
func (s *Service) sessionRuns(ctx context.Context, sessionID string, limit int32, newest bool) ([]*orchestratorv1.Run, error) {
	resp, err := s.orchestrator.ListRuns(ctx, &orchestratorv1.ListRunsRequest{SessionId: sessionID, PageSize: limit})
	if err != nil {
		return nil, err
	}
	runs := resp.GetRuns()
	read := 0
	for i, r := range runs {
		if read == maxFullRuns || (runEnded(r.GetState()) && (!newest || i > 0)) {
			continue
		}
		read++
		full, err := s.orchestrator.GetRun(ctx, &orchestratorv1.GetRunRequest{Name: r.GetName()})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", r.GetName(), err)
		}
		runs[i] = full.GetRun()
	}
	return runs, nil
}

// takeSnapshot freezes a session being suspended: its context, pending
// clarifications, pending requests (whose deadlines stop running) and DAG state.
func (s *Service) takeSnapshot(ctx context.Context, tx pgx.Tx, sess session, dags dagState) error {
	o := owner{tenant: sess.TenantID, user: sess.UserID}
	c, version, err := loadContext(ctx, tx, o, sess.ID)
	if err != nil {
		return err
	}
	clar, err := pendingClarifications(ctx, tx, sess.TenantID, sess.ID, time.Time{}) // all, expired or not: a resumed session gets them back
	if err != nil {
		return err
	}
	reqs, err := pendingRequests(ctx, tx, sess.TenantID, sess.ID, statePending)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE pending_requests SET state = $3 WHERE tenant_id = $1 AND session_id = $2 AND state = $4`,
		sess.TenantID, sess.ID, stateFrozen, statePending); err != nil {
		return fmt.Errorf("freeze pending requests: %w", err)
	}
	now := s.now()
	snap := &guidev1.SessionSnapshot{
		Session:        sess.proto(),
		Context:        c,
		ContextVersion: version,
		ActiveRoutes:   map[string]string{},
		Dags:           dags.dags,
		DagError:       dags.err,
		CreateTime:     timestamppb.New(now),
	}
	for _, cl := range clar {
		snap.PendingClarifications = append(snap.PendingClarifications, cl.pending())
	}
	for _, r := range reqs {
		snap.PendingRequests = append(snap.PendingRequests, r.proto())
		snap.ActiveRoutes[r.CorrelationID] = r.Target
	}
	raw, err := protojson.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO session_snapshots (id, tenant_id, user_id, session_id, snapshot, create_time)
		VALUES ($1, $2, $3, $4, $5::jsonb, $6)`, ids.New(), sess.TenantID, sess.UserID, sess.ID, string(raw), now)
	if err != nil {
		return fmt.Errorf("store snapshot of %s: %w", sess.ID, err)
	}
	return nil
}

// errNoSnapshot matches a session that has no snapshot.
var errNoSnapshot = apierr.NotFound("snapshot", "")

// latestSnapshot returns the newest snapshot of a session and its id.
func latestSnapshot(ctx context.Context, q querier, o owner, sessionID string) (*guidev1.SessionSnapshot, string, error) {
	var raw []byte
	var id string
	var restored *time.Time
	err := q.QueryRow(ctx, `SELECT id, snapshot, restore_time FROM session_snapshots
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 ORDER BY create_time DESC LIMIT 1`,
		o.tenant, o.user, sessionID).Scan(&id, &raw, &restored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", errNoSnapshot.Withf("snapshot of session %s not found", sessionName(sessionID)).With("resource", sessionName(sessionID))
	}
	if err != nil {
		return nil, "", fmt.Errorf("load snapshot of %s: %w", sessionID, err)
	}
	snap := &guidev1.SessionSnapshot{}
	if err := protojson.Unmarshal(raw, snap); err != nil {
		return nil, "", fmt.Errorf("decode snapshot of %s: %w", sessionID, err)
	}
	if restored != nil {
		snap.RestoreTime = timestamppb.New(*restored)
	}
	return snap, id, nil
}

// restoreSnapshot gives a resumed session back what its latest snapshot
// froze: the context exactly as it was, and its pending requests, whose
// deadlines move on by the time they spent frozen.
func (s *Service) restoreSnapshot(ctx context.Context, tx pgx.Tx, sess session) error {
	o := owner{tenant: sess.TenantID, user: sess.UserID}
	snap, id, err := latestSnapshot(ctx, tx, o, sess.ID)
	if errors.Is(err, errNoSnapshot) {
		return nil
	}
	if err != nil {
		return err
	}
	if snap.GetRestoreTime() != nil {
		return nil
	}
	c := snap.GetContext()
	if c == nil {
		c = &guidev1.SessionContext{}
	}
	if err := storeContext(ctx, tx, o, sess.ID, c, snap.GetContextVersion()); err != nil {
		return err
	}
	// Every frozen request of the session runs again: those the snapshot
	// holds, and those agents sent while it was suspended, which started
	// frozen. Each deadline moves on by the time the request was frozen.
	now := s.now()
	if _, err := tx.Exec(ctx, `UPDATE pending_requests SET state = $3,
			deadline = deadline + ($5::timestamptz - GREATEST(create_time, $6::timestamptz))
		WHERE tenant_id = $1 AND session_id = $2 AND state = $4`,
		sess.TenantID, sess.ID, statePending, stateFrozen, now, snap.GetCreateTime().AsTime()); err != nil {
		return fmt.Errorf("thaw pending requests: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE session_snapshots SET restore_time = $2 WHERE id = $1 AND tenant_id = $3`, id, now, sess.TenantID); err != nil {
		return fmt.Errorf("mark snapshot restored: %w", err)
	}
	return nil
}

// closePending ends a finished session's pending requests.
func closePending(ctx context.Context, tx pgx.Tx, tenant, sessionID string) error {
	_, err := tx.Exec(ctx, `UPDATE pending_requests SET state = $3 WHERE tenant_id = $1 AND session_id = $2 AND state IN ($4, $5)`,
		tenant, sessionID, stateClosed, statePending, stateFrozen)
	if err != nil {
		return fmt.Errorf("close pending requests: %w", err)
	}
	return nil
}

// GetSessionSnapshot returns the latest snapshot of a session.
func (s *Service) GetSessionSnapshot(ctx context.Context, req *guidev1.GetSessionSnapshotRequest) (*guidev1.GetSessionSnapshotResponse, error) {
	who, id, err := callerSession(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	snap, _, err := latestSnapshot(ctx, s.db, ownerOf(who), id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get session snapshot", err)
	}
	return &guidev1.GetSessionSnapshotResponse{Snapshot: snap}, nil
}

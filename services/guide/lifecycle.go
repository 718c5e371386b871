package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// Limits on a session's own configuration.
const (
	maxSessionTasks     = 256
	maxSessionEngineers = 64
	minSessionDuration  = time.Second
	maxSessionDuration  = 366 * 24 * time.Hour
	maxResultBytes      = 1024
	// A snapshot holds the node states of its runs up to maxSnapshotNodes
	// in all, and their results up to maxSnapshotResultBytes; past them a
	// run's DagSnapshot says it is truncated. Only runs that have not
	// ended, maxFullRuns at most, are read with their nodes.
	maxSnapshotNodes       = 20000
	maxSnapshotResultBytes = 1 << 20
	maxFullRuns            = 20
)

// sessionConfigFromProto validates a requested SessionConfig; unset fields
// take the service defaults.
func (s *Service) sessionConfigFromProto(p *guidev1.SessionConfig) (sessionConfig, error) {
	c := sessionConfig{
		MaxConcurrentTasks: int32(s.cfg.SessionMaxConcurrentTasks),
		MaxEngineers:       int32(s.cfg.SessionMaxEngineers),
		TaskTimeout:        s.cfg.SessionTaskTimeout,
		SessionTimeout:     s.cfg.SessionTimeout,
		AutoSuspendAfter:   s.cfg.SessionAutoSuspendAfter,
	}
	if p == nil {
		return c, nil
	}
	switch n := p.GetMaxConcurrentTasks(); {
	case n < 0 || n > maxSessionTasks:
		return c, apierr.Invalid("session.config.max_concurrent_tasks", "must be within [0, %d], got %d", maxSessionTasks, n)
	case n > 0:
		c.MaxConcurrentTasks = n
	}
	switch n := p.GetMaxEngineers(); {
	case n < 0 || n > maxSessionEngineers:
		return c, apierr.Invalid("session.config.max_engineers", "must be within [0, %d], got %d", maxSessionEngineers, n)
	case n > 0:
		c.MaxEngineers = n
	}
	for _, d := range []struct {
		field string
		in    *durationpb.Duration
		out   *time.Duration
	}{
		{"task_timeout", p.GetTaskTimeout(), &c.TaskTimeout},
		{"session_timeout", p.GetSessionTimeout(), &c.SessionTimeout},
		{"auto_suspend_after", p.GetAutoSuspendAfter(), &c.AutoSuspendAfter},
	} {
		if d.in == nil {
			continue
		}
		if err := d.in.CheckValid(); err != nil {
			return c, apierr.Invalid("session.config."+d.field, "%v", err)
		}
		v := d.in.AsDuration()
		if v == 0 {
			continue
		}
		if v < minSessionDuration || v > maxSessionDuration {
			return c, apierr.Invalid("session.config."+d.field, "must be between %s and %s (a year), got %s", minSessionDuration, maxSessionDuration, v)
		}
		*d.out = v
	}
	c.GitIsolation = p.GetEnableGitIsolation()
	return c, nil
}

func (c sessionConfig) proto() *guidev1.SessionConfig {
	return &guidev1.SessionConfig{
		MaxConcurrentTasks: c.MaxConcurrentTasks,
		MaxEngineers:       c.MaxEngineers,
		TaskTimeout:        durationpb.New(c.TaskTimeout),
		SessionTimeout:     durationpb.New(c.SessionTimeout),
		AutoSuspendAfter:   durationpb.New(c.AutoSuspendAfter),
		EnableGitIsolation: c.GitIsolation,
	}
}

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
			case orchestratorv1.NodeState_NODE_STATE_SUCCEEDED:
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
	case orchestratorv1.RunState_RUN_STATE_SUCCEEDED, orchestratorv1.RunState_RUN_STATE_FAILED, orchestratorv1.RunState_RUN_STATE_CANCELLED:
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

// loadContext reads a session's context and its version.
func loadContext(ctx context.Context, q querier, o owner, id string) (*guidev1.SessionContext, int64, error) {
	var raw []byte
	var version int64
	err := q.QueryRow(ctx, `SELECT context, context_version FROM sessions WHERE tenant_id = $1 AND user_id = $2 AND id = $3`,
		o.tenant, o.user, id).Scan(&raw, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, sessionNotFound(id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load context of %s: %w", id, err)
	}
	c := &guidev1.SessionContext{}
	if err := protojson.Unmarshal(raw, c); err != nil {
		return nil, 0, fmt.Errorf("decode context of %s: %w", id, err)
	}
	return c, version, nil
}

func storeContext(ctx context.Context, q querier, o owner, id string, c *guidev1.SessionContext, version int64) error {
	raw, err := protojson.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode context: %w", err)
	}
	_, err = q.Exec(ctx, `UPDATE sessions SET context = $4::jsonb, context_version = $5
		WHERE tenant_id = $1 AND user_id = $2 AND id = $3`, o.tenant, o.user, id, string(raw), version)
	if err != nil {
		return fmt.Errorf("store context of %s: %w", id, err)
	}
	return nil
}

// takeSnapshot freezes a session being suspended: its context, pending
// clarifications, pending requests (whose deadlines stop running) and DAG state.
func (s *Service) takeSnapshot(ctx context.Context, tx pgx.Tx, sess session, dags dagState) error {
	o := owner{tenant: sess.TenantID, user: sess.UserID}
	c, version, err := loadContext(ctx, tx, o, sess.ID)
	if err != nil {
		return err
	}
	clar, err := pendingClarifications(ctx, tx, sess.TenantID, sess.ID)
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

// GetSessionContext returns a session's private context.
func (s *Service) GetSessionContext(ctx context.Context, req *guidev1.GetSessionContextRequest) (*guidev1.GetSessionContextResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseSessionName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	c, v, err := loadContext(ctx, s.db, ownerOf(who), id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get session context", err)
	}
	return &guidev1.GetSessionContextResponse{Context: c, Version: v}, nil
}

// maxContextBytes bounds a session context's JSON.
const maxContextBytes = 256 << 10

// UpdateSessionContext replaces a live session's context when the version
// matches. A suspended session's context is frozen in its snapshot.
func (s *Service) UpdateSessionContext(ctx context.Context, req *guidev1.UpdateSessionContextRequest) (*guidev1.UpdateSessionContextResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseSessionName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetContext() == nil {
		return nil, apierr.Invalid("context", "required")
	}
	if d := structDepth(req.GetContext().GetExtra()); d > maxExtraDepth {
		return nil, apierr.Invalid("context.extra", "nested %d levels deep; at most %d", d, maxExtraDepth)
	}
	raw, err := protojson.Marshal(req.GetContext())
	if err != nil {
		return nil, apierr.Invalid("context", "%v", err)
	}
	if len(raw) > maxContextBytes {
		return nil, apierr.Invalid("context", "%d bytes exceeds the limit of %d bytes", len(raw), maxContextBytes)
	}
	o := ownerOf(who)
	var version int64
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		cur, err := getSession(ctx, tx, o, id, true)
		if err != nil {
			return err
		}
		if cur.State != stateActive && cur.State != stateCreated {
			return stateError(reasonSessionNotOpen, cur.State, "update its context", stateCreated, stateActive)
		}
		_, v, err := loadContext(ctx, tx, o, id)
		if err != nil {
			return err
		}
		if req.GetVersion() != v {
			return conflict(reasonContextVersionMismatch, "context version is %d, not %d; read it again", v, req.GetVersion())
		}
		version = v + 1
		return storeContext(ctx, tx, o, id, req.GetContext(), version)
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "update session context", err)
	}
	return &guidev1.UpdateSessionContextResponse{Context: req.GetContext(), Version: version}, nil
}

// GetSessionSnapshot returns the latest snapshot of a session.
func (s *Service) GetSessionSnapshot(ctx context.Context, req *guidev1.GetSessionSnapshotRequest) (*guidev1.GetSessionSnapshotResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseSessionName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	snap, _, err := latestSnapshot(ctx, s.db, ownerOf(who), id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get session snapshot", err)
	}
	return &guidev1.GetSessionSnapshotResponse{Snapshot: snap}, nil
}

// maxExtraDepth bounds the nesting of a session context's free-form extra:
// a context is kept and returned inside larger messages (a snapshot), which
// must stay within what protobuf decoders accept.
const maxExtraDepth = 32

// structDepth is how deeply objects and lists nest in st (1 for a flat one).
func structDepth(st *structpb.Struct) int {
	if st == nil {
		return 0
	}
	d := 0
	for _, v := range st.GetFields() {
		d = max(d, valueDepth(v))
	}
	return d + 1
}

func valueDepth(v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return structDepth(k.StructValue)
	case *structpb.Value_ListValue:
		d := 0
		for _, e := range k.ListValue.GetValues() {
			d = max(d, valueDepth(e))
		}
		return d + 1
	}
	return 0
}

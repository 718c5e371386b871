package guide

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// transition is one edge set of the session state machine: from any of
// from, verb leads to state to.
type transition struct {
	verb  string
	from  []string
	to    string
	event eventv1.EventType
}

// The session state machine (spec A-16):
//
//	created   -activate-> active
//	active    -suspend->  suspended  (snapshot taken)
//	suspended -resume->   active     (snapshot restored)
//	active, suspended -complete-> completed
//	created, active, suspended -fail-> failed
//
// completed and failed are final.
var (
	activateTransition = transition{verb: "activate", from: []string{stateCreated}, to: stateActive, event: eventv1.EventType_EVENT_TYPE_SESSION_ACTIVATED}
	suspendTransition  = transition{verb: "suspend", from: []string{stateActive}, to: stateSuspended, event: eventv1.EventType_EVENT_TYPE_SESSION_SUSPENDED}
	resumeTransition   = transition{verb: "resume", from: []string{stateSuspended}, to: stateActive, event: eventv1.EventType_EVENT_TYPE_SESSION_RESUMED}
	completeTransition = transition{verb: "complete", from: []string{stateActive, stateSuspended}, to: stateCompleted, event: eventv1.EventType_EVENT_TYPE_SESSION_COMPLETED}
	failTransition     = transition{verb: "fail", from: []string{stateCreated, stateActive, stateSuspended}, to: stateFailed, event: eventv1.EventType_EVENT_TYPE_SESSION_FAILED}
)

// apply moves s along t at time at, recording the transition with its
// reason, or fails naming the current and allowed states.
func (t transition) apply(s *session, at time.Time, reason string) error {
	if !slices.Contains(t.from, s.State) {
		return stateError(reasonTransitionNotAllowed, s.State, t.verb, t.from...)
	}
	s.Transitions = append(s.Transitions, transitionRecord{From: s.State, To: t.to, Time: at, Reason: reason})
	s.State = t.to
	s.UpdateTime = at
	switch t.to {
	case stateActive:
		s.ActivateTime = &at
		s.LastActiveTime = at
	case stateSuspended:
		s.SuspendTime = &at
	case stateCompleted:
		s.CompleteTime = &at
	case stateFailed:
		s.FailTime = &at
	}
	return nil
}

// SuspendSession moves an active session to SUSPENDED.
func (s *Service) SuspendSession(ctx context.Context, req *guidev1.SuspendSessionRequest) (*guidev1.SuspendSessionResponse, error) {
	sess, err := s.transitionByName(ctx, req.GetName(), suspendTransition, "", "user")
	if err != nil {
		return nil, err
	}
	return &guidev1.SuspendSessionResponse{Session: sess.proto()}, nil
}

// ActivateSession moves a created session to ACTIVE.
func (s *Service) ActivateSession(ctx context.Context, req *guidev1.ActivateSessionRequest) (*guidev1.ActivateSessionResponse, error) {
	sess, err := s.transitionByName(ctx, req.GetName(), activateTransition, "", "user")
	if err != nil {
		return nil, err
	}
	return &guidev1.ActivateSessionResponse{Session: sess.proto()}, nil
}

// ResumeSession moves a suspended session to ACTIVE, restoring its snapshot.
func (s *Service) ResumeSession(ctx context.Context, req *guidev1.ResumeSessionRequest) (*guidev1.ResumeSessionResponse, error) {
	sess, err := s.transitionByName(ctx, req.GetName(), resumeTransition, "", "user")
	if err != nil {
		return nil, err
	}
	return &guidev1.ResumeSessionResponse{Session: sess.proto()}, nil
}

// CompleteSession moves an active or suspended session to COMPLETED with a
// summary.
func (s *Service) CompleteSession(ctx context.Context, req *guidev1.CompleteSessionRequest) (*guidev1.CompleteSessionResponse, error) {
	summary := strings.TrimSpace(req.GetSummary())
	if len(summary) > s.cfg.MaxSummaryBytes {
		return nil, apierr.Invalid("summary", "%d bytes exceeds the limit of %d bytes", len(summary), s.cfg.MaxSummaryBytes)
	}
	if !utf8.ValidString(summary) {
		return nil, apierr.Invalid("summary", "must be valid UTF-8")
	}
	sess, err := s.transitionByName(ctx, req.GetName(), completeTransition, summary, "user")
	if err != nil {
		return nil, err
	}
	return &guidev1.CompleteSessionResponse{Session: sess.proto()}, nil
}

// FailSession moves a session that is not finished to FAILED, recording why.
// It is not part of the API: the Guide calls it on an unrecoverable error.
func (s *Service) FailSession(ctx context.Context, who identity.Identity, sessionID, reason string) (*guidev1.Session, error) {
	if !ids.Valid(sessionID) {
		return nil, apierr.Invalid("session_id", "want a UUID, got %q", truncate(sessionID, 100))
	}
	sess, err := s.transition(ctx, ownerOf(who), strings.ToLower(sessionID), failTransition, reason, "error")
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "fail session", err)
	}
	return sess.proto(), nil
}

func (s *Service) transitionByName(ctx context.Context, name string, t transition, note, cause string) (session, error) {
	who, id, err := callerSession(ctx, "name", name)
	if err != nil {
		return session{}, err
	}
	sess, err := s.transition(ctx, ownerOf(who), id, t, note, cause)
	if err != nil {
		return session{}, apierr.Status(ctx, s.log, t.verb+" session", err)
	}
	return sess, nil
}

// transition applies t to a session in one transaction, then publishes the
// matching session event. note is the summary (complete) or the failure
// reason (fail); cause is recorded with the transition. Suspending takes a
// snapshot; resuming restores the latest one.
func (s *Service) transition(ctx context.Context, o owner, id string, t transition, note, cause string) (session, error) {
	var dags dagState
	if t.to == stateSuspended {
		dags = s.dagState(ctx, o, id)
	}
	var sess session
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		cur, err := getSession(ctx, tx, o, id, true)
		if err != nil {
			return err
		}
		sess, err = s.applyLocked(ctx, tx, cur, t, note, cause, dags)
		return err
	})
	if err != nil {
		return session{}, err
	}
	s.afterTransition(ctx, sess, t, note)
	return sess, nil
}

// applyLocked applies t to cur, whose row the transaction has locked.
func (s *Service) applyLocked(ctx context.Context, tx pgx.Tx, cur session, t transition, note, cause string, dags dagState) (session, error) {
	now := s.now()
	if err := t.apply(&cur, now, cause); err != nil {
		return session{}, err
	}
	switch t.to {
	case stateCompleted:
		cur.Summary = note
	case stateFailed:
		cur.FailureReason = note
	}
	if err := updateSessionState(ctx, tx, cur); err != nil {
		return session{}, err
	}
	s.sessions.forget(cur.TenantID, cur.ID)
	switch {
	case t.to == stateSuspended:
		if err := s.takeSnapshot(ctx, tx, cur, dags); err != nil {
			return session{}, err
		}
	case t.verb == resumeTransition.verb:
		if err := s.restoreSnapshot(ctx, tx, cur); err != nil {
			return session{}, err
		}
	case t.to == stateCompleted || t.to == stateFailed:
		if err := closePending(ctx, tx, cur.TenantID, cur.ID); err != nil {
			return session{}, err
		}
	}
	return cur, nil
}

// afterTransition records a committed transition: metrics, log, event, and
// the cache invalidation a finished session needs.
func (s *Service) afterTransition(ctx context.Context, sess session, t transition, note string) {
	s.sessions.forget(sess.TenantID, sess.ID)
	s.metrics.transitions.WithLabelValues(t.to).Inc()
	s.log.InfoContext(ctx, "session "+t.to, slog.String(logx.KeyTenantID, sess.TenantID), slog.String(logx.KeySessionID, sess.ID))
	text := fmt.Sprintf("Session %s is %s", sessionName(sess.ID), t.to)
	if t.to == stateCompleted && note != "" {
		text += ": " + note
	}
	s.publishSessionEvent(ctx, sess, t.event, text)
	if t.to == stateCompleted || t.to == stateFailed {
		s.cache.invalidateSession(ctx, sess.TenantID, sess.ID)
	}
	switch {
	case t.to == stateSuspended:
		s.controlRuns(ctx, sess, "pause")
	case t.verb == resumeTransition.verb:
		s.controlRuns(ctx, sess, "resume")
		s.briefSession(ctx, sess, "resumed") // briefing.go (spec E-09)
	}
}

// controlRuns pauses or resumes the session's runs in the orchestrator, so a
// suspended session does no work. The transition is already committed, so a
// failure is logged and published rather than failing the call.
func (s *Service) controlRuns(ctx context.Context, sess session, action string) {
	if s.orchestrator == nil {
		return
	}
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(context.WithoutCancel(ctx),
		identity.Identity{TenantID: sess.TenantID, UserID: sess.UserID, Role: identity.RoleMember}), s.cfg.PeerTimeout)
	defer cancel()
	var runs []string
	var err error
	if action == "pause" {
		var resp *orchestratorv1.PauseSessionRunsResponse
		resp, err = s.orchestrator.PauseSessionRuns(cctx, &orchestratorv1.PauseSessionRunsRequest{Session: sessionName(sess.ID)})
		runs = resp.GetRuns()
	} else {
		var resp *orchestratorv1.ResumeSessionRunsResponse
		resp, err = s.orchestrator.ResumeSessionRuns(cctx, &orchestratorv1.ResumeSessionRunsRequest{Session: sessionName(sess.ID)})
		runs = resp.GetRuns()
	}
	if err != nil {
		s.log.WarnContext(ctx, action+" session runs", slog.String(logx.KeySessionID, sess.ID), logx.Err(err))
		s.publishRunsControl(ctx, sess, action, nil, err)
		return
	}
	if len(runs) > 0 {
		s.publishRunsControl(ctx, sess, action, runs, nil)
	}
}

// publishRunsControl tells the session what happened to its runs: which
// were paused or resumed, or why they could not be.
func (s *Service) publishRunsControl(ctx context.Context, sess session, action string, runs []string, err error) {
	typ := eventv1.EventType_EVENT_TYPE_SESSION_RUNS_PAUSED
	verb := "Paused"
	if action == "resume" {
		typ, verb = eventv1.EventType_EVENT_TYPE_SESSION_RUNS_RESUMED, "Resumed"
	}
	ev := newEvent(typ, sess.ID, "", fmt.Sprintf("%s %d run(s) of the session", verb, len(runs)))
	ev.Payload = &eventv1.Event_SessionRuns{SessionRuns: &eventv1.SessionRunsEvent{Runs: runs}}
	if err != nil {
		msg := status.Convert(err).Message()
		ev = newEvent(eventv1.EventType_EVENT_TYPE_ERROR, sess.ID, "", fmt.Sprintf("Could not %s the session's runs: %s", action, msg))
		ev.Payload = &eventv1.Event_Error{Error: &eventv1.ErrorEvent{Reason: "RUNS_NOT_" + strings.ToUpper(action) + "D", Message: msg}}
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	if perr := s.publishEvent(pctx, sess.TenantID, fmt.Sprintf("%s.runs.%s.%d", sess.ID, action, sess.UpdateTime.UnixNano()), ev); perr != nil {
		s.log.WarnContext(ctx, "publish runs control event", slog.String(logx.KeySessionID, sess.ID), logx.Err(perr))
	}
}

// publishSessionEvent records a lifecycle change on the session's stream.
// The change is already committed, so a bus failure is logged rather than
// failing the call, and a bus that does not answer is waited for no longer
// than PublishTimeout.
func (s *Service) publishSessionEvent(ctx context.Context, sess session, typ eventv1.EventType, text string) {
	cause := ""
	if n := len(sess.Transitions); n > 0 {
		cause = sess.Transitions[n-1].Reason
	}
	s.publishSessionChange(ctx, sess, typ, text, cause)
}

// publishSessionChange is publishSessionEvent with what caused the change.
func (s *Service) publishSessionChange(ctx context.Context, sess session, typ eventv1.EventType, text, cause string) {
	ev := newEvent(typ, sess.ID, "", text)
	ev.Payload = &eventv1.Event_Session{Session: &eventv1.SessionEvent{Session: sessionName(sess.ID), State: sess.State, Cause: cause,
		Repository: sess.Repository}}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	if err := s.publishEvent(pctx, sess.TenantID, fmt.Sprintf("%s.%s.%d", sess.ID, typ, sess.UpdateTime.UnixNano()), ev); err != nil {
		s.log.WarnContext(ctx, "publish session event", slog.String("type", typ.String()),
			slog.String(logx.KeySessionID, sess.ID), logx.Err(err))
	}
}

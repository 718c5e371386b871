package guide

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

var stateToProto = map[string]guidev1.SessionState{
	stateCreated:   guidev1.SessionState_SESSION_STATE_CREATED,
	stateActive:    guidev1.SessionState_SESSION_STATE_ACTIVE,
	stateSuspended: guidev1.SessionState_SESSION_STATE_SUSPENDED,
	stateCompleted: guidev1.SessionState_SESSION_STATE_COMPLETED,
	stateFailed:    guidev1.SessionState_SESSION_STATE_FAILED,
}

func stateFromProto(st guidev1.SessionState) (string, bool) {
	for k, v := range stateToProto {
		if v == st {
			return k, true
		}
	}
	return "", false
}

func tsOrNil(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func (s session) proto() *guidev1.Session {
	return &guidev1.Session{
		Name:           sessionName(s.ID),
		Id:             s.ID,
		DisplayName:    s.DisplayName,
		State:          stateToProto[s.State],
		TenantId:       s.TenantID,
		UserId:         s.UserID,
		Metadata:       s.Metadata,
		CreateTime:     timestamppb.New(s.CreateTime),
		UpdateTime:     timestamppb.New(s.UpdateTime),
		ActivateTime:   tsOrNil(s.ActivateTime),
		SuspendTime:    tsOrNil(s.SuspendTime),
		CompleteTime:   tsOrNil(s.CompleteTime),
		LastActiveTime: timestamppb.New(s.LastActiveTime),
		Summary:        s.Summary,
		Config:         s.Config.proto(),
		FailTime:       tsOrNil(s.FailTime),
		FailureReason:  s.FailureReason,
		Transitions:    transitionsProto(s.Transitions),
		Repository:     s.Repository,
	}
}

func transitionsProto(ts []transitionRecord) []*guidev1.SessionTransition {
	out := make([]*guidev1.SessionTransition, 0, len(ts))
	for _, t := range ts {
		out = append(out, &guidev1.SessionTransition{
			From:   stateToProto[t.From],
			To:     stateToProto[t.To],
			Time:   timestamppb.New(t.Time),
			Reason: t.Reason,
		})
	}
	return out
}

func ownerOf(id identity.Identity) owner { return owner{tenant: id.TenantID, user: id.UserID} }

// CreateSession creates a session for the caller and activates it at once.
// Its repository is the one requested, which must be registered in the
// caller's tenant, else the one the user set last.
func (s *Service) CreateSession(ctx context.Context, req *guidev1.CreateSessionRequest) (*guidev1.CreateSessionResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	in := req.GetSession()
	displayName, err := s.displayName(in.GetDisplayName())
	if err != nil {
		return nil, err
	}
	if err := s.validateMetadata(in.GetMetadata()); err != nil {
		return nil, err
	}
	cfg, err := s.sessionConfigFromProto(in.GetConfig())
	if err != nil {
		return nil, err
	}
	repo, explicit, err := s.newSessionRepository(ctx, s.db, who, in.GetRepository())
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create session", err)
	}
	now := s.now()
	sess := session{
		ID:             ids.New(),
		TenantID:       who.TenantID,
		UserID:         who.UserID,
		DisplayName:    displayName,
		State:          stateCreated,
		Metadata:       in.GetMetadata(),
		CreateTime:     now,
		UpdateTime:     now,
		LastActiveTime: now,
		Config:         cfg,
		Transitions:    []transitionRecord{{To: stateCreated, Time: now, Reason: "create"}},
		Repository:     repo,
	}
	if !req.GetStartInactive() {
		if err := activateTransition.apply(&sess, now, "create"); err != nil {
			return nil, apierr.Status(ctx, s.log, "create session", err)
		}
	}
	if sess.Metadata == nil {
		sess.Metadata = map[string]string{}
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := createSession(ctx, tx, sess); err != nil || !explicit {
			return err
		}
		return rememberRepository(ctx, tx, ownerOf(who), repo, now)
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create session", err)
	}
	s.metrics.transitions.WithLabelValues(sess.State).Inc()
	s.log.InfoContext(ctx, "session created", slog.String(logx.KeyTenantID, who.TenantID), slog.String(logx.KeySessionID, sess.ID))
	s.publishSessionEvent(ctx, sess, eventv1.EventType_EVENT_TYPE_SESSION_CREATED, fmt.Sprintf("Session %s created", sessionName(sess.ID)))
	s.briefSession(ctx, sess, "created") // briefing.go (spec E-09)
	return &guidev1.CreateSessionResponse{Session: sess.proto()}, nil
}

func (s *Service) validateMetadata(md map[string]string) error {
	if len(md) > s.cfg.MaxMetadataEntries {
		return apierr.Invalid("session.metadata", "%d entries exceeds the limit of %d", len(md), s.cfg.MaxMetadataEntries)
	}
	for k, v := range md {
		switch {
		case k == "":
			return apierr.Invalid("session.metadata", "keys must not be empty")
		case utf8.RuneCountInString(k) > maxMetadataKeyChars:
			return apierr.Invalid("session.metadata", "key %q is longer than %d characters", truncate(k, 40), maxMetadataKeyChars)
		case len(v) > maxMetadataValueBytes:
			return apierr.Invalid("session.metadata", "value of %q is %d bytes, over the limit of %d", truncate(k, 40), len(v), maxMetadataValueBytes)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return apierr.Invalid("session.metadata", "keys and values must be valid UTF-8")
		}
	}
	return nil
}

// GetSession returns one of the caller's sessions.
func (s *Service) GetSession(ctx context.Context, req *guidev1.GetSessionRequest) (*guidev1.GetSessionResponse, error) {
	who, id, err := callerSession(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	sess, err := getSession(ctx, s.db, ownerOf(who), id, false)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get session", err)
	}
	return &guidev1.GetSessionResponse{Session: sess.proto()}, nil
}

// ListSessions returns the caller's sessions, newest first.
func (s *Service) ListSessions(ctx context.Context, req *guidev1.ListSessionsRequest) (*guidev1.ListSessionsResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultSessionPageSize, maxSessionPageSize)
	if err != nil {
		return nil, err
	}
	var state string
	if req.GetState() != guidev1.SessionState_SESSION_STATE_UNSPECIFIED {
		st, ok := stateFromProto(req.GetState())
		if !ok {
			return nil, apierr.Invalid("state", "unknown session state %d", req.GetState())
		}
		state = st
	}
	var after *sessionCursor
	if tok := req.GetPageToken(); tok != "" {
		t, id, err := decodeCursor(tok)
		if err != nil {
			return nil, err
		}
		after = &sessionCursor{CreateTime: t, ID: id}
	}
	rows, err := listSessions(ctx, s.db, ownerOf(who), state, after, size+1)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list sessions", err)
	}
	resp := &guidev1.ListSessionsResponse{}
	if len(rows) > size {
		rows = rows[:size]
		last := rows[len(rows)-1]
		resp.NextPageToken = encodeCursor(last.CreateTime, last.ID)
	}
	for _, r := range rows {
		resp.Sessions = append(resp.Sessions, r.proto())
	}
	return resp, nil
}

// ownSession loads one of the caller's sessions by name.
func (s *Service) ownSession(ctx context.Context, name string) (session, error) {
	who, id, err := callerSession(ctx, "parent", name)
	if err != nil {
		return session{}, err
	}
	sess, err := getSession(ctx, s.db, ownerOf(who), id, false)
	if err != nil {
		return session{}, apierr.Status(ctx, s.log, "load session", err)
	}
	return sess, nil
}

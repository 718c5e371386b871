package guide

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Dead letters are envelopes that could not be delivered or answered: ones
// the inbox refuses, requests that timed out, inbox messages no agent
// acknowledged. They are kept for listing and replay.

// deadLetter keeps an envelope that cannot be delivered, for listing and
// replay. A failure is logged and returned: a caller that would drop the
// envelope once it is kept must keep it instead (reject).
func (s *Service) deadLetter(ctx context.Context, env *messagev1.Envelope, reason string) error {
	raw, err := proto.Marshal(env)
	if err != nil {
		s.log.WarnContext(ctx, "encode dead letter", logx.Err(err))
		return err
	}
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte("dead:"+env.GetId()+":"+reason)).String()
	_, err = s.db.Exec(ctx, `INSERT INTO dead_letters (id, tenant_id, session_id, target, correlation_id, reason,
		message_type, envelope, create_time) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING`,
		id, env.GetTenantId(), env.GetSessionId(), env.GetTarget(), env.GetCorrelationId(), truncate(reason, 500),
		env.GetType().String(), raw, s.now())
	if err != nil {
		s.log.WarnContext(ctx, "store dead letter", logx.Err(err))
		return err
	}
	s.metrics.deadLetters.WithLabelValues(env.GetTarget()).Inc()
	s.log.WarnContext(ctx, "message dead-lettered", slog.String("reason", reason), slog.String(logx.KeyAgent, env.GetTarget()))
	return nil
}

// reject dead-letters an envelope the inbox refuses, and acknowledges it
// only once it is kept: when the dead letter cannot be stored, the error
// has the envelope delivered again rather than lost.
func (s *Service) reject(ctx context.Context, env *messagev1.Envelope, reason string) (string, error) {
	if err := s.deadLetter(ctx, env, reason); err != nil {
		return "", err
	}
	return "rejected", nil
}

func deadLetterName(id string) string { return "deadLetters/" + id }

// deadLetterVisible is the condition ($1 tenant, $2 caller, $3 whether the
// caller is an admin) under which a dead letter is the caller's: an admin
// sees the tenant's every dead letter, anyone else those of their own
// sessions, since replaying one sends its user's message again.
const deadLetterVisible = `tenant_id = $1 AND ($3 OR session_id IN (SELECT id::text FROM sessions WHERE tenant_id = $1 AND user_id = $2))`

// ListDeadLetters returns the caller's dead letters (an admin's: the
// tenant's), newest first.
func (s *Service) ListDeadLetters(ctx context.Context, req *guidev1.ListDeadLettersRequest) (*guidev1.ListDeadLettersResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultMessagePageSize, maxMessagePageSize)
	if err != nil {
		return nil, err
	}
	sid := req.GetSessionId()
	if sid != "" && !ids.Valid(sid) {
		return nil, apierr.Invalid("session_id", "want a UUID, got %q", truncate(sid, 60))
	}
	rows, err := s.db.Query(ctx, `SELECT id, session_id, target, correlation_id, reason, message_type, create_time,
		replay_count, last_replay_time FROM dead_letters WHERE `+deadLetterVisible+` AND ($4 = '' OR session_id = $4)
		ORDER BY create_time DESC, id LIMIT $5`, who.TenantID, who.UserID, who.Role == identity.RoleAdmin, strings.ToLower(sid), size)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list dead letters", err)
	}
	defer rows.Close()
	resp := &guidev1.ListDeadLettersResponse{}
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, apierr.Status(ctx, s.log, "list dead letters", err)
		}
		resp.DeadLetters = append(resp.DeadLetters, d)
	}
	if err := rows.Err(); err != nil {
		return nil, apierr.Status(ctx, s.log, "list dead letters", err)
	}
	return resp, nil
}

func scanDeadLetter(row pgx.Row) (*guidev1.DeadLetter, error) {
	var id, sid, target, corr, reason, typ string
	var created time.Time
	var replays int32
	var last *time.Time
	if err := row.Scan(&id, &sid, &target, &corr, &reason, &typ, &created, &replays, &last); err != nil {
		return nil, err
	}
	return &guidev1.DeadLetter{Name: deadLetterName(id), SessionId: sid, Target: target, CorrelationId: corr, Reason: reason,
		MessageType: typ, CreateTime: timestamppb.New(created), ReplayCount: replays, LastReplayTime: tsOrNil(last)}, nil
}

// ReplayDeadLetter publishes a dead letter to its target's inbox again,
// with a fresh id and deadline, and tracks it as a pending request.
func (s *Service) ReplayDeadLetter(ctx context.Context, req *guidev1.ReplayDeadLetterRequest) (*guidev1.ReplayDeadLetterResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := strings.CutPrefix(req.GetName(), "deadLetters/")
	if !ok || !ids.Valid(id) {
		return nil, apierr.Invalid("name", "want deadLetters/{uuid}, got %q", truncate(req.GetName(), 100))
	}
	var raw []byte
	var target, sessionID string
	err = s.db.QueryRow(ctx, `SELECT envelope, target, session_id FROM dead_letters WHERE `+deadLetterVisible+` AND id = $4`,
		who.TenantID, who.UserID, who.Role == identity.RoleAdmin, id).Scan(&raw, &target, &sessionID)
	if err == pgx.ErrNoRows {
		return nil, apierr.Status(ctx, s.log, "replay dead letter", apierr.NotFound("dead letter", req.GetName()))
	}
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "replay dead letter", err)
	}
	env := decodeEnvelope(raw)
	if env == nil || !routable(target) && target != topology.AgentGuide {
		return nil, apierr.Status(ctx, s.log, "replay dead letter",
			apierr.FailedPrecondition(reasonDeadLetterUndeliverable, "dead letter %s has no agent to deliver to", req.GetName()))
	}
	now := s.now()
	env.Id = ids.New()
	env.Attempt++
	env.CreatedAt = timestamppb.New(now)
	env.Deadline = timestamppb.New(now.Add(s.cfg.RequestTimeout))
	// A replay sends its user's message again, so only into a session that
	// takes messages. The session's row is held until the request is
	// tracked again, so that a suspension after it freezes the request.
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if ids.Valid(sessionID) {
			var state string
			err := tx.QueryRow(ctx, `SELECT state FROM sessions WHERE tenant_id = $1 AND id = $2 FOR SHARE`,
				who.TenantID, strings.ToLower(sessionID)).Scan(&state)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// Refused because its session did not exist: nothing to check.
			case err != nil:
				return fmt.Errorf("load the dead letter's session: %w", err)
			case state != stateActive:
				return sendStateError(state)
			}
		}
		if target == topology.AgentGuide || !ids.Valid(env.GetSessionId()) || env.GetCorrelationId() == "" {
			return nil
		}
		again, err := proto.Marshal(env)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE pending_requests SET state = $3, envelope = $4, deadline = $5
			WHERE tenant_id = $1 AND correlation_id = $2`, who.TenantID, env.GetCorrelationId(), statePending, again,
			now.Add(s.cfg.RequestTimeout))
		return err
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "replay dead letter", err)
	}
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, target), env.GetId(), env); err != nil {
		s.log.ErrorContext(ctx, "replay dead letter", logx.Err(err))
		return nil, apierr.Status(ctx, s.log, "replay dead letter",
			apierr.Unavailable(apierr.ReasonBusUnavailable, "event bus unavailable; retry later"))
	}
	d, err := scanDeadLetter(s.db.QueryRow(ctx, `UPDATE dead_letters SET replay_count = replay_count + 1, last_replay_time = $3
		WHERE tenant_id = $1 AND id = $2 RETURNING id, session_id, target, correlation_id, reason, message_type, create_time,
		replay_count, last_replay_time`, who.TenantID, id, now))
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "replay dead letter", err)
	}
	s.metrics.replays.Inc()
	return &guidev1.ReplayDeadLetterResponse{DeadLetter: d}, nil
}

// maxDeliveriesAdvisory is what the server says when a consumer gives up
// on a message after its last delivery.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchUndeliverable moves envelopes that an agent's inbox consumer gave up
// on (max deliveries reached without an acknowledgement) to the dead
// letters, and removes them from the inbox. Replicas share the advisories
// through a queue group.
func (s *Service) watchUndeliverable(ctx context.Context) error {
	sub, err := s.bus.Conn.QueueSubscribe(topology.InboxMaxDeliveries(s.bus), topology.QueueDeadLetters, func(m *nats.Msg) {
		var a maxDeliveriesAdvisory
		if json.Unmarshal(m.Data, &a) != nil || a.StreamSeq == 0 {
			return
		}
		s.deadLetterSequence(ctx, a)
	})
	if err != nil {
		return fmt.Errorf("subscribe to max-deliveries advisories: %w", err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	return nil
}

func (s *Service) deadLetterSequence(ctx context.Context, a maxDeliveriesAdvisory) {
	st, err := s.bus.JS.Stream(ctx, a.Stream)
	if err != nil {
		s.log.WarnContext(ctx, "dead letter: open stream", logx.Err(err))
		return
	}
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if err != nil {
		// Acknowledged or removed meanwhile: nothing is lost.
		return
	}
	env := &messagev1.Envelope{}
	if err := proto.Unmarshal(raw.Data, env); err != nil {
		s.log.WarnContext(ctx, "dead letter: undecodable inbox message", slog.Uint64("sequence", a.StreamSeq))
		return
	}
	if env.GetTarget() == "" {
		env.Target = topology.AgentOfInbox(s.bus, raw.Subject)
	}
	if s.deadLetter(ctx, env, fmt.Sprintf("not acknowledged by %s after %d deliveries", a.Consumer, a.Deliveries)) != nil {
		return // kept on the stream, not lost
	}
	if err := st.DeleteMsg(ctx, a.StreamSeq); err != nil {
		s.log.WarnContext(ctx, "dead letter: remove from inbox", logx.Err(err))
	}
}

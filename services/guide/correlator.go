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
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// The correlator follows the session event stream: an agent's event with
// the correlation id of a pending request answers it. It caches knowledge
// answers (tier 1), notices empty answers (a routing failure signal) and
// completes recorded queries.

// handleEvent handles one session event.
func (s *Service) handleEvent(ctx context.Context, msg jetstream.Msg) error {
	ev := &eventv1.Event{}
	if err := proto.Unmarshal(msg.Data(), ev); err != nil {
		return nil // not an event; nothing to correlate
	}
	if ev.GetSource() == authorGuide || ev.GetCorrelationId() == "" ||
		ev.GetType() == eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED {
		return nil
	}
	tenant := topology.TenantOfEventSubject(s.bus, msg.Subject())
	if tenant == "" {
		return nil
	}
	var p pendingRequest
	var answered bool
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var found bool
		var err error
		p, found, err = getPending(ctx, tx, tenant, ev.GetCorrelationId(), true)
		// A request of a suspended session is frozen, not forgotten: an
		// answer that arrives meanwhile answers it, or the resumed session
		// would report it timed out.
		if err != nil || !found || (p.State != statePending && p.State != stateFrozen) || p.SessionID != ev.GetSessionId() {
			return err
		}
		if _, err := setPendingState(ctx, tx, tenant, p.CorrelationID, p.State, stateAnswered); err != nil {
			return err
		}
		answered = true
		// Through the request's own session's recordings: a correlation id
		// is unique per tenant only.
		_, err = tx.Exec(ctx, `UPDATE recorded_queries q SET response = $2, success = $3 FROM recordings r
			WHERE r.tenant_id = $4 AND r.session_id = $5 AND q.recording_id = r.id AND q.correlation_id = $1`,
			p.CorrelationID, truncate(ev.GetText(), 4<<10), !emptyAnswer(ev), tenant, p.SessionID)
		return err
	})
	if err != nil || !answered {
		return err
	}
	s.metrics.answered.WithLabelValues(p.Target).Inc()
	s.metrics.latency.WithLabelValues(p.Target).Observe(time.Since(p.CreateTime).Seconds())
	s.answerRequester(ctx, p, ev)
	if cannotHelp(ev) {
		f, err := s.insertFailure(ctx, s.db, routingFailure{TenantID: tenant, UserID: p.UserID, SessionID: p.SessionID,
			OriginalRequest: p.Original, ClassifiedAs: p.IntentType, RoutedTo: p.Target, ShouldHaveBeen: p.Target,
			Signal: signalFromName("EMPTY_RESPONSE")}.decided(p))
		if err != nil {
			s.log.WarnContext(ctx, "record empty response", logx.Err(err))
		} else {
			s.afterFailure(ctx, f)
		}
		return nil
	}
	if ev.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED && !emptyAnswer(ev) {
		// An answer that found nothing is an answer (the request went to
		// the right agent), but it is not kept: the next index run or entry
		// may change it.
		s.cacheAnswer(ctx, tenant, p, ev)
	}
	return nil
}

// cannotHelp reports an answer in which the routed agent could not help
// with the request (spec A-33 EMPTY_RESPONSE): one flagged cannot_help, or
// one with neither text nor results. A search that found nothing and says
// so (the archivalist with no history on a subject, the academic with no
// document on it) is an answer from the agent that owns the request, not a
// misroute.
func cannotHelp(ev *eventv1.Event) bool {
	a := ev.GetMessageAnswered()
	if a == nil {
		return false
	}
	return a.GetCannotHelp() || (!holdsResults(a) && strings.TrimSpace(a.GetText()) == "")
}

// emptyAnswer reports an answer with no content: a search (its query set)
// that found nothing, whatever its text says, or an answer with neither
// results nor text.
func emptyAnswer(ev *eventv1.Event) bool {
	a := ev.GetMessageAnswered()
	if a == nil {
		return false
	}
	return !holdsResults(a) && (a.GetQuery() != "" || strings.TrimSpace(a.GetText()) == "")
}

// holdsResults reports an answer with hits, recent entries or citations.
func holdsResults(a *messagev1.AgentAnswer) bool {
	return len(a.GetHits()) > 0 || len(a.GetRecent()) > 0 || len(a.GetCitations()) > 0
}

// cacheAnswer keeps the answer to a cacheable request (its cache key was
// stored with it) for the next one alike.
func (s *Service) cacheAnswer(ctx context.Context, tenant string, p pendingRequest, ev *eventv1.Event) {
	var key string
	var ttlMS int64
	if err := s.db.QueryRow(ctx, `SELECT cache_key, cache_ttl_ms FROM pending_requests WHERE correlation_id = $1 AND tenant_id = $2`,
		p.CorrelationID, tenant).Scan(&key, &ttlMS); err != nil || key == "" {
		return
	}
	a := proto.CloneOf(ev.GetMessageAnswered())
	a.Agent = p.Target
	s.cache.storeAnswer(ctx, tenant, p.SessionID, key, time.Duration(ttlMS)*time.Millisecond, a)
}

// watchLibrarian retires a tenant's cached librarian answers whenever one
// of its index runs finishes, or one of its repositories is deleted: files
// changed (spec A-35).
func (s *Service) watchLibrarian(ctx context.Context) error {
	sub, err := s.bus.Conn.Subscribe(topology.IndexProgressSubject(s.bus, "*"), func(m *nats.Msg) {
		n := &librarianv1.IndexNotice{}
		if proto.Unmarshal(m.Data, n) == nil && (n.GetProgress().GetDone() || n.GetDeleted()) {
			s.cache.invalidateLibrarian(ctx, n.GetTenantId())
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to librarian progress: %w", err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	return nil
}

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

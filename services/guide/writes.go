package guide

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"sylk.dev/sylk/pkg/identity"
)

// A message's writes are expressed once, as statements, and run either
// way: queued on a group commit's batch (groupcommit.go), one round trip
// for the group, or sent as a batch in a transaction of their own. Every
// check they make fails its statement on the server (fail_check, migration
// guide/0008, or a unique index), so that it holds however they run: a
// session that is no longer active, a request id stored before.

// SQLSTATEs a message's writes fail with when a check does not hold.
const (
	sqlUniqueViolation = "23505"
	sqlCheckViolation  = "23514"
)

// stmt is one write: its SQL and arguments.
type stmt struct {
	sql  string
	args []any
}

func (st stmt) exec(ctx context.Context, q querier) (pgconn.CommandTag, error) {
	return q.Exec(ctx, st.sql, st.args...)
}

// stmts is a queue of writes, run in order.
type stmts []stmt

func (w *stmts) add(sql string, args ...any) { *w = append(*w, stmt{sql: sql, args: args}) }

// queue queues the writes on b.
func (w stmts) queue(b *pgx.Batch) {
	for _, st := range w {
		b.Queue(st.sql, st.args...)
	}
}

// send runs the writes in tx, in one round trip. A request id stored
// before is errDuplicateRequest.
func (w stmts) send(ctx context.Context, tx pgx.Tx) error {
	if len(w) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	w.queue(b)
	err := tx.SendBatch(ctx, b).Close()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlUniqueViolation && pe.ConstraintName == "messages_request_idx" {
		return errDuplicateRequest
	}
	return err
}

// errSessionInactive says the session a write touched is no longer
// active; the caller reads its state to say why (sendStateError).
var errSessionInactive = errors.New("session is not active")

// touchSQL records activity on an active session; a session that is not
// active fails the statement, and the transaction with it, on the server.
const touchSQL = `WITH touched AS (UPDATE sessions SET last_active_time = $4
	WHERE tenant_id = $1 AND user_id = $2 AND id = $3 AND state = 'active' RETURNING id)
	SELECT CASE WHEN EXISTS (SELECT 1 FROM touched) THEN true ELSE fail_check('session ' || $3 || ' is not active') END`

// touch is the write that records activity on session id at at.
func touch(o owner, id string, at time.Time) stmt {
	return stmt{sql: touchSQL, args: []any{o.tenant, o.user, id, at}}
}

// touchSession runs touch in tx on its own, first, so that what follows
// runs only in an active session: errSessionInactive when it is not.
func touchSession(ctx context.Context, tx pgx.Tx, o owner, id string, at time.Time) error {
	_, err := touch(o, id, at).exec(ctx, tx)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlCheckViolation {
		return errSessionInactive
	}
	if err != nil {
		return fmt.Errorf("touch session %s: %w", id, err)
	}
	return nil
}

// inactive is why a session the writes found inactive takes no messages.
func (s *Service) inactive(ctx context.Context, o owner, id string) error {
	cur, err := getSession(ctx, s.db, o, id, false)
	if err != nil {
		return err
	}
	return sendStateError(cur.State)
}

// insertMessageSQL stores a message; a request id already stored in the
// session fails it (the unique index messages_request_idx).
const insertMessageSQL = `INSERT INTO messages (id, tenant_id, user_id, session_id, author, text,
	correlation_id, request_id, create_time, route_target, route_tier, route_confidence,
	route_intent_type, route_reason, intent_subject, reply, reply_id, options, envelope_id, envelope)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`

// insertUserMessageSQL stores a user message with its outbox row (the
// outbox relay's).
const insertUserMessageSQL = `WITH stored AS (` + insertMessageSQL + ` RETURNING id, tenant_id, create_time)
	INSERT INTO outbox (message_id, tenant_id, create_time) SELECT id, tenant_id, create_time FROM stored`

// insertMessage is the write that stores m.
func insertMessage(o owner, m message) stmt {
	sql := insertMessageSQL
	if m.Author == authorUser {
		sql = insertUserMessageSQL
	}
	return stmt{sql: sql, args: []any{m.ID, o.tenant, o.user, m.SessionID, m.Author, m.Text, m.CorrelationID, m.RequestID,
		m.CreateTime, m.Route.Target, m.Route.Tier, m.Route.Confidence, m.Route.IntentType, m.Route.Reason, m.IntentSubject,
		storedReply(m), m.ReplyID, nonNil(m.Options), m.EnvelopeID, m.Envelope}}
}

// storedReply is what the reply column holds: nothing when the reply is a
// message of its own, which messageColumns read it from.
func storedReply(m message) string {
	if m.ReplyID != nil {
		return ""
	}
	return m.Reply
}

// messageWrites are the writes that store a handled user message m, after
// its session's touch: m itself, the question or pending request of its
// plan, its routing decision (added to counts, a group commit's, or
// counted on its own when counts is nil), the Guide's reply, and the query
// when the session is being recorded (the statement finds out).
func (s *Service) messageWrites(who identity.Identity, m message, plan routePlan, counts *routeCounts) (stmts, error) {
	o := ownerOf(who)
	w := stmts{insertMessage(o, m)}
	if plan.clarification != nil {
		w = append(w, insertClarification(*plan.clarification))
	}
	if plan.pending {
		pw, err := s.pendingWrites(who, m, plan)
		if err != nil {
			return nil, err
		}
		w = append(w, pw...)
	}
	if m.Route.Target != "" && m.Route.Target != authorGuide && m.Route.IntentType != "" && m.AnswerTo == nil {
		k := routeCountKey{who.TenantID, m.Route.IntentType, confidenceBucket(m.Route.Confidence)}
		if counts != nil {
			counts.add(k)
		} else {
			w = append(w, routeCountWrites(map[routeCountKey]int64{k: 1}, aloneShard())...)
		}
	}
	if m.ReplyID != nil {
		w = append(w, insertMessage(o, s.replyMessage(m)))
	}
	return append(w, s.recordQuery(who, m)), nil
}

// pendingWrites track a routed message's request until it is answered,
// with where its answer is cached.
func (s *Service) pendingWrites(who identity.Identity, m message, plan routePlan) (stmts, error) {
	raw := m.Envelope
	if raw == nil {
		var err error
		if raw, err = proto.Marshal(s.envelope(who, m)); err != nil {
			return nil, fmt.Errorf("encode envelope: %w", err)
		}
	}
	mid := m.ID
	w := stmts{insertPending(pendingRequest{
		CorrelationID: m.CorrelationID, TenantID: who.TenantID, UserID: who.UserID, SessionID: m.SessionID,
		MessageID: &mid, Target: m.Route.Target, IntentType: m.Route.IntentType, Original: routeText(m), Envelope: raw,
		Deadline: m.CreateTime.Add(s.cfg.RequestTimeout), CreateTime: m.CreateTime, State: statePending,
	})}
	if plan.cacheKey != "" {
		w.add(`UPDATE pending_requests SET cache_key = $2, cache_ttl_ms = $3 WHERE correlation_id = $1 AND tenant_id = $4`,
			m.CorrelationID, plan.cacheKey, plan.cacheTTL.Milliseconds(), who.TenantID)
	}
	return w, nil
}

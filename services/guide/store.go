package guide

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// scanWith reads each row of pgx.CollectRows with scan.
func scanWith[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(row pgx.CollectableRow) (T, error) { return scan(row) }
}

// owner scopes every query: a tenant and one of its users.
type owner struct {
	tenant, user string
}

// Session states as stored.
const (
	stateCreated   = "created"
	stateActive    = "active"
	stateSuspended = "suspended"
	stateCompleted = "completed"
	stateFailed    = "failed"
)

// Message authors other than agents.
const (
	authorUser  = "user"
	authorGuide = "guide"
)

type session struct {
	ID             string
	TenantID       string
	UserID         string
	DisplayName    string
	State          string
	Metadata       map[string]string
	Summary        string
	FailureReason  string
	CreateTime     time.Time
	UpdateTime     time.Time
	ActivateTime   *time.Time
	SuspendTime    *time.Time
	CompleteTime   *time.Time
	FailTime       *time.Time
	LastActiveTime time.Time
	Config         sessionConfig
	Transitions    []transitionRecord
	// Repository is the registered repository the session works on
	// ("repositories/{id}"), "" for none.
	Repository string
}

// sessionConfig holds a session's limits; zero fields take the defaults.
type sessionConfig struct {
	MaxConcurrentTasks int32
	MaxEngineers       int32
	TaskTimeout        time.Duration
	SessionTimeout     time.Duration
	AutoSuspendAfter   time.Duration
	GitIsolation       bool
	AutoApproveTrivial bool
	AllowPush          bool
	ReviewPersona      string
}

// transitionRecord is one lifecycle change, kept on the session.
type transitionRecord struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Time   time.Time `json:"time"`
	Reason string    `json:"reason,omitempty"`
}

const sessionColumns = `id, tenant_id, user_id, display_name, state, metadata, summary, failure_reason,
	create_time, update_time, activate_time, suspend_time, complete_time, fail_time, last_active_time,
	max_concurrent_tasks, max_engineers, task_timeout_ms, session_timeout_ms, auto_suspend_after_ms,
	enable_git_isolation, transitions, repository, auto_approve_trivial, allow_push, review_persona`

func scanSession(row pgx.Row) (session, error) {
	var s session
	var taskMS, sessionMS, idleMS int64
	err := row.Scan(&s.ID, &s.TenantID, &s.UserID, &s.DisplayName, &s.State, &s.Metadata, &s.Summary,
		&s.FailureReason, &s.CreateTime, &s.UpdateTime, &s.ActivateTime, &s.SuspendTime, &s.CompleteTime,
		&s.FailTime, &s.LastActiveTime, &s.Config.MaxConcurrentTasks, &s.Config.MaxEngineers, &taskMS, &sessionMS,
		&idleMS, &s.Config.GitIsolation, &s.Transitions, &s.Repository, &s.Config.AutoApproveTrivial, &s.Config.AllowPush,
		&s.Config.ReviewPersona)
	s.Config.TaskTimeout = time.Duration(taskMS) * time.Millisecond
	s.Config.SessionTimeout = time.Duration(sessionMS) * time.Millisecond
	s.Config.AutoSuspendAfter = time.Duration(idleMS) * time.Millisecond
	return s, err
}

// message is a stored message; user messages also carry their outcome.
type message struct {
	ID            string
	SessionID     string
	Author        string
	Text          string
	CorrelationID string
	RequestID     *string
	CreateTime    time.Time

	Route         outcomeRoute
	IntentSubject string
	Reply         string
	ReplyID       *string
	Options       []string
	EnvelopeID    *string
	// Undispatched: the message's outbox row is still there (what it
	// publishes may not all be on the bus). Read by messageByRequest and the
	// outbox relay only.
	Undispatched bool
	// Envelope is the routed envelope as published (protobuf), stored with
	// the message so that a retried request publishes exactly the same one.
	// Only messageByRequest reads it back.
	Envelope []byte

	// Not stored: what routing adds for the envelope and events.
	Repository      string // the session's, which the envelope names
	Constraints     []string
	Criteria        []string
	RouteText       string // the text routed, when not Text (commands)
	ClarificationID string
	ClarifyReason   string                     // why the user is asked ("low_confidence", "validation:scope")
	CachedAnswer    *messagev1.AgentAnswer     // the answer the route cache holds
	AnswerTo        *clarificationRow          // the agent's question this answers
	PreRoute        *messagev1.PreRouteContext // pre-routing consultation (spec A-30)
}

// outcomeRoute is how a user message was handled.
type outcomeRoute struct {
	Target, Tier, IntentType, Reason string
	Confidence                       float64
	KnowledgeIntent, TimeScope       string
	Cached                           bool
}

// messageColumns are the columns messageDest scans, from the messages
// table. A reply that is a message of its own (reply_id) is stored once, as
// that message's text, and read from there.
const messageColumns = `messages.id, messages.session_id, messages.author, messages.text, messages.correlation_id,
	messages.request_id, messages.create_time, messages.route_target, messages.route_tier, messages.route_confidence,
	messages.route_intent_type, messages.route_reason, messages.intent_subject,
	coalesce((SELECT r.text FROM messages r WHERE r.id = messages.reply_id AND r.tenant_id = messages.tenant_id), messages.reply),
	messages.reply_id, messages.options, messages.envelope_id`

func scanMessage(row pgx.Row) (message, error) {
	var m message
	err := row.Scan(messageDest(&m)...)
	return m, err
}

// messageDest is where messageColumns scan to.
func messageDest(m *message) []any {
	return []any{&m.ID, &m.SessionID, &m.Author, &m.Text, &m.CorrelationID, &m.RequestID, &m.CreateTime,
		&m.Route.Target, &m.Route.Tier, &m.Route.Confidence, &m.Route.IntentType, &m.Route.Reason,
		&m.IntentSubject, &m.Reply, &m.ReplyID, &m.Options, &m.EnvelopeID}
}

func createSession(ctx context.Context, q querier, s session) error {
	_, err := q.Exec(ctx, `INSERT INTO sessions (`+sessionColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22,
			$23, $24, $25, $26)`,
		s.ID, s.TenantID, s.UserID, s.DisplayName, s.State, s.Metadata, s.Summary, s.FailureReason,
		s.CreateTime, s.UpdateTime, s.ActivateTime, s.SuspendTime, s.CompleteTime, s.FailTime, s.LastActiveTime,
		s.Config.MaxConcurrentTasks, s.Config.MaxEngineers, s.Config.TaskTimeout.Milliseconds(),
		s.Config.SessionTimeout.Milliseconds(), s.Config.AutoSuspendAfter.Milliseconds(), s.Config.GitIsolation,
		nonNilTransitions(s.Transitions), s.Repository, s.Config.AutoApproveTrivial, s.Config.AllowPush, s.Config.ReviewPersona)
	if err != nil {
		return fmt.Errorf("insert session %s: %w", s.ID, err)
	}
	return nil
}

func getSession(ctx context.Context, q querier, o owner, id string, forUpdate bool) (session, error) {
	sql := `SELECT ` + sessionColumns + ` FROM sessions WHERE tenant_id = $1 AND user_id = $2 AND id = $3`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	s, err := scanSession(q.QueryRow(ctx, sql, o.tenant, o.user, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return session{}, sessionNotFound(id)
	}
	if err != nil {
		return session{}, fmt.Errorf("load session %s: %w", id, err)
	}
	return s, nil
}

// sessionCursor is a keyset position in a newest-first session listing.
type sessionCursor struct {
	CreateTime time.Time
	ID         string
}

func listSessions(ctx context.Context, q querier, o owner, state string, after *sessionCursor, limit int) ([]session, error) {
	args := []any{o.tenant, o.user, limit}
	sql := `SELECT ` + sessionColumns + ` FROM sessions WHERE tenant_id = $1 AND user_id = $2`
	if state != "" {
		args = append(args, state)
		sql += fmt.Sprintf(` AND state = $%d`, len(args))
	}
	if after != nil {
		args = append(args, after.CreateTime, after.ID)
		sql += fmt.Sprintf(` AND (create_time, id) < ($%d, $%d::uuid)`, len(args)-1, len(args))
	}
	sql += ` ORDER BY create_time DESC, id DESC LIMIT $3`
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanWith(scanSession))
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// updateSessionState writes the lifecycle fields of s.
func updateSessionState(ctx context.Context, q querier, s session) error {
	_, err := q.Exec(ctx, `UPDATE sessions SET state = $4, update_time = $5, activate_time = $6,
		suspend_time = $7, complete_time = $8, fail_time = $9, summary = $10, failure_reason = $11,
		transitions = $12, last_active_time = $13
		WHERE tenant_id = $1 AND user_id = $2 AND id = $3`,
		s.TenantID, s.UserID, s.ID, s.State, s.UpdateTime, s.ActivateTime, s.SuspendTime, s.CompleteTime,
		s.FailTime, s.Summary, s.FailureReason, nonNilTransitions(s.Transitions), s.LastActiveTime)
	if err != nil {
		return fmt.Errorf("update session %s: %w", s.ID, err)
	}
	return nil
}

// updateSessionFields writes what UpdateSession changes of s: its display
// name, repository and configuration.
func updateSessionFields(ctx context.Context, q querier, s session) error {
	_, err := q.Exec(ctx, `UPDATE sessions SET display_name = $4, repository = $5, update_time = $6,
		max_concurrent_tasks = $7, max_engineers = $8, task_timeout_ms = $9, session_timeout_ms = $10,
		auto_suspend_after_ms = $11, enable_git_isolation = $12, auto_approve_trivial = $13, allow_push = $14,
		review_persona = $15
		WHERE tenant_id = $1 AND user_id = $2 AND id = $3`,
		s.TenantID, s.UserID, s.ID, s.DisplayName, s.Repository, s.UpdateTime,
		s.Config.MaxConcurrentTasks, s.Config.MaxEngineers, s.Config.TaskTimeout.Milliseconds(),
		s.Config.SessionTimeout.Milliseconds(), s.Config.AutoSuspendAfter.Milliseconds(), s.Config.GitIsolation,
		s.Config.AutoApproveTrivial, s.Config.AllowPush, s.Config.ReviewPersona)
	if err != nil {
		return fmt.Errorf("update session %s: %w", s.ID, err)
	}
	return nil
}

func messageByRequest(ctx context.Context, q querier, o owner, sessionID, requestID string) (message, bool, error) {
	var m message
	err := q.QueryRow(ctx, `SELECT `+messageColumns+`, envelope,
			EXISTS (SELECT 1 FROM outbox WHERE outbox.message_id = messages.id) FROM messages
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 AND request_id = $4`,
		o.tenant, o.user, sessionID, requestID).Scan(append(messageDest(&m), &m.Envelope, &m.Undispatched)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return message{}, false, nil
	}
	if err != nil {
		return message{}, false, fmt.Errorf("load message by request id: %w", err)
	}
	return m, true, nil
}

// messageCursor is a keyset position in an oldest-first message listing.
type messageCursor struct {
	CreateTime time.Time
	ID         string
}

func listMessages(ctx context.Context, q querier, o owner, sessionID string, after *messageCursor, limit int) ([]message, error) {
	args := []any{o.tenant, o.user, sessionID, limit}
	sql := `SELECT ` + messageColumns + ` FROM messages WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3`
	if after != nil {
		args = append(args, after.CreateTime, after.ID)
		sql += ` AND (create_time, id) > ($5, $6::uuid)`
	}
	sql += ` ORDER BY create_time, id LIMIT $4`
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanWith(scanMessage))
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	return out, nil
}

// countMessages counts a session's messages by author.
func countMessages(ctx context.Context, q querier, o owner, sessionID string) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT author, count(*) FROM messages
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 GROUP BY author`, o.tenant, o.user, sessionID)
	if err != nil {
		return nil, fmt.Errorf("count messages: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var author string
		var n int
		if err := rows.Scan(&author, &n); err != nil {
			return nil, fmt.Errorf("count messages: %w", err)
		}
		out[author] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count messages: %w", err)
	}
	return out, nil
}

func nonNilTransitions(t []transitionRecord) []transitionRecord {
	if t == nil {
		return []transitionRecord{}
	}
	return t
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

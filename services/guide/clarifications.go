package guide

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
)

// clarificationRow is a question waiting for the user's answer.
type clarificationRow struct {
	ID              string
	TenantID        string
	UserID          string
	SessionID       string
	CorrelationID   string
	RequestingAgent string
	Question        string
	Options         []string
	Context         string
	Original        string
	CreateTime      time.Time
	Answer          *string
}

const clarificationColumns = `id, tenant_id, user_id, session_id, correlation_id, requesting_agent, question, options,
	context, original, create_time, answer`

func scanClarification(row pgx.Row) (clarificationRow, error) {
	var c clarificationRow
	err := row.Scan(&c.ID, &c.TenantID, &c.UserID, &c.SessionID, &c.CorrelationID, &c.RequestingAgent, &c.Question,
		&c.Options, &c.Context, &c.Original, &c.CreateTime, &c.Answer)
	return c, err
}

func clarificationName(sessionID, id string) string {
	return sessionsCollection + sessionID + "/clarifications/" + id
}

func (c clarificationRow) pending() *guidev1.PendingClarification {
	return &guidev1.PendingClarification{
		Name:            clarificationName(c.SessionID, c.ID),
		Question:        c.Question,
		Options:         c.Options,
		Context:         c.Context,
		RequestingAgent: c.RequestingAgent,
		CorrelationId:   c.CorrelationID,
		CreateTime:      timestamppb.New(c.CreateTime),
	}
}

func (c clarificationRow) proto() *guidev1.Clarification {
	return &guidev1.Clarification{
		Name:            clarificationName(c.SessionID, c.ID),
		Question:        c.Question,
		Options:         c.Options,
		Context:         c.Context,
		RequestingAgent: c.RequestingAgent,
		CorrelationId:   c.CorrelationID,
		CreateTime:      timestamppb.New(c.CreateTime),
	}
}

// insertClarification is the write that stores the question c; asked
// again (a redelivery), it stores nothing more.
func insertClarification(c clarificationRow) stmt {
	return stmt{sql: `INSERT INTO clarifications (id, tenant_id, user_id, session_id, correlation_id,
		requesting_agent, question, options, context, original, create_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING`,
		args: []any{c.ID, c.TenantID, c.UserID, c.SessionID, c.CorrelationID, c.RequestingAgent, c.Question, nonNil(c.Options),
			c.Context, c.Original, c.CreateTime}}
}

// askQuestion runs insertClarification on q now.
func askQuestion(ctx context.Context, q querier, c clarificationRow) error {
	if _, err := insertClarification(c).exec(ctx, q); err != nil {
		return fmt.Errorf("insert clarification: %w", err)
	}
	return nil
}

// pendingClarifications lists a session's unanswered questions asked after
// cutoff (older ones have expired).
func pendingClarifications(ctx context.Context, q querier, tenant, sessionID string, cutoff any) ([]clarificationRow, error) {
	rows, err := q.Query(ctx, `SELECT `+clarificationColumns+` FROM clarifications
		WHERE tenant_id = $1 AND session_id = $2 AND answer_time IS NULL AND create_time > $3 ORDER BY create_time, id`,
		tenant, sessionID, cutoff)
	if err != nil {
		return nil, fmt.Errorf("list clarifications: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanWith(scanClarification))
	if err != nil {
		return nil, fmt.Errorf("list clarifications: %w", err)
	}
	return out, nil
}

// takeClarification marks a pending clarification answered and returns it.
func takeClarification(ctx context.Context, q querier, o owner, sessionID, id, answer string, at time.Time) (clarificationRow, error) {
	c, err := scanClarification(q.QueryRow(ctx, `UPDATE clarifications SET answer = $5, answer_time = $6
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 AND id = $4 AND answer_time IS NULL
		RETURNING `+clarificationColumns, o.tenant, o.user, sessionID, id, answer, at))
	if errors.Is(err, pgx.ErrNoRows) {
		return clarificationRow{}, apierr.NotFound("pending clarification", clarificationName(sessionID, id))
	}
	if err != nil {
		return clarificationRow{}, fmt.Errorf("answer clarification %s: %w", id, err)
	}
	return c, nil
}

// openClarification reads one of the owner's unanswered clarifications.
// An expired one (asked before cutoff) is not found.
func openClarification(ctx context.Context, q querier, o owner, sessionID, id string, cutoff any) (clarificationRow, error) {
	c, err := scanClarification(q.QueryRow(ctx, `SELECT `+clarificationColumns+` FROM clarifications
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 AND id = $4 AND answer_time IS NULL AND create_time > $5`,
		o.tenant, o.user, sessionID, id, cutoff))
	if errors.Is(err, pgx.ErrNoRows) {
		return clarificationRow{}, apierr.NotFound("pending clarification", clarificationName(sessionID, id))
	}
	if err != nil {
		return clarificationRow{}, fmt.Errorf("read clarification %s: %w", id, err)
	}
	return c, nil
}

// ListClarifications returns a session's unanswered questions.
func (s *Service) ListClarifications(ctx context.Context, req *guidev1.ListClarificationsRequest) (*guidev1.ListClarificationsResponse, error) {
	sess, err := s.ownSession(ctx, req.GetParent())
	if err != nil {
		return nil, err
	}
	rows, err := pendingClarifications(ctx, s.db, sess.TenantID, sess.ID, s.clarificationCutoff())
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list clarifications", err)
	}
	resp := &guidev1.ListClarificationsResponse{}
	for _, c := range rows {
		resp.Clarifications = append(resp.Clarifications, c.proto())
	}
	return resp, nil
}

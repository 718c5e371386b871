package guide

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

// States of a pending request.
const (
	statePending   = "pending"
	stateFrozen    = "suspended" // the session is suspended; the deadline is on hold
	stateAnswered  = "answered"
	stateTimedOut  = "timed_out"
	stateEscalated = "escalated" // handed to the user (reroute limit)
	stateClosed    = "closed"    // the session finished
)

// pendingRequest is a routed request waiting for its response.
type pendingRequest struct {
	CorrelationID  string
	TenantID       string
	UserID         string
	SessionID      string
	MessageID      *string
	Target         string
	IntentType     string
	Original       string
	Envelope       []byte
	Deadline       time.Time
	Clarifications int
	CreateTime     time.Time
	State          string
}

const pendingColumns = `correlation_id, tenant_id, user_id, session_id, message_id, target, intent_type, original,
	envelope, deadline, clarifications, create_time, state`

func scanPending(row pgx.Row) (pendingRequest, error) {
	var p pendingRequest
	err := row.Scan(&p.CorrelationID, &p.TenantID, &p.UserID, &p.SessionID, &p.MessageID, &p.Target, &p.IntentType,
		&p.Original, &p.Envelope, &p.Deadline, &p.Clarifications, &p.CreateTime, &p.State)
	return p, err
}

func (p pendingRequest) proto() *guidev1.PendingRequest {
	out := &guidev1.PendingRequest{
		CorrelationId: p.CorrelationID,
		Target:        p.Target,
		Deadline:      timestamppb.New(p.Deadline),
	}
	if p.MessageID != nil {
		out.Message = messageName(p.SessionID, *p.MessageID)
	}
	return out
}

// insertPending is the write that tracks p. A request sent again updates
// its own row; an id held by another session or tenant fails the statement
// (on the server, so that a group commit's member fails too; fail_check,
// migration guide/0008).
func insertPending(p pendingRequest) stmt {
	return stmt{sql: `INSERT INTO pending_requests (` + pendingColumns + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		ON CONFLICT (correlation_id) DO UPDATE SET target = EXCLUDED.target, envelope = EXCLUDED.envelope,
			deadline = EXCLUDED.deadline, state = EXCLUDED.state,
			tenant_id = CASE WHEN pending_requests.tenant_id = EXCLUDED.tenant_id AND pending_requests.session_id = EXCLUDED.session_id
				THEN pending_requests.tenant_id
				WHEN fail_check('correlation id ' || EXCLUDED.correlation_id || ' belongs to another session') THEN NULL END`,
		args: []any{p.CorrelationID, p.TenantID, p.UserID, p.SessionID, p.MessageID, p.Target, p.IntentType, p.Original,
			p.Envelope, p.Deadline, p.Clarifications, p.CreateTime, p.State}}
}

// trackPending runs insertPending on q now.
func trackPending(ctx context.Context, q querier, p pendingRequest) error {
	if _, err := insertPending(p).exec(ctx, q); err != nil {
		return fmt.Errorf("insert pending request %s: %w", p.CorrelationID, err)
	}
	return nil
}

// getPending loads a pending request by correlation id within a tenant.
func getPending(ctx context.Context, q querier, tenant, correlationID string, forUpdate bool) (pendingRequest, bool, error) {
	sql := `SELECT ` + pendingColumns + ` FROM pending_requests WHERE tenant_id = $1 AND correlation_id = $2`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	p, err := scanPending(q.QueryRow(ctx, sql, tenant, correlationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return pendingRequest{}, false, nil
	}
	if err != nil {
		return pendingRequest{}, false, fmt.Errorf("load pending request %s: %w", correlationID, err)
	}
	return p, true, nil
}

func pendingRequests(ctx context.Context, q querier, tenant, sessionID, state string) ([]pendingRequest, error) {
	rows, err := q.Query(ctx, `SELECT `+pendingColumns+` FROM pending_requests
		WHERE tenant_id = $1 AND session_id = $2 AND state = $3 ORDER BY create_time, correlation_id`, tenant, sessionID, state)
	if err != nil {
		return nil, fmt.Errorf("list pending requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanWith(scanPending))
	if err != nil {
		return nil, fmt.Errorf("list pending requests: %w", err)
	}
	return out, nil
}

func setPendingState(ctx context.Context, q querier, tenant, correlationID, from, to string) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE pending_requests SET state = $4 WHERE tenant_id = $1 AND correlation_id = $2 AND state = $3`,
		tenant, correlationID, from, to)
	if err != nil {
		return false, fmt.Errorf("update pending request %s: %w", correlationID, err)
	}
	return tag.RowsAffected() == 1, nil
}

package architect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// owner scopes every query: a tenant and one of its users.
type owner struct{ tenant, user string }

// Plan states as stored.
const (
	stateAwaitingApproval = "awaiting_approval"
	stateApproved         = "approved"
	stateRejected         = "rejected"
)

// plan is a plan with its current version.
type plan struct {
	ID              string
	TenantID        string
	UserID          string
	SessionID       string
	State           string
	Version         int32
	Run             string
	RejectReason    string
	SourceMessageID *string
	CorrelationID   string
	CreateTime      time.Time
	UpdateTime      time.Time
	ApproveTime     *time.Time
	RejectTime      *time.Time

	// Repository is the session's when the plan was drafted
	// ("repositories/{id}"), or "".
	Repository   string
	Consultation *architectv1.PlanConsultation // nil for plans stored before consultations were
	Trivial      bool
	AutoApproved bool

	// The current version's content.
	Request  string
	Title    string
	Planner  string
	DAG      *orchestratorv1.Dag
	Intent   *architectv1.PlanIntent // nil for plans stored before intents were
	Feedback string
	Diff     string
	Notes    []string
}

const planColumns = `p.id, p.tenant_id, p.user_id, p.session_id, p.state, p.version, p.run, p.reject_reason,
	p.source_message_id, p.correlation_id, p.create_time, p.update_time, p.approve_time, p.reject_time,
	p.repository, p.consultation, p.trivial, p.auto_approved,
	v.request, v.title, v.planner, v.dag, v.intent, v.feedback, v.diff, v.notes`

const planFrom = ` FROM plans p JOIN plan_versions v
	ON v.plan_id = p.id AND v.version = p.version AND v.tenant_id = p.tenant_id`

var protoJSON = protojson.MarshalOptions{}

// protoDecode tolerates fields added to the stored messages later.
var protoDecode = protojson.UnmarshalOptions{DiscardUnknown: true}

func scanPlan(row pgx.Row) (plan, error) {
	var p plan
	var raw, intent, consultation []byte
	err := row.Scan(&p.ID, &p.TenantID, &p.UserID, &p.SessionID, &p.State, &p.Version, &p.Run, &p.RejectReason,
		&p.SourceMessageID, &p.CorrelationID, &p.CreateTime, &p.UpdateTime, &p.ApproveTime, &p.RejectTime,
		&p.Repository, &consultation, &p.Trivial, &p.AutoApproved,
		&p.Request, &p.Title, &p.Planner, &raw, &intent, &p.Feedback, &p.Diff, &p.Notes)
	if err != nil {
		return plan{}, err
	}
	p.DAG = &orchestratorv1.Dag{}
	if err := protoDecode.Unmarshal(raw, p.DAG); err != nil {
		return plan{}, fmt.Errorf("decode dag of plan %s: %w", p.ID, err)
	}
	if p.Intent, err = decodeOptional[architectv1.PlanIntent](intent); err != nil {
		return plan{}, fmt.Errorf("decode intent of plan %s: %w", p.ID, err)
	}
	if p.Consultation, err = decodeOptional[architectv1.PlanConsultation](consultation); err != nil {
		return plan{}, fmt.Errorf("decode consultation of plan %s: %w", p.ID, err)
	}
	return p, nil
}

// decodeOptional decodes a nullable protobuf JSON column (nil for NULL).
func decodeOptional[M any, P interface {
	*M
	proto.Message
}](raw []byte) (*M, error) {
	if raw == nil {
		return nil, nil
	}
	m := P(new(M))
	if err := protoDecode.Unmarshal(raw, m); err != nil {
		return nil, err
	}
	return m, nil
}

// encodeOptional encodes m for a nullable protobuf JSON column (NULL for
// a nil message).
func encodeOptional(m proto.Message) ([]byte, error) {
	if !m.ProtoReflect().IsValid() {
		return nil, nil
	}
	return protoJSON.Marshal(m)
}

// insertPlan stores a new plan and its first version. It reports
// errDuplicateSource when a plan was drafted from the same message already.
func insertPlan(ctx context.Context, tx pgx.Tx, p plan) error {
	consultation, err := encodeOptional(p.Consultation)
	if err != nil {
		return fmt.Errorf("encode consultation: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO plans (id, tenant_id, user_id, session_id, state, version, run,
		reject_reason, source_message_id, correlation_id, create_time, update_time, repository, consultation, trivial)
		VALUES ($1, $2, $3, $4, $5, $6, '', '', $7, $8, $9, $9, $10, $11, $12)
		ON CONFLICT (tenant_id, source_message_id) WHERE source_message_id IS NOT NULL DO NOTHING`,
		p.ID, p.TenantID, p.UserID, p.SessionID, p.State, p.Version, p.SourceMessageID, p.CorrelationID, p.CreateTime,
		p.Repository, consultation, p.Trivial)
	if err != nil {
		return fmt.Errorf("insert plan %s: %w", p.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return errDuplicateSource
	}
	return insertVersion(ctx, tx, p, p.CreateTime)
}

// insertVersion stores p's current version (p.Version and its content).
func insertVersion(ctx context.Context, q querier, p plan, at time.Time) error {
	raw, err := protoJSON.Marshal(p.DAG)
	if err != nil {
		return fmt.Errorf("encode dag: %w", err)
	}
	intent, err := encodeOptional(p.Intent)
	if err != nil {
		return fmt.Errorf("encode intent: %w", err)
	}
	notes := p.Notes
	if notes == nil {
		notes = []string{}
	}
	_, err = q.Exec(ctx, `INSERT INTO plan_versions (plan_id, tenant_id, version, request, title, planner, dag, intent,
		feedback, diff, notes, create_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		p.ID, p.TenantID, p.Version, p.Request, p.Title, p.Planner, raw, intent, p.Feedback, p.Diff, notes, at)
	if err != nil {
		return fmt.Errorf("insert plan %s version %d: %w", p.ID, p.Version, err)
	}
	return nil
}

// planVersions returns every version of p, oldest first (p was read with
// its owner's scope already).
func planVersions(ctx context.Context, q querier, p plan) ([]*architectv1.PlanVersion, error) {
	rows, err := q.Query(ctx, `SELECT version, title, planner, dag, feedback, diff, create_time FROM plan_versions
		WHERE tenant_id = $1 AND plan_id = $2 ORDER BY version`, p.TenantID, p.ID)
	if err != nil {
		return nil, fmt.Errorf("list versions of plan %s: %w", p.ID, err)
	}
	defer rows.Close()
	var out []*architectv1.PlanVersion
	for rows.Next() {
		v := &architectv1.PlanVersion{Dag: &orchestratorv1.Dag{}}
		var raw []byte
		var at time.Time
		if err := rows.Scan(&v.Version, &v.Title, &v.Planner, &raw, &v.Feedback, &v.Diff, &at); err != nil {
			return nil, fmt.Errorf("list versions of plan %s: %w", p.ID, err)
		}
		if err := protoDecode.Unmarshal(raw, v.Dag); err != nil {
			return nil, fmt.Errorf("decode dag of plan %s version %d: %w", p.ID, v.Version, err)
		}
		v.CreateTime = timestamppb.New(at)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list versions of plan %s: %w", p.ID, err)
	}
	return out, nil
}

// setVersion points p's row at its new current version.
func setVersion(ctx context.Context, q querier, p plan) error {
	_, err := q.Exec(ctx, `UPDATE plans SET version = $3, update_time = $4 WHERE tenant_id = $1 AND id = $2`,
		p.TenantID, p.ID, p.Version, p.UpdateTime)
	if err != nil {
		return fmt.Errorf("update plan %s: %w", p.ID, err)
	}
	return nil
}

func getPlan(ctx context.Context, q querier, o owner, sessionID, id string) (plan, error) {
	return loadPlan(ctx, q, o, sessionID, id, "")
}

// getPlanForUpdate is getPlan, locking the plan's row until tx ends.
func getPlanForUpdate(ctx context.Context, tx pgx.Tx, o owner, sessionID, id string) (plan, error) {
	return loadPlan(ctx, tx, o, sessionID, id, " FOR UPDATE OF p")
}

func loadPlan(ctx context.Context, q querier, o owner, sessionID, id, lock string) (plan, error) {
	p, err := scanPlan(q.QueryRow(ctx, `SELECT `+planColumns+planFrom+`
		WHERE p.tenant_id = $1 AND p.user_id = $2 AND p.session_id = $3 AND p.id = $4`+lock,
		o.tenant, o.user, sessionID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return plan{}, planNotFound(planName(sessionID, id))
	}
	if err != nil {
		return plan{}, fmt.Errorf("load plan %s: %w", id, err)
	}
	return p, nil
}

func planBySource(ctx context.Context, q querier, tenant, sourceID string) (plan, error) {
	p, err := scanPlan(q.QueryRow(ctx, `SELECT `+planColumns+planFrom+`
		WHERE p.tenant_id = $1 AND p.source_message_id = $2`, tenant, sourceID))
	if err != nil {
		return plan{}, fmt.Errorf("load plan drafted from %s: %w", sourceID, err)
	}
	return p, nil
}

func listPlans(ctx context.Context, q querier, o owner, sessionID string, after *planCursor, limit int) ([]plan, error) {
	args := []any{o.tenant, o.user, sessionID, limit}
	sql := `SELECT ` + planColumns + planFrom + ` WHERE p.tenant_id = $1 AND p.user_id = $2 AND p.session_id = $3`
	if after != nil {
		args = append(args, after.CreateTime, after.ID)
		sql += ` AND (p.create_time, p.id) < ($5, $6::uuid)`
	}
	sql += ` ORDER BY p.create_time DESC, p.id DESC LIMIT $4`
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list plans: %w", err)
	}
	defer rows.Close()
	var out []plan
	for rows.Next() {
		p, err := scanPlan(rows)
		if err != nil {
			return nil, fmt.Errorf("list plans: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list plans: %w", err)
	}
	return out, nil
}

// decidePlan moves an awaiting plan to approved or rejected. It reports
// false when the plan was no longer awaiting approval.
func decidePlan(ctx context.Context, q querier, p plan) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE plans SET state = $5, run = $6, reject_reason = $7, update_time = $8,
		approve_time = $9, reject_time = $10, auto_approved = $11
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 AND id = $4 AND state = 'awaiting_approval'`,
		p.TenantID, p.UserID, p.SessionID, p.ID, p.State, p.Run, p.RejectReason, p.UpdateTime, p.ApproveTime, p.RejectTime,
		p.AutoApproved)
	if err != nil {
		return false, fmt.Errorf("update plan %s: %w", p.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Package usage stores the gate's usage records in PostgreSQL (schema
// "llm") and reports them grouped by provider, model, agent, session and
// period (B-17). Every query is scoped by tenant.
package usage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm"
)

// Store reads and writes usage records.
type Store struct{ db *pgxpool.Pool }

// New returns a store on a pool whose search path is the llm schema.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// Record stores one record; it implements gate.Recorder.
func (s *Store) Record(ctx context.Context, r llm.UsageRecord) error {
	at := r.At
	if at.IsZero() {
		at = time.Now()
	}
	_, err := s.db.Exec(ctx, `INSERT INTO usage_records (tenant_id, id, request_id, session_id, pipeline_id, task_id, agent_id, agent_type,
		provider, model, input_tokens, output_tokens, cost_usd, latency_ms, outcome, error_tier, created_at, user_id)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18)`,
		r.TenantID, uuid.New(), r.RequestID, r.SessionID, r.PipelineID, r.TaskID, r.AgentID, r.AgentType,
		r.Provider, r.Model, r.InputTokens, r.OutputTokens, r.CostUSD, r.Latency.Milliseconds(), r.Outcome, r.ErrorTier, at, r.UserID)
	if err != nil {
		return fmt.Errorf("insert usage record: %w", err)
	}
	return nil
}

// RecordBatch stores records in one round trip; it implements
// gate.BatchRecorder. Either all are stored or none.
func (s *Store) RecordBatch(ctx context.Context, rs []llm.UsageRecord) error {
	if len(rs) == 0 {
		return nil
	}
	rows := make([][]any, len(rs))
	now := time.Now()
	for i, r := range rs {
		at := r.At
		if at.IsZero() {
			at = now
		}
		rows[i] = []any{r.TenantID, uuid.New(), r.RequestID, r.SessionID, r.PipelineID, r.TaskID, r.AgentID, r.AgentType,
			r.Provider, r.Model, r.InputTokens, r.OutputTokens, r.CostUSD, r.Latency.Milliseconds(), r.Outcome, r.ErrorTier, at, r.UserID}
	}
	_, err := s.db.CopyFrom(ctx, pgx.Identifier{"usage_records"}, []string{"tenant_id", "id", "request_id", "session_id", "pipeline_id", "task_id",
		"agent_id", "agent_type", "provider", "model", "input_tokens", "output_tokens", "cost_usd", "latency_ms", "outcome", "error_tier", "created_at", "user_id"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("insert %d usage records: %w", len(rs), err)
	}
	return nil
}

// Dimensions a report may group by.
const (
	ByProvider = "provider"
	ByModel    = "model"
	ByAgent    = "agent"
	BySession  = "session"
	ByTask     = "task"
	ByUser     = "user"
	ByPeriod   = "period"
)

var columns = map[string]string{
	ByProvider: "provider",
	ByModel:    "model",
	ByAgent:    "agent_type",
	BySession:  "session_id",
	ByTask:     "task_id",
	ByUser:     "user_id",
}

// Periods for ByPeriod buckets.
var periods = map[string]bool{"hour": true, "day": true, "week": true, "month": true}

// ErrInvalid is wrapped by the apierr.Invalid error of a bad query.
var ErrInvalid = errors.New("invalid usage query")

// Query selects and groups records of one tenant.
type Query struct {
	Tenant string
	// GroupBy lists dimensions (provider, model, agent, session, task, period).
	GroupBy []string
	// Period is the bucket of ByPeriod: hour, day (default), week or month.
	Period     string
	Start, End time.Time
	SessionID  string
	Provider   string
	AgentType  string
	// UserID, when set, keeps the calls made for that user only.
	UserID string
	// Limit caps the rows (default 1000).
	Limit int
}

// Row is one group's totals.
type Row struct {
	Group        map[string]string
	Requests     int64
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
	AvgLatencyMs float64
}

// Report is a query's totals and groups.
type Report struct {
	Total Row
	Rows  []Row
}

// Report runs q.
func (s *Store) Report(ctx context.Context, q Query) (Report, error) {
	if q.Period == "" {
		q.Period = "day"
	}
	if !periods[q.Period] {
		return Report{}, apierr.Invalid("period", "want hour, day, week or month, not %q", q.Period).Wrap(ErrInvalid)
	}
	if q.Limit <= 0 || q.Limit > 10_000 {
		q.Limit = 1000
	}
	where := []string{"tenant_id = $1"}
	args := []any{q.Tenant}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if !q.Start.IsZero() {
		add("created_at >= $%d", q.Start)
	}
	if !q.End.IsZero() {
		add("created_at < $%d", q.End)
	}
	if q.SessionID != "" {
		add("session_id = $%d", q.SessionID)
	}
	if q.Provider != "" {
		add("provider = $%d", q.Provider)
	}
	if q.AgentType != "" {
		add("agent_type = $%d", q.AgentType)
	}
	if q.UserID != "" {
		add("user_id = $%d", q.UserID)
	}
	var sel, names []string
	seen := map[string]bool{}
	for _, g := range q.GroupBy {
		if seen[g] {
			continue
		}
		seen[g] = true
		if g == ByPeriod {
			sel = append(sel, fmt.Sprintf("to_char(date_trunc('%s', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')", q.Period))
		} else if c, ok := columns[g]; ok {
			sel = append(sel, c)
		} else {
			return Report{}, apierr.Invalid("group_by", "want provider, model, agent, session, task, user or period, not %q", g).Wrap(ErrInvalid)
		}
		names = append(names, g)
	}
	aggs := "count(*), coalesce(sum(input_tokens),0), coalesce(sum(output_tokens),0), coalesce(sum(cost_usd),0)::float8, coalesce(avg(latency_ms),0)::float8"
	cond := strings.Join(where, " AND ")
	var rep Report
	if err := s.db.QueryRow(ctx, "SELECT "+aggs+" FROM usage_records WHERE "+cond, args...).Scan(
		&rep.Total.Requests, &rep.Total.InputTokens, &rep.Total.OutputTokens, &rep.Total.CostUSD, &rep.Total.AvgLatencyMs); err != nil {
		return Report{}, fmt.Errorf("usage totals: %w", err)
	}
	if len(sel) == 0 {
		return rep, nil
	}
	groupCols := make([]string, len(sel))
	for i := range sel {
		groupCols[i] = fmt.Sprint(i + 1)
	}
	sql := fmt.Sprintf("SELECT %s, %s FROM usage_records WHERE %s GROUP BY %s ORDER BY %s LIMIT %d",
		strings.Join(sel, ", "), aggs, cond, strings.Join(groupCols, ", "), strings.Join(groupCols, ", "), q.Limit)
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return Report{}, fmt.Errorf("usage report: %w", err)
	}
	rep.Rows, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		keys := make([]string, len(names))
		dst := make([]any, 0, len(names)+5)
		for i := range keys {
			dst = append(dst, &keys[i])
		}
		var row Row
		dst = append(dst, &row.Requests, &row.InputTokens, &row.OutputTokens, &row.CostUSD, &row.AvgLatencyMs)
		if err := r.Scan(dst...); err != nil {
			return row, err
		}
		row.Group = map[string]string{}
		for i, n := range names {
			row.Group[n] = keys[i]
		}
		return row, nil
	})
	if err != nil {
		return Report{}, fmt.Errorf("usage report: %w", err)
	}
	return rep, nil
}

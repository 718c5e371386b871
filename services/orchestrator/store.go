package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// States as stored (the proto enum names without their prefix).
const (
	statePending    = "PENDING"
	stateRunning    = "RUNNING"
	stateDispatched = "DISPATCHED"
	stateSucceeded  = "SUCCEEDED"
	stateFailed     = "FAILED"
	stateSkipped    = "SKIPPED"
	stateCancelled  = "CANCELLED"
)

func terminalRun(state string) bool {
	return state == stateSucceeded || state == stateFailed || state == stateCancelled
}

// errNotFound is returned when a run does not exist in the tenant.
var errNotFound = errors.New("run not found")

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type runRow struct {
	TenantID       string
	ID             string
	UserID         string
	SessionID      string
	Plan           string
	RequestID      *string
	State          string
	MaxConcurrency int32
	DAG            []byte
	CreateTime     time.Time
	StartTime      *time.Time
	EndTime        *time.Time
}

const runColumns = `tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, dag, create_time, start_time, end_time`

// runColumnsNoDag reads every column but the DAG, for listings.
const runColumnsNoDag = `tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, ''::bytea, create_time, start_time, end_time`

func scanRun(row pgx.Row) (*runRow, error) {
	var r runRow
	err := row.Scan(&r.TenantID, &r.ID, &r.UserID, &r.SessionID, &r.Plan, &r.RequestID, &r.State,
		&r.MaxConcurrency, &r.DAG, &r.CreateTime, &r.StartTime, &r.EndTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func getRun(ctx context.Context, q querier, tenant, id string) (*runRow, error) {
	return scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE tenant_id = $1 AND id = $2`, tenant, id))
}

// lockRun reads the run and locks its row until the transaction ends: every
// decision about one run's nodes is taken under this lock, so replicas
// never dispatch the same node twice or overrun max_concurrency.
func lockRun(ctx context.Context, tx pgx.Tx, tenant, id string) (*runRow, error) {
	return scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenant, id))
}

// tryLockRun is lockRun that gives up (errNotFound) when another
// transaction holds the run.
func tryLockRun(ctx context.Context, tx pgx.Tx, tenant, id string) (*runRow, error) {
	return scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE tenant_id = $1 AND id = $2 FOR UPDATE SKIP LOCKED`, tenant, id))
}

func getRunByRequestID(ctx context.Context, q querier, tenant, requestID string) (*runRow, error) {
	return scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE tenant_id = $1 AND request_id = $2`, tenant, requestID))
}

func insertRun(ctx context.Context, tx pgx.Tx, r *runRow) error {
	return tx.QueryRow(ctx, `INSERT INTO runs (tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, dag)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING create_time`,
		r.TenantID, r.ID, r.UserID, r.SessionID, r.Plan, r.RequestID, r.State, r.MaxConcurrency, r.DAG).Scan(&r.CreateTime)
}

// newNode is a node row at creation.
type newNode struct {
	ID        string
	Position  int
	Layer     int
	Role      string
	DependsOn []string
}

func insertNodes(ctx context.Context, tx pgx.Tx, tenant, runID string, nodes []newNode) error {
	rows := make([][]any, len(nodes))
	for i, n := range nodes {
		deps := n.DependsOn
		if deps == nil {
			deps = []string{}
		}
		rows[i] = []any{tenant, runID, n.ID, n.Position, n.Layer, n.Role, deps, statePending}
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"nodes"},
		[]string{"tenant_id", "run_id", "node_id", "position", "layer", "role", "depends_on", "state"},
		pgx.CopyFromRows(rows))
	return err
}

// nodeRow is a node's full state.
type nodeRow struct {
	NodeID          string
	Position        int32
	Layer           int32
	Role            string
	DependsOn       []string
	State           string
	Attempt         int32
	ExitCode        int32
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	DurationUS      int64
	Error           string
	WorkerID        string
	StartTime       *time.Time
	EndTime         *time.Time
}

// listNodes returns a run's nodes in DAG order, with their outputs.
func listNodes(ctx context.Context, q querier, tenant, runID string) ([]nodeRow, error) {
	rows, err := q.Query(ctx, `SELECT node_id, position, layer, role, depends_on, state, attempt, exit_code, stdout, stderr,
			stdout_truncated, stderr_truncated, timed_out, duration_us, error, worker_id, start_time, end_time
		FROM nodes WHERE tenant_id = $1 AND run_id = $2 ORDER BY position`, tenant, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (nodeRow, error) {
		var n nodeRow
		err := row.Scan(&n.NodeID, &n.Position, &n.Layer, &n.Role, &n.DependsOn, &n.State, &n.Attempt, &n.ExitCode,
			&n.Stdout, &n.Stderr, &n.StdoutTruncated, &n.StderrTruncated, &n.TimedOut, &n.DurationUS, &n.Error,
			&n.WorkerID, &n.StartTime, &n.EndTime)
		return n, err
	})
}

// schedNode is what scheduling needs of a node (no outputs).
type schedNode struct {
	ID        string
	Role      string
	DependsOn []string
	State     string
	Attempt   int32
}

// listSchedNodes returns a run's nodes in topological order (layer, then
// DAG order), so that every node comes after its dependencies.
func listSchedNodes(ctx context.Context, q querier, tenant, runID string) ([]schedNode, error) {
	rows, err := q.Query(ctx, `SELECT node_id, role, depends_on, state, attempt
		FROM nodes WHERE tenant_id = $1 AND run_id = $2 ORDER BY layer, position`, tenant, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (schedNode, error) {
		var n schedNode
		err := row.Scan(&n.ID, &n.Role, &n.DependsOn, &n.State, &n.Attempt)
		return n, err
	})
}

func setNodesState(ctx context.Context, tx pgx.Tx, tenant, runID string, nodeIDs []string, from, to string) error {
	_, err := tx.Exec(ctx, `UPDATE nodes SET state = $5, end_time = now()
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND state = $4`, tenant, runID, nodeIDs, from, to)
	return err
}

// markDispatched moves PENDING nodes to DISPATCHED with a new attempt and
// returns their attempt numbers.
func markDispatched(ctx context.Context, tx pgx.Tx, tenant, runID string, nodeIDs []string) (map[string]int32, error) {
	rows, err := tx.Query(ctx, `UPDATE nodes SET state = 'DISPATCHED', attempt = attempt + 1, start_time = now(), end_time = NULL,
			exit_code = 0, stdout = '', stderr = '', stdout_truncated = false, stderr_truncated = false, timed_out = false,
			duration_us = 0, error = '', worker_id = ''
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND state = 'PENDING'
		RETURNING node_id, attempt`, tenant, runID, nodeIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int32, len(nodeIDs))
	var id string
	var attempt int32
	_, err = pgx.ForEachRow(rows, []any{&id, &attempt}, func() error {
		out[id] = attempt
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(nodeIDs) {
		return nil, fmt.Errorf("dispatch run %s: %d of %d nodes were pending", runID, len(out), len(nodeIDs))
	}
	return out, nil
}

// undoDispatch puts a node whose dispatch could not be published back to
// PENDING; its attempt number stays used, so the next dispatch gets a fresh
// message id.
func undoDispatch(ctx context.Context, q querier, tenant, runID, nodeID string, attempt int32) error {
	_, err := q.Exec(ctx, `UPDATE nodes SET state = 'PENDING', start_time = NULL
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3 AND state = 'DISPATCHED' AND attempt = $4`,
		tenant, runID, nodeID, attempt)
	return err
}

// stdouts returns the stdout of the given nodes.
func stdouts(ctx context.Context, q querier, tenant, runID string, nodeIDs []string) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT node_id, stdout FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3)`,
		tenant, runID, nodeIDs)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var id, stdout string
	_, err = pgx.ForEachRow(rows, []any{&id, &stdout}, func() error {
		out[id] = stdout
		return nil
	})
	return out, err
}

// nodeResult is a worker's report, as stored.
type nodeResult struct {
	State           string
	ExitCode        int32
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	Duration        time.Duration
	Error           string
	WorkerID        string
}

// recordResult stores a result for the node's current attempt. It reports
// false, and changes nothing, unless the node is DISPATCHED with that
// attempt: a redelivered or stale result is never applied twice.
func recordResult(ctx context.Context, tx pgx.Tx, tenant, runID, nodeID string, attempt int32, r nodeResult) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE nodes SET state = $5, exit_code = $6, stdout = $7, stderr = $8, stdout_truncated = $9,
			stderr_truncated = $10, timed_out = $11, duration_us = $12, error = $13, worker_id = $14, end_time = now()
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3 AND attempt = $4 AND state = 'DISPATCHED'`,
		tenant, runID, nodeID, attempt, r.State, r.ExitCode, r.Stdout, r.Stderr, r.StdoutTruncated, r.StderrTruncated,
		r.TimedOut, r.Duration.Microseconds(), r.Error, r.WorkerID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

func startRun(ctx context.Context, tx pgx.Tx, tenant, id string) error {
	_, err := tx.Exec(ctx, `UPDATE runs SET state = 'RUNNING', start_time = now() WHERE tenant_id = $1 AND id = $2`, tenant, id)
	return err
}

func finishRun(ctx context.Context, tx pgx.Tx, tenant, id, state string) error {
	_, err := tx.Exec(ctx, `UPDATE runs SET state = $3, end_time = now() WHERE tenant_id = $1 AND id = $2`, tenant, id, state)
	return err
}

// runKey names a run across tenants, for background work.
type runKey struct{ Tenant, ID string }

// activeRuns lists unfinished runs of every tenant, oldest first. Only the
// background loops use it; each run is then handled within its tenant.
func activeRuns(ctx context.Context, q querier, limit int) ([]runKey, error) {
	rows, err := q.Query(ctx, `SELECT tenant_id, id FROM runs WHERE state IN ('PENDING', 'RUNNING') ORDER BY create_time LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (runKey, error) {
		var k runKey
		err := row.Scan(&k.Tenant, &k.ID)
		return k, err
	})
}

// listRuns returns up to limit runs of a tenant, newest first, after the
// cursor when one is given, optionally within one session.
func listRuns(ctx context.Context, q querier, tenant, session string, after *pageCursor, limit int) ([]*runRow, error) {
	args := []any{tenant, session, limit}
	cond := ""
	if after != nil {
		args = append(args, after.CreateTime, after.ID)
		cond = ` AND (create_time, id) < ($4, $5)`
	}
	rows, err := q.Query(ctx, `SELECT `+runColumnsNoDag+` FROM runs
		WHERE tenant_id = $1 AND ($2 = '' OR session_id = $2)`+cond+`
		ORDER BY create_time DESC, id DESC LIMIT $3`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*runRow, error) { return scanRun(row) })
}

type pageCursor struct {
	CreateTime time.Time
	ID         string
}

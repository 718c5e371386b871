package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// newNode is a node row at creation.
type newNode struct {
	ID         string
	Position   int
	Layer      int
	Role       string
	DependsOn  []string
	Priority   int32
	MaxRetries int32
	BackoffMS  int64
	Spec       []byte
}

func insertNodes(ctx context.Context, tx pgx.Tx, tenant, runID string, nodes []newNode) error {
	rows := make([][]any, len(nodes))
	for i, n := range nodes {
		deps := n.DependsOn
		if deps == nil {
			deps = []string{}
		}
		rows[i] = []any{tenant, runID, n.ID, n.Position, n.Layer, n.Role, deps, statePending, n.Priority, n.MaxRetries, n.BackoffMS,
			int32(len(deps)), n.Spec}
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"nodes"},
		[]string{"tenant_id", "run_id", "node_id", "position", "layer", "role", "depends_on", "state", "priority", "max_retries", "backoff_ms",
			"unmet_deps", "spec"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return err
	}
	var edges [][]any
	for _, n := range nodes {
		for _, d := range n.DependsOn {
			edges = append(edges, []any{tenant, runID, d, n.ID})
		}
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"edges"}, []string{"tenant_id", "run_id", "node_id", "dependent_id"}, pgx.CopyFromRows(edges))
	return err
}

// nodeSpecs returns the submitted form of the given nodes; a node stored
// without one (before specs were kept) is missing from the map.
func nodeSpecs(ctx context.Context, q querier, tenant, runID string, nodeIDs []string) (map[string][]byte, error) {
	rows, err := q.Query(ctx, `SELECT node_id, spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND spec IS NOT NULL`,
		tenant, runID, nodeIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(nodeIDs))
	var id string
	var spec []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &spec}, func() error {
		out[id] = spec
		return nil
	})
	return out, err
}

// readyNodes returns up to limit nodes that can be dispatched now: pending,
// every dependency succeeded, not paused, not waiting for a retry; highest
// priority first, then in topological order.
func readyNodes(ctx context.Context, q querier, tenant, runID string, limit int) ([]schedNode, error) {
	rows, err := q.Query(ctx, `SELECT node_id, role, depends_on, state, attempt, priority, not_before, paused
		FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state = 'PENDING' AND unmet_deps = 0
			AND NOT paused AND (not_before IS NULL OR not_before <= now()) AND `+layerFrontSQL+`
		ORDER BY priority DESC, layer, position LIMIT $3`, tenant, runID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (schedNode, error) {
		var n schedNode
		err := row.Scan(&n.ID, &n.Role, &n.DependsOn, &n.State, &n.Attempt, &n.Priority, &n.NotBefore, &n.Paused)
		return n, err
	})
}

// layerFrontSQL holds a node of a layered run back until every node of the
// layers before its own ended (spec F-02: a layer runs once the one before
// it is done). A run without a given execution order is not layered: its
// nodes start as soon as their dependencies succeeded. $1 and $2 are the
// run's tenant and id.
const layerFrontSQL = `(NOT (SELECT layered FROM runs WHERE tenant_id = $1 AND id = $2)
		OR layer <= (SELECT min(layer) FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state IN ('PENDING', 'DISPATCHED')))`

// runCounts returns how many nodes are running and whether any node is
// still pending or running.
func runCounts(ctx context.Context, q querier, tenant, runID string) (dispatched int, open bool, err error) {
	err = q.QueryRow(ctx, runCountsSQL, tenant, runID).Scan(&dispatched, &open)
	return dispatched, open, err
}

// runCountsSQL looks for a PENDING node only when none is DISPATCHED (the
// usual case mid-run needs no second scan).
const runCountsSQL = `SELECT d.n, d.n > 0 OR EXISTS (SELECT 1 FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state = 'PENDING')
	FROM (SELECT count(*) AS n FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state = 'DISPATCHED') d`

// analyzeThreshold is the node count from which a new run refreshes the
// planner's statistics of the node tables.
const analyzeThreshold = 1000

func analyzeNodes(ctx context.Context, q querier) error {
	_, err := q.Exec(ctx, `ANALYZE nodes, edges`)
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
	NotBefore       *time.Time
	Paused          bool
	Patch           string
	Report          string
	Pipeline        string
	// Handoff is the node's last handoff (protojson PipelineHandoff), or
	// "", and Handoffs how many it had.
	Handoff  string
	Handoffs int32
	// OutputPartial: the node was cancelled while its command ran, and its
	// output is what the command printed until then.
	OutputPartial bool
}

// listNodes returns a run's nodes in DAG order, with their outputs.
func listNodes(ctx context.Context, q querier, tenant, runID string) ([]nodeRow, error) {
	rows, err := q.Query(ctx, `SELECT node_id, position, layer, role, depends_on, state, attempt, exit_code, stdout, stderr,
			stdout_truncated, stderr_truncated, timed_out, duration_us, error, worker_id, start_time, end_time, not_before, paused,
			patch, report, pipeline, coalesce(handoff, ''), handoffs, output_partial
		FROM nodes WHERE tenant_id = $1 AND run_id = $2 ORDER BY position`, tenant, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (nodeRow, error) {
		var n nodeRow
		err := row.Scan(&n.NodeID, &n.Position, &n.Layer, &n.Role, &n.DependsOn, &n.State, &n.Attempt, &n.ExitCode,
			&n.Stdout, &n.Stderr, &n.StdoutTruncated, &n.StderrTruncated, &n.TimedOut, &n.DurationUS, &n.Error,
			&n.WorkerID, &n.StartTime, &n.EndTime, &n.NotBefore, &n.Paused, &n.Patch, &n.Report, &n.Pipeline,
			&n.Handoff, &n.Handoffs, &n.OutputPartial)
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
	Priority  int32
	NotBefore *time.Time
	Paused    bool
	// UserReopened: a user ran this node or one upstream of it again, so
	// fail_fast does not cancel it (listSchedNodes only).
	UserReopened bool
	// Layer is the node's layer (listSchedNodes only).
	Layer int32
	// UserSkipped: the user went on without this SKIPPED node, so it counts
	// as met for its dependents (listSchedNodes only).
	UserSkipped bool
	// Spec is the submitted node when it was read with the node (else nil).
	Spec []byte
}

// listSchedNodes returns a run's nodes in topological order (layer, then
// DAG order), so that every node comes after its dependencies.
func listSchedNodes(ctx context.Context, q querier, tenant, runID string) ([]schedNode, error) {
	rows, err := q.Query(ctx, `SELECT node_id, role, depends_on, state, attempt, priority, not_before, paused, user_reopened, user_skipped, layer
		FROM nodes WHERE tenant_id = $1 AND run_id = $2 ORDER BY layer, position`, tenant, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (schedNode, error) {
		var n schedNode
		err := row.Scan(&n.ID, &n.Role, &n.DependsOn, &n.State, &n.Attempt, &n.Priority, &n.NotBefore, &n.Paused, &n.UserReopened, &n.UserSkipped, &n.Layer)
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
	rows, err := tx.Query(ctx, `UPDATE nodes SET state = 'DISPATCHED', attempt = attempt + 1, start_time = now(), end_time = NULL, not_before = NULL,
			exit_code = 0, stdout = '', stderr = '', stdout_truncated = false, stderr_truncated = false, timed_out = false, output_partial = false,
			duration_us = 0, error = '', worker_id = '', worker_received_time = NULL, worker_reported_time = NULL
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

package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// States as stored (the proto enum names without their prefix).
const (
	statePending    = "PENDING"
	stateRunning    = "RUNNING"
	statePaused     = "PAUSED"
	stateDispatched = "DISPATCHED"
	stateSucceeded  = "SUCCEEDED"
	stateFailed     = "FAILED"
	stateSkipped    = "SKIPPED"
	stateCancelled  = "CANCELLED"
	// stateHandedOff is reported, never stored on a node: the attempt
	// handed its pipeline's state to a fresh one (spec F-23), and the node
	// goes back to PENDING for it.
	stateHandedOff = "HANDED_OFF"
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
	TenantID  string
	ID        string
	UserID    string
	SessionID string
	Plan      string
	RequestID *string
	// RequestHash digests the request a request id was sent with.
	RequestHash    []byte
	State          string
	MaxConcurrency int32
	DAG            []byte
	CreateTime     time.Time
	StartTime      *time.Time
	EndTime        *time.Time
	FailFast       bool
	LeaseOwner     string
	Repository     string
	BaseCommit     string
	ResultPatch    string
	MergeConflicts []string
	DecisionLog    string
	Interactive    bool
	// SessionMaxTasks and SessionMaxEngineers bound the nodes (and the
	// engineer nodes) running at once across the session's runs; 0: none.
	SessionMaxTasks     int32
	SessionMaxEngineers int32
	// Layered: the DAG gave its execution order, which is kept as layers
	// (layerFrontSQL).
	Layered bool
}

const runColumns = `tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, dag, create_time, start_time, end_time, fail_fast, lease_owner,
	repository, base_commit, result_patch, merge_conflicts, '', interactive, session_max_tasks, session_max_engineers, layered`

// runColumnsNoDag reads every column but the DAG and the large texts, for
// listings and scheduling.
const runColumnsNoDag = `tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, ''::bytea, create_time, start_time, end_time, fail_fast, lease_owner,
	repository, base_commit, '', merge_conflicts, '', interactive, session_max_tasks, session_max_engineers, layered`

func scanRun(row pgx.Row) (*runRow, error) {
	var r runRow
	err := row.Scan(&r.TenantID, &r.ID, &r.UserID, &r.SessionID, &r.Plan, &r.RequestID, &r.State,
		&r.MaxConcurrency, &r.DAG, &r.CreateTime, &r.StartTime, &r.EndTime, &r.FailFast, &r.LeaseOwner,
		&r.Repository, &r.BaseCommit, &r.ResultPatch, &r.MergeConflicts, &r.DecisionLog, &r.Interactive,
		&r.SessionMaxTasks, &r.SessionMaxEngineers, &r.Layered)
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

// lockRun reads the run (without its DAG) and locks its row until the
// transaction ends: every decision about one run's nodes is taken under
// this lock, so replicas never dispatch the same node twice or overrun
// max_concurrency.
func lockRun(ctx context.Context, tx pgx.Tx, tenant, id string) (*runRow, error) {
	return scanRun(tx.QueryRow(ctx, lockRunSQL, tenant, id))
}

const lockRunSQL = `SELECT ` + runColumnsNoDag + ` FROM runs WHERE tenant_id = $1 AND id = $2 FOR UPDATE`

// tryLockRun is lockRun that gives up (errNotFound) when another
// transaction holds the run.
func tryLockRun(ctx context.Context, tx pgx.Tx, tenant, id string) (*runRow, error) {
	return scanRun(tx.QueryRow(ctx, `SELECT `+runColumnsNoDag+` FROM runs WHERE tenant_id = $1 AND id = $2 FOR UPDATE SKIP LOCKED`, tenant, id))
}

// runForRequest finds the run a user created with a request id, and the
// digest of that request (nil for runs stored before digests were).
func runForRequest(ctx context.Context, q querier, tenant, user, requestID string) (id string, hash []byte, err error) {
	err = q.QueryRow(ctx, `SELECT id, request_hash FROM runs WHERE tenant_id = $1 AND user_id = $2 AND request_id = $3`,
		tenant, user, requestID).Scan(&id, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, errNotFound
	}
	return id, hash, err
}

// insertRun stores a new run, leased to owner for ttl.
func insertRun(ctx context.Context, tx pgx.Tx, r *runRow, ttl time.Duration) error {
	return tx.QueryRow(ctx, `INSERT INTO runs (tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, dag,
			fail_fast, lease_owner, lease_expires, repository, base_commit, interactive, session_max_tasks, session_max_engineers, request_hash,
			layered)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now() + $12 * interval '1 microsecond', $13, $14, $15, $16, $17, $18, $19)
		RETURNING create_time`,
		r.TenantID, r.ID, r.UserID, r.SessionID, r.Plan, r.RequestID, r.State, r.MaxConcurrency, r.DAG,
		r.FailFast, r.LeaseOwner, ttl.Microseconds(), r.Repository, r.BaseCommit, r.Interactive,
		r.SessionMaxTasks, r.SessionMaxEngineers, r.RequestHash, r.Layered).Scan(&r.CreateTime)
}

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
	Patch           string
	Report          string
	Pipeline        string
	// Handoff is the protojson PipelineHandoff of a HANDED_OFF report.
	Handoff string
	// ReceivedAt and ReportedAt are when the worker received the dispatch
	// and reported the result, by its clock (nil from older workers).
	ReceivedAt, ReportedAt *time.Time
}

// reportedResult is one worker report for recordResults.
type reportedResult struct {
	NodeID  string
	Attempt int32
	Result  nodeResult
	// Section is added to the run's decision log when not empty.
	Section string
}

// recordedResult is how recordResults applied one report.
type recordedResult struct {
	NodeID  string
	Attempt int32
	State   string
	RetryAt *time.Time
}

// recordResults stores the reports of one run's nodes in one round trip.
// A failure with retries left (max_retries counts retries after the first
// attempt; handoffs do not count) puts the node back to PENDING until retryAt, the n-th retry
// waiting backoff * 2^(n-1), at most maxBackoff. A HANDED_OFF report puts it
// back to PENDING at once, keeping the handed state and patch for the next
// attempt (spec F-23). Each report applies only when its node is DISPATCHED with that
// attempt (so a redelivered or stale report changes nothing), succeeded
// nodes unblock their dependents (a dependent of two nodes succeeding
// together loses two unmet dependencies), and every applied report gets its
// history row and decision log section, in report order. It returns the
// applied reports only. Reports must name distinct (node, attempt) pairs.
func recordResults(ctx context.Context, tx pgx.Tx, tenant, runID string, rs []reportedResult) ([]recordedResult, error) {
	rows, err := tx.Query(ctx, recordResultsSQL, recordResultsArgs(tenant, runID, rs)...)
	if err != nil {
		return nil, err
	}
	return scanRecorded(rows)
}

func recordResultsArgs(tenant, runID string, rs []reportedResult) []any {
	n := len(rs)
	var (
		node, state, stdout, stderr, errs, worker, patch, report, pipeline, section, handoff = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n)
		attempt, exit          = make([]int32, n), make([]int32, n)
		outTrunc, errTrunc, to = make([]bool, n), make([]bool, n), make([]bool, n)
		dur                    = make([]int64, n)
		received, reported     = make([]*time.Time, n), make([]*time.Time, n)
	)
	for i, r := range rs {
		node[i], attempt[i], state[i], exit[i] = r.NodeID, r.Attempt, r.Result.State, r.Result.ExitCode
		stdout[i], stderr[i], outTrunc[i], errTrunc[i] = r.Result.Stdout, r.Result.Stderr, r.Result.StdoutTruncated, r.Result.StderrTruncated
		to[i], dur[i], errs[i], worker[i] = r.Result.TimedOut, r.Result.Duration.Microseconds(), r.Result.Error, r.Result.WorkerID
		patch[i], report[i], pipeline[i], section[i] = r.Result.Patch, r.Result.Report, r.Result.Pipeline, r.Section
		received[i], reported[i], handoff[i] = r.Result.ReceivedAt, r.Result.ReportedAt, r.Result.Handoff
	}
	return []any{tenant, runID, node, attempt, state, exit, stdout, stderr, outTrunc, errTrunc, to, dur, errs, worker, patch, report,
		pipeline, section, maxBackoff.Milliseconds(), received, reported, handoff}
}

func scanRecorded(rows pgx.Rows) ([]recordedResult, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (recordedResult, error) {
		var r recordedResult
		err := row.Scan(&r.NodeID, &r.Attempt, &r.State, &r.RetryAt)
		return r, err
	})
}

const recordResultsSQL = `WITH r AS (
			SELECT * FROM unnest($3::text[], $4::int4[], $5::text[], $6::int4[], $7::text[], $8::text[], $9::bool[], $10::bool[],
				$11::bool[], $12::int8[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
				$20::timestamptz[], $21::timestamptz[], $22::text[]) WITH ORDINALITY
				AS r(node_id, attempt, state, exit_code, stdout, stderr, stdout_truncated, stderr_truncated, timed_out, duration_us,
					error, worker_id, patch, report, pipeline, section, received, reported, handoff, ord)),
		upd AS (
			UPDATE nodes n SET
				state = CASE WHEN r.state = 'HANDED_OFF' THEN 'PENDING'
					WHEN r.state = 'FAILED' AND n.attempt - n.handoffs <= n.max_retries THEN 'PENDING' ELSE r.state END,
				not_before = CASE WHEN r.state = 'FAILED' AND n.attempt - n.handoffs <= n.max_retries
					THEN now() + least(n.backoff_ms * power(2, n.attempt - n.handoffs - 1), $19) * interval '1 millisecond' END,
				handoffs = n.handoffs + CASE WHEN r.state = 'HANDED_OFF' THEN 1 ELSE 0 END,
				handoff = CASE WHEN r.state = 'HANDED_OFF' THEN r.handoff ELSE n.handoff END,
				handoff_patch = CASE WHEN r.state = 'HANDED_OFF' THEN r.patch ELSE n.handoff_patch END,
				exit_code = r.exit_code, stdout = r.stdout, stderr = r.stderr, stdout_truncated = r.stdout_truncated,
				stderr_truncated = r.stderr_truncated, timed_out = r.timed_out, duration_us = r.duration_us, error = r.error,
				worker_id = r.worker_id, end_time = now(), patch = r.patch, report = r.report, pipeline = r.pipeline,
				worker_received_time = r.received, worker_reported_time = r.reported
			FROM r
			WHERE n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = r.node_id AND n.attempt = r.attempt AND n.state = 'DISPATCHED'
			RETURNING n.node_id, n.attempt, n.state, n.not_before, r.state AS reported, r.exit_code, r.timed_out, r.error,
				r.worker_id, r.duration_us, r.section, r.ord),
		unblocked AS (
			UPDATE nodes d SET unmet_deps = d.unmet_deps - c.met
			FROM (SELECT e.dependent_id, count(*) AS met FROM edges e
				WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.node_id = ANY (ARRAY(SELECT node_id FROM upd WHERE state = 'SUCCEEDED'))
				GROUP BY e.dependent_id) c
			WHERE d.tenant_id = $1 AND d.run_id = $2 AND d.node_id = c.dependent_id),
		history AS (
			INSERT INTO attempts (tenant_id, run_id, node_id, attempt, state, exit_code, timed_out, error, worker_id, duration_us, section)
			SELECT $1, $2, node_id, attempt, reported, exit_code, timed_out, error, worker_id, duration_us, section FROM upd ORDER BY ord
			ON CONFLICT DO NOTHING)
		SELECT node_id, attempt, state, not_before FROM upd ORDER BY ord`

// dispatchReady moves the nodes that can run now to DISPATCHED, at most
// the run's max_concurrency (and at most limit) less the nodes already
// running, highest priority first, then in
// topological order, and returns them in that order with their specs. It is
// markDispatched after readyNodes and runCounts, in one round trip.
func dispatchReady(ctx context.Context, tx pgx.Tx, tenant, runID string, limit int) ([]schedNode, error) {
	if _, err := tx.Exec(ctx, lockSessionSQL, tenant, runID); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, dispatchReadySQL, tenant, runID, limit)
	if err != nil {
		return nil, err
	}
	return scanDispatched(rows)
}

// dispatchReadySQL dispatches nothing unless the run is RUNNING; under
// fail_fast, once a node failed, it dispatches only the nodes a user ran
// again and those downstream of them. It stays within the run's session
// limits (lockSessionSQL must have run in the transaction first).
const dispatchReadySQL = `WITH ` + sessionRoomCTE + `,
		lim AS (
			SELECT least($3,
					r.max_concurrency - (SELECT count(*) FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state = 'DISPATCHED'),
					coalesce((SELECT tasks FROM room), 2147483647)) AS n,
				coalesce((SELECT engineers FROM room), 2147483647) AS engineers,
				r.fail_fast AND EXISTS (SELECT 1 FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state = 'FAILED') AS halted
			FROM runs r
			WHERE r.tenant_id = $1 AND r.id = $2 AND r.state = 'RUNNING'),
		cand AS (
			SELECT node_id, priority, layer, position, role = 'engineer' AS engineer,
				count(*) FILTER (WHERE role = 'engineer') OVER (ORDER BY priority DESC, layer, position) AS engineers
			FROM nodes
			WHERE tenant_id = $1 AND run_id = $2 AND state = 'PENDING' AND unmet_deps = 0
				AND NOT paused AND (not_before IS NULL OR not_before <= now())
				AND EXISTS (SELECT 1 FROM lim WHERE n > 0 AND (NOT halted OR user_reopened)) AND ` + layerFrontSQL + `
			ORDER BY priority DESC, layer, position
			-- Without an engineer limit, no more than can be dispatched.
			LIMIT (SELECT CASE WHEN engineers < 2147483647 THEN NULL ELSE greatest(n, 0) END FROM lim)),
		pick AS (
			SELECT c.node_id FROM cand c, lim
			WHERE NOT c.engineer OR c.engineers <= lim.engineers
			ORDER BY c.priority DESC, c.layer, c.position
			LIMIT (SELECT greatest(n, 0) FROM lim))
		UPDATE nodes SET state = 'DISPATCHED', attempt = attempt + 1, start_time = now(), end_time = NULL, not_before = NULL,
			exit_code = 0, stdout = '', stderr = '', stdout_truncated = false, stderr_truncated = false, timed_out = false, output_partial = false,
			duration_us = 0, error = '', worker_id = '', worker_received_time = NULL, worker_reported_time = NULL
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY (ARRAY(SELECT node_id FROM pick)) AND state = 'PENDING'
		RETURNING node_id, role, depends_on, state, attempt, priority, not_before, paused, spec, layer, position`

// sessionRoomCTE is the room left under a run's session limits (room:
// tasks, engineers; no row when the run has none), counted over the nodes
// running in every run of the session. The session lock must be held.
const sessionRoomCTE = `room AS (
			SELECT CASE WHEN r.session_max_tasks > 0 THEN r.session_max_tasks - c.tasks ELSE 2147483647 END AS tasks,
				CASE WHEN r.session_max_engineers > 0 THEN r.session_max_engineers - c.engineers ELSE 2147483647 END AS engineers
			FROM runs r, LATERAL (
				SELECT count(*) AS tasks, count(*) FILTER (WHERE n.role = 'engineer') AS engineers
				FROM runs o JOIN nodes n ON n.tenant_id = o.tenant_id AND n.run_id = o.id
				WHERE o.tenant_id = r.tenant_id AND o.session_id = r.session_id AND n.state = 'DISPATCHED') c
			WHERE r.tenant_id = $1 AND r.id = $2 AND r.session_id <> '' AND (r.session_max_tasks > 0 OR r.session_max_engineers > 0))`

// lockSessionSQL serialises the dispatches of a session with limits across
// its runs (each run's decisions already hold the run's lock, taken first).
const lockSessionSQL = `SELECT pg_advisory_xact_lock(hashtextextended('sylk.orchestrator.session/' || tenant_id || '/' || session_id, 0))
	FROM runs WHERE tenant_id = $1 AND id = $2 AND session_id <> '' AND (session_max_tasks > 0 OR session_max_engineers > 0)`

// sessionRoom locks the run's session and returns the room left under its
// limits; limited is false when the run has none.
func sessionRoom(ctx context.Context, tx pgx.Tx, tenant, runID string) (tasks, engineers int, limited bool, err error) {
	if _, err = tx.Exec(ctx, lockSessionSQL, tenant, runID); err != nil {
		return 0, 0, false, err
	}
	err = tx.QueryRow(ctx, `WITH `+sessionRoomCTE+` SELECT tasks, engineers FROM room`, tenant, runID).Scan(&tasks, &engineers)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	return tasks, engineers, err == nil, err
}

func scanDispatched(rows pgx.Rows) ([]schedNode, error) {
	type picked struct {
		n               schedNode
		layer, position int32
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (picked, error) {
		var p picked
		err := row.Scan(&p.n.ID, &p.n.Role, &p.n.DependsOn, &p.n.State, &p.n.Attempt, &p.n.Priority, &p.n.NotBefore, &p.n.Paused,
			&p.n.Spec, &p.layer, &p.position)
		return p, err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b picked) int {
		return cmp.Or(cmp.Compare(b.n.Priority, a.n.Priority), cmp.Compare(a.layer, b.layer), cmp.Compare(a.position, b.position))
	})
	nodes := make([]schedNode, len(out))
	for i, p := range out {
		nodes[i] = p.n
	}
	return nodes, nil
}

// maxBackoff caps a retry's delay.
const maxBackoff = 5 * time.Minute

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
	rows, err := q.Query(ctx, `SELECT tenant_id, id FROM runs WHERE state IN ('PENDING', 'RUNNING', 'PAUSED') ORDER BY create_time LIMIT $1`, limit)
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
// listRuns pages through a tenant's runs, those of one session when session
// is set, and those owner created when owner is set (see runOwner).
func listRuns(ctx context.Context, q querier, tenant, owner, session string, after *pageCursor, limit int) ([]*runRow, error) {
	args := []any{tenant, session, limit, owner}
	cond := ""
	if after != nil {
		args = append(args, after.CreateTime, after.ID)
		cond = ` AND (create_time, id) < ($5, $6)`
	}
	rows, err := q.Query(ctx, `SELECT `+runColumnsNoDag+` FROM runs
		WHERE tenant_id = $1 AND ($2 = '' OR session_id = $2) AND ($4 = '' OR user_id = $4)`+cond+`
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

// renewLeases extends the leases owner holds on unfinished runs.
func renewLeases(ctx context.Context, q querier, owner string, ttl time.Duration) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE runs SET lease_expires = now() + $2 * interval '1 microsecond'
		WHERE lease_owner = $1 AND state IN ('PENDING', 'RUNNING', 'PAUSED')`, owner, ttl.Microseconds())
	return tag.RowsAffected(), err
}

// claimExpired takes over up to limit unfinished runs whose lease expired
// (their owner stopped renewing: it crashed or lost the database), or that
// owner already holds (a restart under the same replica id), and returns
// them; own (at start) adds the runs owner already holds.
func claimExpired(ctx context.Context, q querier, owner string, ttl time.Duration, limit int, own bool) ([]runKey, error) {
	rows, err := q.Query(ctx, `UPDATE runs SET lease_owner = $1, lease_expires = now() + $2 * interval '1 microsecond'
		WHERE (tenant_id, id) IN (
			SELECT tenant_id, id FROM runs
			WHERE state IN ('PENDING', 'RUNNING', 'PAUSED')
				AND (lease_expires IS NULL OR lease_expires < now() OR ($4 AND lease_owner = $1))
			ORDER BY create_time LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING tenant_id, id`, owner, ttl.Microseconds(), limit, own)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (runKey, error) {
		var k runKey
		err := row.Scan(&k.Tenant, &k.ID)
		return k, err
	})
}

// sessionRuns lists the unfinished runs of a session.
func sessionRuns(ctx context.Context, q querier, tenant, owner, session string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM runs WHERE tenant_id = $1 AND session_id = $2 AND ($3 = '' OR user_id = $3)
		AND state IN ('PENDING', 'RUNNING', 'PAUSED') ORDER BY create_time`, tenant, session, owner)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// decisionLog assembles a run's decision log, oldest section first.
func decisionLog(ctx context.Context, q querier, tenant, runID string) (string, error) {
	var log *string
	err := q.QueryRow(ctx, `SELECT string_agg(section, '' ORDER BY seq) FROM attempts
		WHERE tenant_id = $1 AND run_id = $2 AND section <> ''`, tenant, runID).Scan(&log)
	if err != nil || log == nil {
		return "", err
	}
	return "# Implementation Log\n\n" + *log, nil
}

// patches returns the patches of a run's succeeded nodes in topological order.
func patches(ctx context.Context, q querier, tenant, runID string) ([][2]string, error) {
	rows, err := q.Query(ctx, `SELECT node_id, patch FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND state = 'SUCCEEDED' AND patch <> ''
		ORDER BY layer, position`, tenant, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var p [2]string
		err := row.Scan(&p[0], &p[1])
		return p, err
	})
}

// storeMerge sets a run's result patch and conflicts while the run is in
// one of states, and reports whether it was: a run that moved on meanwhile
// (a retry reopened it, say) keeps the patch its new state will store.
func storeMerge(ctx context.Context, q querier, tenant, runID, patch string, conflicts []string, states ...string) (bool, error) {
	if conflicts == nil {
		conflicts = []string{}
	}
	tag, err := q.Exec(ctx, `UPDATE runs SET result_patch = $3, merge_conflicts = $4 WHERE tenant_id = $1 AND id = $2 AND state = ANY($5)`,
		tenant, runID, patch, conflicts, states)
	return tag.RowsAffected() == 1, err
}

// runningAttempt is a dispatched node attempt of a run this replica owns.
type runningAttempt struct {
	Tenant, RunID, Session, Node string
	Attempt                      int32
}

// ownedRunning lists the running attempts of the runs owner holds.
func ownedRunning(ctx context.Context, q querier, owner string) ([]runningAttempt, error) {
	rows, err := q.Query(ctx, `SELECT r.tenant_id, r.id, r.session_id, n.node_id, n.attempt
		FROM runs r JOIN nodes n ON n.tenant_id = r.tenant_id AND n.run_id = r.id
		WHERE r.lease_owner = $1 AND r.state IN ('RUNNING', 'PAUSED') AND n.state = 'DISPATCHED'`, owner)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (runningAttempt, error) {
		var a runningAttempt
		err := row.Scan(&a.Tenant, &a.RunID, &a.Session, &a.Node, &a.Attempt)
		return a, err
	})
}

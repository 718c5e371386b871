package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

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
// nodes (and NO_CHANGES ones) unblock their dependents (a dependent of two
// nodes succeeding together loses two unmet dependencies), and every applied report gets its
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
		pipeline, section, maxBackoff.Milliseconds(), received, reported, handoff, maxFailureOutput}
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
				r.worker_id, r.duration_us, r.section, r.ord,
				CASE WHEN r.state = 'FAILED' THEN right(r.stderr, $23) ELSE '' END AS stderr_tail),
		unblocked AS (
			UPDATE nodes d SET unmet_deps = d.unmet_deps - c.met
			FROM (SELECT e.dependent_id, count(*) AS met FROM edges e
				WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.node_id = ANY (ARRAY(SELECT node_id FROM upd WHERE state IN ('SUCCEEDED', 'NO_CHANGES')))
				GROUP BY e.dependent_id) c
			WHERE d.tenant_id = $1 AND d.run_id = $2 AND d.node_id = c.dependent_id),
		history AS (
			INSERT INTO attempts (tenant_id, run_id, node_id, attempt, state, exit_code, timed_out, error, worker_id, duration_us, section,
				stderr_tail)
			SELECT $1, $2, node_id, attempt, reported, exit_code, timed_out, error, worker_id, duration_us, section, stderr_tail
			FROM upd ORDER BY ord
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

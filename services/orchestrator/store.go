package orchestrator

import (
	"context"
	"errors"
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
	// stateNoChanges: a node whose agent was asked to change the code and
	// changed nothing (its error says why), met for its dependents as a
	// success is; a run whose nodes all ended, none failed, and only such
	// nodes were to change the code, so that it delivers nothing.
	stateNoChanges = "NO_CHANGES"
	// stateHandedOff is reported, never stored on a node: the attempt
	// handed its pipeline's state to a fresh one (spec F-23), and the node
	// goes back to PENDING for it.
	stateHandedOff = "HANDED_OFF"
)

func terminalRun(state string) bool {
	return state == stateSucceeded || state == stateFailed || state == stateCancelled || state == stateNoChanges
}

// metForDependents says whether a node in state lets its dependents run.
// (A SKIPPED node the user went on without is met too: schedNode.UserSkipped.)
func metForDependents(state string) bool {
	return state == stateSucceeded || state == stateNoChanges
}

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
	// Repository is the directory of the run's repository, which only the
	// services see; RepositoryName its name ("repositories/{id}"), which
	// users see ("" for runs stored before names were).
	Repository     string
	RepositoryName string
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
	repository, base_commit, result_patch, merge_conflicts, '', interactive, session_max_tasks, session_max_engineers, layered,
	repository_name`

// runColumnsNoDag reads every column but the DAG and the large texts, for
// listings and scheduling.
const runColumnsNoDag = `tenant_id, id, user_id, session_id, plan, request_id, state, max_concurrency, ''::bytea, create_time, start_time, end_time, fail_fast, lease_owner,
	repository, base_commit, '', merge_conflicts, '', interactive, session_max_tasks, session_max_engineers, layered,
	repository_name`

// shownRepository is the run's repository as users see it: its name, or,
// for a run stored before names were, the directory it was created with.
func (r *runRow) shownRepository() string {
	if r.RepositoryName != "" {
		return r.RepositoryName
	}
	return r.Repository
}

func scanRun(row pgx.Row) (*runRow, error) {
	var r runRow
	err := row.Scan(&r.TenantID, &r.ID, &r.UserID, &r.SessionID, &r.Plan, &r.RequestID, &r.State,
		&r.MaxConcurrency, &r.DAG, &r.CreateTime, &r.StartTime, &r.EndTime, &r.FailFast, &r.LeaseOwner,
		&r.Repository, &r.BaseCommit, &r.ResultPatch, &r.MergeConflicts, &r.DecisionLog, &r.Interactive,
		&r.SessionMaxTasks, &r.SessionMaxEngineers, &r.Layered, &r.RepositoryName)
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
			layered, repository_name)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now() + $12 * interval '1 microsecond', $13, $14, $15, $16, $17, $18, $19, $20)
		RETURNING create_time`,
		r.TenantID, r.ID, r.UserID, r.SessionID, r.Plan, r.RequestID, r.State, r.MaxConcurrency, r.DAG,
		r.FailFast, r.LeaseOwner, ttl.Microseconds(), r.Repository, r.BaseCommit, r.Interactive,
		r.SessionMaxTasks, r.SessionMaxEngineers, r.RequestHash, r.Layered, r.RepositoryName).Scan(&r.CreateTime)
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

func scanRunKey(row pgx.CollectableRow) (runKey, error) {
	var k runKey
	err := row.Scan(&k.Tenant, &k.ID)
	return k, err
}

// activeRuns lists unfinished runs of every tenant, oldest first. Only the
// background loops use it; each run is then handled within its tenant.
func activeRuns(ctx context.Context, q querier, limit int) ([]runKey, error) {
	rows, err := q.Query(ctx, `SELECT tenant_id, id FROM runs WHERE state IN ('PENDING', 'RUNNING', 'PAUSED') ORDER BY create_time LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRunKey)
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

// releaseLeases gives up every lease owner holds, as a replica does when it
// stops: on unfinished runs, on runs awaiting delivery and on runs awaiting
// a session check. Each lease ends now (the owner is kept, so that a
// restart under the same id takes its runs back at once), and any replica's
// next claim takes the run over. It returns how many were released.
func releaseLeases(ctx context.Context, q querier, owner string) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE runs SET lease_expires = NULL
		WHERE lease_owner = $1 AND lease_expires IS NOT NULL`, owner)
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
	return pgx.CollectRows(rows, scanRunKey)
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

// keptPatchSQL matches the nodes whose patch is part of a run's result:
// the patches a run merges (patches) and those a dependent task starts from
// (dependencyInputsSQL) are the same, in the same order (layer, position),
// so that every patch applies on top of the ones before it.
const keptPatchSQL = `state = 'SUCCEEDED' AND patch <> ''`

// patches returns the patches of a run's succeeded nodes in topological order.
func patches(ctx context.Context, q querier, tenant, runID string) ([][2]string, error) {
	rows, err := q.Query(ctx, `SELECT node_id, patch FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND `+keptPatchSQL+`
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

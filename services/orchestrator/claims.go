package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Claims fence task attempts (spec B-29, T-05). A worker claims a dispatch
// in the database before it runs anything of it and heartbeats the claim
// while the task runs. A copy of the dispatch (a re-publish after a
// restart, a redelivery) runs only when the attempt has no live claim and
// was not finished: so no attempt runs twice, whatever the bus's duplicate
// window. A result is applied only under the attempt's current claim; a
// worker whose claim another took over is told so at its next heartbeat
// and stops the task.

// claimWorkers is how many claims and heartbeats a replica answers at once.
const claimWorkers = 8

// claimMetrics counts what the claims decided.
type claimMetrics struct {
	claims       *prometheus.CounterVec
	staleResults prometheus.Counter
	fenced       prometheus.Counter
}

func newClaimMetrics(f promauto.Factory) claimMetrics {
	return claimMetrics{
		claims: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_orchestrator_task_claims_total",
			Help: "Workers' claims of a dispatch, by outcome (claimed, taken_over, held_elsewhere, finished, superseded).",
		}, []string{"outcome"}),
		staleResults: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_stale_results_total",
			Help: "Results of an attempt reported under a claim that was no longer the attempt's, ignored.",
		}),
		fenced: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_fenced_heartbeats_total",
			Help: "Heartbeats answered with fenced: the worker stops a task another worker took over or the node no longer awaits.",
		}),
	}
}

// serveClaims answers workers' claims and heartbeats until ctx is done.
// Each replica joins one queue group, so any live replica answers. The
// subscriptions hand requests to claimWorkers goroutines; while they are
// busy, requests wait in the subscriptions' pending buffers (never dropped
// as a full channel subscription would).
func (s *Service) serveClaims(ctx context.Context) error {
	s.claimsFrom.Store(time.Now().UnixNano())
	in := make(chan *nats.Msg)
	for _, subj := range []string{topology.TaskClaimSubject(s.bus), topology.TaskHeartbeatSubject(s.bus)} {
		sub, err := s.bus.Conn.QueueSubscribe(subj, topology.ClaimsQueue, func(m *nats.Msg) {
			select {
			case in <- m:
			case <-ctx.Done():
			}
		})
		if err != nil {
			return fmt.Errorf("subscribe to %s: %w", subj, err)
		}
		_ = sub.SetPendingLimits(-1, 64<<20)
		defer func() { _ = sub.Unsubscribe() }()
	}
	var wg sync.WaitGroup
	for range claimWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-in:
					s.answerClaim(ctx, m)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// claimsWarm reports whether this replica has answered heartbeats for a
// whole ClaimTimeout. Before that, a claim's old heartbeat may only mean
// that no replica was there to take it (every replica was down): its
// worker may be alive and about to heartbeat, so no claim is taken over.
func (s *Service) claimsWarm() bool {
	from := s.claimsFrom.Load()
	return from != 0 && time.Since(time.Unix(0, from)) > s.cfg.ClaimTimeout
}

// answerClaim answers one claim or heartbeat; a request that cannot be
// decided (the database is away) gets no answer, and the worker asks again.
func (s *Service) answerClaim(ctx context.Context, m *nats.Msg) {
	var (
		reply proto.Message
		err   error
	)
	if m.Subject == topology.TaskClaimSubject(s.bus) {
		var req taskv1.TaskClaimRequest
		if err = proto.Unmarshal(m.Data, &req); err == nil {
			reply, err = s.claimTask(ctx, &req)
		}
	} else {
		var req taskv1.TaskHeartbeatRequest
		if err = proto.Unmarshal(m.Data, &req); err == nil {
			reply, err = s.heartbeatTask(ctx, &req)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "task claim not answered; the worker asks again", slog.String("subject", m.Subject), logx.Err(err))
		}
		return
	}
	b, err := proto.Marshal(reply)
	if err == nil {
		_ = m.Respond(b)
	}
}

// errBadClaim is a claim or heartbeat missing what identifies its attempt.
var errBadClaim = errors.New("a task claim needs a tenant, an attempt id and a worker")

// claimTask decides whether req's worker may run its dispatch: it may when
// the attempt is still awaited and has no claim, or only a silent one
// (whose heartbeat is older than ClaimTimeout: its worker died).
func (s *Service) claimTask(ctx context.Context, req *taskv1.TaskClaimRequest) (*taskv1.TaskClaimResponse, error) {
	if req.GetTenantId() == "" || req.GetAttemptId() == "" || req.GetWorkerId() == "" {
		return nil, errBadClaim
	}
	resp := &taskv1.TaskClaimResponse{Timeout: durationpb.New(s.cfg.ClaimTimeout)}
	token := newClaimToken()
	var takeovers int
	// One statement in the common case: the node still awaits the attempt
	// (for a node's dispatch) and the attempt has no claim, or a silent one.
	err := s.db.QueryRow(ctx, `INSERT INTO task_claims (tenant_id, attempt_id, run_id, worker_id, token)
		SELECT $1, $2, $3, $4, $5 WHERE $7 = '' OR EXISTS (SELECT 1 FROM nodes WHERE tenant_id = $1 AND run_id = $3
			AND node_id = $7 AND attempt = $8 AND state = 'DISPATCHED')
		ON CONFLICT (tenant_id, attempt_id) DO UPDATE SET worker_id = EXCLUDED.worker_id, token = EXCLUDED.token,
			claimed_at = now(), heartbeat_at = now(), takeovers = task_claims.takeovers + 1
		WHERE task_claims.finished_at IS NULL AND (task_claims.heartbeat_at = '-infinity'
			OR task_claims.heartbeat_at < now() - $6 * interval '1 microsecond' AND $9)
		RETURNING takeovers`, req.GetTenantId(), req.GetAttemptId(), req.GetRunId(), req.GetWorkerId(), token,
		s.cfg.ClaimTimeout.Microseconds(), nodeOf(req), req.GetAttempt(), s.claimsWarm()).Scan(&takeovers)
	switch {
	case err == nil:
		resp.Outcome, resp.ClaimToken = taskv1.TaskClaimResponse_OUTCOME_CLAIMED, token
		outcome := "claimed"
		if takeovers > 0 {
			outcome = "taken_over"
			s.log.WarnContext(ctx, "a silent worker's task taken over", logx.KeyTenantID, req.GetTenantId(),
				slog.String("attempt_id", req.GetAttemptId()), slog.String("worker_id", req.GetWorkerId()))
		}
		s.claimMetrics.claims.WithLabelValues(outcome).Inc()
		return resp, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("claim %s: %w", req.GetAttemptId(), err)
	}
	if node := nodeOf(req); node != "" {
		awaited, err := nodeAwaits(ctx, s.db, req.GetTenantId(), req.GetRunId(), node, req.GetAttempt())
		if err != nil {
			return nil, err
		}
		if !awaited {
			resp.Outcome = taskv1.TaskClaimResponse_OUTCOME_SUPERSEDED
			s.claimMetrics.claims.WithLabelValues("superseded").Inc()
			return resp, nil
		}
	}
	var holder string
	var finished bool
	if err := s.db.QueryRow(ctx, `SELECT worker_id, finished_at IS NOT NULL FROM task_claims WHERE tenant_id = $1 AND attempt_id = $2`,
		req.GetTenantId(), req.GetAttemptId()).Scan(&holder, &finished); err != nil {
		return nil, fmt.Errorf("read claim %s: %w", req.GetAttemptId(), err)
	}
	if finished {
		resp.Outcome = taskv1.TaskClaimResponse_OUTCOME_FINISHED
		s.claimMetrics.claims.WithLabelValues("finished").Inc()
		return resp, nil
	}
	resp.Outcome, resp.HolderWorkerId = taskv1.TaskClaimResponse_OUTCOME_HELD_ELSEWHERE, holder
	s.claimMetrics.claims.WithLabelValues("held_elsewhere").Inc()
	return resp, nil
}

// heartbeatTask keeps req's claim alive (or finishes it), and says whether
// it is fenced: taken over by another worker, or its node no longer awaits
// the attempt (cancelled, or the run ended).
func (s *Service) heartbeatTask(ctx context.Context, req *taskv1.TaskHeartbeatRequest) (*taskv1.TaskHeartbeatResponse, error) {
	if req.GetTenantId() == "" || req.GetAttemptId() == "" || req.GetClaimToken() == "" {
		return nil, errBadClaim
	}
	tag, err := s.db.Exec(ctx, `UPDATE task_claims SET heartbeat_at = CASE WHEN $5 THEN '-infinity' ELSE now() END,
			finished_at = CASE WHEN $4 THEN now() ELSE finished_at END
		WHERE tenant_id = $1 AND attempt_id = $2 AND token = $3`,
		req.GetTenantId(), req.GetAttemptId(), req.GetClaimToken(), req.GetFinished(), req.GetReleased())
	if err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", req.GetAttemptId(), err)
	}
	if tag.RowsAffected() == 0 {
		s.claimMetrics.fenced.Inc()
		return &taskv1.TaskHeartbeatResponse{Fenced: true, Reason: "another worker took the attempt over"}, nil
	}
	if req.GetFinished() || req.GetReleased() || dagNode(req.GetRunId(), req.GetNodeId(), req.GetAttemptId(), req.GetAttempt()) == "" {
		return &taskv1.TaskHeartbeatResponse{}, nil
	}
	awaited, err := nodeAwaits(ctx, s.db, req.GetTenantId(), req.GetRunId(), req.GetNodeId(), req.GetAttempt())
	if err != nil {
		return nil, err
	}
	if !awaited {
		s.claimMetrics.fenced.Inc()
		return &taskv1.TaskHeartbeatResponse{Fenced: true, Reason: "the node no longer awaits this attempt"}, nil
	}
	return &taskv1.TaskHeartbeatResponse{}, nil
}

// nodeOf is the node a claim's attempt belongs to, "" for a dispatch
// without one (a session check, a review) or whose attempt id is not a
// node's.
func nodeOf(req *taskv1.TaskClaimRequest) string {
	return dagNode(req.GetRunId(), req.GetNodeId(), req.GetAttemptId(), req.GetAttempt())
}

// dagNode is node when attempt id names that attempt of a DAG node of the
// run, "" otherwise: a review or a session check has a node id of its own
// ("~review", "~session") and no row in nodes.
func dagNode(runID, node, id string, attempt int32) string {
	if node == "" || node == ReviewNode || node == SessionCheckNode || id != attemptID(runID, node, attempt) {
		return ""
	}
	return node
}

// nodeAwaits reports whether a run's node is dispatched at attempt: only
// then may a worker run (or go on running) that attempt.
func nodeAwaits(ctx context.Context, q querier, tenant, runID, nodeID string, attempt int32) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3
		AND attempt = $4 AND state = 'DISPATCHED')`, tenant, runID, nodeID, attempt).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read node %s/%s: %w", runID, nodeID, err)
	}
	return ok, nil
}

// attemptID is the fence attempt id of a node's attempt.
func attemptID(runID, nodeID string, attempt int32) string {
	return fmt.Sprintf("%s:%s:%d", runID, nodeID, attempt)
}

// newClaimToken is a random claim token.
func newClaimToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claimRetention is how long finished claims are kept: a copy of a
// dispatch arriving later than that (a bus restored from an old backup)
// is stopped by its node's state instead.
const claimRetention = 24 * time.Hour

// sweepClaims deletes finished claims past claimRetention and the claims
// of runs that no longer exist.
func (s *Service) sweepClaims(ctx context.Context) {
	_, err := s.db.Exec(ctx, `DELETE FROM task_claims WHERE finished_at < now() - $1 * interval '1 microsecond'`,
		claimRetention.Microseconds())
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "delete old task claims", logx.Err(err))
	}
}

// liveClaims lists which of attempt ids have a claim whose heartbeat is
// within timeout (any claim, before warm: claimsWarm) and that is not
// finished: their tasks run somewhere.
func liveClaims(ctx context.Context, q querier, tenant string, ids []string, timeout time.Duration, warm bool) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT attempt_id FROM task_claims WHERE tenant_id = $1 AND attempt_id = ANY($2)
		AND finished_at IS NULL AND (heartbeat_at >= now() - $3 * interval '1 microsecond' OR NOT $4 AND heartbeat_at > '-infinity')`,
		tenant, ids, timeout.Microseconds(), warm)
	if err != nil {
		return nil, fmt.Errorf("read task claims: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read task claims: %w", err)
	}
	out := make(map[string]bool, len(live))
	for _, id := range live {
		out[id] = true
	}
	return out, nil
}

// staleResults picks out of a batch the results reported under a claim
// that is no longer their attempt's (another worker took it over): they
// are counted on the claim, logged and not applied. A result without a
// claim token (a worker that does not claim) is stale only when its
// attempt was claimed. The answer holds the indexes of the stale results.
func (s *Service) staleResults(ctx context.Context, results []*result) (map[int]bool, error) {
	tenants, attempts, tokens := make([]string, len(results)), make([]string, len(results)), make([]string, len(results))
	for i, res := range results {
		r := res.r
		tenants[i], tokens[i] = r.GetTenantId(), r.GetClaimToken()
		if attempts[i] = r.GetFence().GetAttemptId(); attempts[i] == "" {
			attempts[i] = attemptID(r.GetRunId(), r.GetNodeId(), r.GetAttempt())
		}
	}
	rows, err := s.db.Query(ctx, `SELECT r.i - 1 FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(tenant_id, attempt_id, token, i)
		JOIN task_claims c ON c.tenant_id = r.tenant_id AND c.attempt_id = r.attempt_id WHERE c.token <> r.token`, tenants, attempts, tokens)
	if err != nil {
		return nil, fmt.Errorf("read task claims: %w", err)
	}
	idx, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read task claims: %w", err)
	}
	stale := make(map[int]bool, len(idx))
	for _, i := range idx {
		stale[int(i)] = true
		r := results[i].r
		if _, err := s.db.Exec(ctx, `UPDATE task_claims SET stale_results = stale_results + 1 WHERE tenant_id = $1 AND attempt_id = $2`,
			tenants[i], attempts[i]); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "count a stale result", logx.Err(err))
		}
		s.claimMetrics.staleResults.Inc()
		s.log.WarnContext(ctx, "result of a superseded claim ignored: another worker took the attempt over", logx.KeyTenantID, r.GetTenantId(),
			logx.KeyRunID, r.GetRunId(), logx.KeyNodeID, r.GetNodeId(), slog.Int("attempt", int(r.GetAttempt())),
			slog.String("worker_id", r.GetWorkerId()))
	}
	return stale, nil
}

// redispatchDead re-publishes the dispatches of this replica's runs whose
// attempt is known dead: claimed, then silent past ClaimTimeout without a
// result. The bus redelivers a dead worker's message by itself; this is
// for a message the bus no longer holds (a copy another worker dropped
// while the dead one still heartbeat, a lost stream). The copy runs only
// under a new claim.
func (s *Service) redispatchDead(ctx context.Context) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT n.tenant_id, n.run_id FROM nodes n
		JOIN runs r ON r.tenant_id = n.tenant_id AND r.id = n.run_id
		JOIN task_claims c ON c.tenant_id = n.tenant_id AND c.attempt_id = n.run_id || ':' || n.node_id || ':' || n.attempt
		WHERE n.state = 'DISPATCHED' AND r.lease_owner = $1 AND c.finished_at IS NULL
			AND c.heartbeat_at < now() - $2 * interval '1 microsecond' LIMIT $3`,
		s.cfg.ReplicaID, (2 * s.cfg.ClaimTimeout).Microseconds(), resyncBatch)
	var keys []runKey
	if err == nil {
		keys, err = pgx.CollectRows(rows, scanRunKey)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "find dead task attempts", logx.Err(err))
		}
		return
	}
	for _, k := range keys {
		s.log.InfoContext(ctx, "a dead worker's task dispatched again", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID)
		if err := s.recoverRun(ctx, k); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "dispatch a dead worker's task again", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
		}
	}
}

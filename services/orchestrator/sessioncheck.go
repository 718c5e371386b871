package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/intent"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/worker"
)

// Session-level checks (spec F-06, level 2): once a repository run with
// session_checks succeeded and its patches are merged, a tester worker runs
// the session-wide Inspector and, when it passes, the session-wide Tester
// over the merged result. A failure (or a merge conflict) is sent to the
// Architect as a fix-DAG request.

// SessionCheckNode is the node id of a session check's task; it cannot
// clash with a DAG node ("~" is not allowed in node ids).
const SessionCheckNode = "~session"

// Events of session checks.
const (
	EventSessionCheck = "run.session_check"
	EventFixRequested = "run.fix_requested"
)

// maxResultPatchBytes bounds the merged patch sent with a session check.
const maxResultPatchBytes = 512 << 10

// saveRunOptions stores the run's context documents and whether it gets
// session checks.
func saveRunOptions(ctx context.Context, tx pgx.Tx, tenant, id string, req *orchestratorv1.CreateRunRequest) error {
	if req.GetContext() == nil && !req.GetSessionChecks() {
		return nil
	}
	var blob []byte
	if req.GetContext() != nil {
		var err error
		if blob, err = proto.Marshal(req.GetContext()); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `UPDATE runs SET context = $3, session_checks = $4 WHERE tenant_id = $1 AND id = $2`, tenant, id, blob, req.GetSessionChecks())
	return err
}

// addRunExtras fills a run's context and session check.
func (s *Service) addRunExtras(ctx context.Context, tenant string, r *orchestratorv1.Run) error {
	if r.DecisionLog != "" && !strings.HasPrefix(r.DecisionLog, decisionLogTitle) {
		r.DecisionLog = decisionLogTitle + r.DecisionLog
	}
	var blob []byte
	var check string
	err := s.db.QueryRow(ctx, `SELECT context, session_check FROM runs WHERE tenant_id = $1 AND id = $2`, tenant, r.GetId()).Scan(&blob, &check)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(blob) > 0 {
		r.Context = &orchestratorv1.RunContext{}
		if err := proto.Unmarshal(blob, r.Context); err != nil {
			return err
		}
	}
	if check != "" {
		r.SessionCheck = &orchestratorv1.SessionCheck{}
		if err := protojson.Unmarshal([]byte(check), r.SessionCheck); err != nil {
			return err
		}
	}
	return nil
}

// validateRunOptions checks the options at the edge.
func validateRunOptions(req *orchestratorv1.CreateRunRequest) error {
	if req.GetSessionChecks() && req.GetRepository() == "" {
		return errors.New("session_checks: needs repository")
	}
	rc := req.GetContext()
	if err := checkContext(rc, req.GetDag().GetNodes()); err != nil { // taskcontext.go
		return err
	}
	if n := len(rc.GetKeyConstraints()); n > maxIntentStatements {
		return fmt.Errorf("context.key_constraints: %d entries exceed the limit of %d", n, maxIntentStatements)
	}
	if n := len(rc.GetSuccessCriteria()); n > maxIntentStatements {
		return fmt.Errorf("context.success_criteria: %d entries exceed the limit of %d", n, maxIntentStatements)
	}
	for i, k := range rc.GetKeyConstraints() {
		if len(k) > maxIntentStatementBytes {
			return fmt.Errorf("context.key_constraints[%d]: over %d bytes", i, maxIntentStatementBytes)
		}
	}
	for i, c := range rc.GetSuccessCriteria() {
		if len(c.GetCriterion()) > maxIntentStatementBytes || len(c.GetRationale()) > maxIntentStatementBytes {
			return fmt.Errorf("context.success_criteria[%d]: over %d bytes", i, maxIntentStatementBytes)
		}
	}
	return nil
}

// Bounds of a run's intent (its key constraints and success criteria): a
// plan's merged criteria are the user's plus its domain's.
const (
	maxIntentStatements     = 2 * intent.MaxStatements
	maxIntentStatementBytes = intent.MaxStatementBytes
)

// startSessionCheck dispatches the session check of a run that just
// succeeded and was merged.
func (s *Service) startSessionCheck(ctx context.Context, log *slog.Logger, tenant, runID string) {
	s.dispatchSessionCheck(ctx, log, tenant, runID, false)
}

// dispatchSessionCheck dispatches a run's session check: a new one (the
// run has none yet), or with redispatch the one left pending by a replica
// that died, under the same message id (JetStream drops the copy it may
// already hold; a second result finds the check no longer pending).
func (s *Service) dispatchSessionCheck(ctx context.Context, log *slog.Logger, tenant, runID string, redispatch bool) {
	var (
		enabled              bool
		session, user, patch string
		repo, base, current  string
		conflicts            []string
		seq                  int32
	)
	err := s.db.QueryRow(ctx, `SELECT session_checks, session_id, user_id, result_patch, merge_conflicts, repository, base_commit, session_check,
			(SELECT coalesce(sum(attempt), 0)::int4 FROM nodes WHERE tenant_id = $1 AND run_id = $2)
		FROM runs WHERE tenant_id = $1 AND id = $2 AND state = 'SUCCEEDED'`, tenant, runID).
		Scan(&enabled, &session, &user, &patch, &conflicts, &repo, &base, &current, &seq)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (!enabled || (current != "") != redispatch)) {
		return
	}
	if err != nil {
		log.ErrorContext(ctx, "load run for its session check", logx.Err(err))
		return
	}
	if redispatch {
		cur := &orchestratorv1.SessionCheck{}
		if protojson.Unmarshal([]byte(current), cur) != nil || cur.GetState() != worker.CheckPending {
			return
		}
	} else {
		chk := &orchestratorv1.SessionCheck{State: worker.CheckPending}
		switch {
		case len(conflicts) > 0:
			chk.State = worker.CheckFailed
			chk.Detail = "the tasks' patches conflict: " + strings.Join(conflicts, ", ")
		case len(patch) > maxResultPatchBytes:
			chk.State = worker.CheckError
			chk.Detail = fmt.Sprintf("the merged patch of %d bytes exceeds the %d a session check takes", len(patch), maxResultPatchBytes)
		}
		if chk.State != worker.CheckPending {
			if err := s.finishSessionCheck(ctx, log, tenant, runID, chk); err != nil {
				log.ErrorContext(ctx, "store the session check", logx.Err(err))
			}
			return
		}
		if ok, err := s.setSessionCheck(ctx, tenant, runID, chk, ""); err != nil || !ok {
			if err != nil {
				log.ErrorContext(ctx, "store the session check", logx.Err(err))
			}
			return
		}
	}
	env := &messagev1.Envelope{
		Id: ids.New(), CorrelationId: runID, TenantId: tenant, SessionId: session, UserId: user,
		Source: topology.AgentOrchestrator, Target: dagRoleTester, Type: messagev1.MessageType_MESSAGE_TYPE_TASK_DISPATCH,
		CreatedAt: timestamppb.Now(), Attempt: seq, Priority: messagev1.Priority_PRIORITY_PIPELINE,
		Metadata: map[string]string{worker.MetaSessionCheck: "1", worker.MetaRepository: repo, worker.MetaBaseCommit: base,
			worker.MetaResultPatch: patch},
		Payload: &messagev1.Envelope_TaskDispatch{TaskDispatch: &messagev1.TaskDispatch{
			RunId: runID, NodeId: SessionCheckNode, Attempt: seq, Role: dagRoleTester, OutputLimitBytes: int64(s.cfg.OutputLimitBytes)}},
	}
	if _, err := s.bus.Publish(ctx, topology.TaskSubject(s.bus, dagRoleTester), fmt.Sprintf("%s:%s:%d", runID, SessionCheckNode, seq), env); err != nil {
		log.ErrorContext(ctx, "dispatch the session check", logx.Err(err))
		if err := s.finishSessionCheck(ctx, log, tenant, runID, &orchestratorv1.SessionCheck{State: worker.CheckError, Detail: "the session check could not be dispatched"}); err != nil {
			log.ErrorContext(ctx, "store the session check", logx.Err(err))
		}
		return
	}
	if session == "" {
		return
	}
	if redispatch {
		log.InfoContext(ctx, "session check dispatched again after taking over the run")
		s.publishEvent(ctx, log, topology.Event{Tenant: tenant, Session: session, ID: fmt.Sprintf("%s:session-check:%d:redispatched:%s", runID, seq, ids.New()),
			Type: EventSessionCheck, Source: topology.AgentOrchestrator, CorrelationID: runName(runID),
			Text: "session-level inspection and tests of " + runName(runID) + " dispatched again: the replica that started them stopped",
			Data: map[string]any{"run": runName(runID), "state": worker.CheckPending, "redispatched": true}})
		return
	}
	s.publishEvent(ctx, log, topology.Event{Tenant: tenant, Session: session, ID: fmt.Sprintf("%s:session-check:%d:started", runID, seq),
		Type: EventSessionCheck, Source: topology.AgentOrchestrator, CorrelationID: runName(runID),
		Text: "session-level inspection and tests started over the merged result of " + runName(runID),
		Data: map[string]any{"run": runName(runID), "state": worker.CheckPending}})
}

// awaitingCheck matches the succeeded runs whose session check is not done:
// not yet dispatched (session_check empty) or pending.
// (CASE keeps the empty text from being read as JSON.)
const awaitingCheck = `state = 'SUCCEEDED' AND session_checks
	AND CASE WHEN session_check = '' THEN true ELSE session_check::jsonb->>'state' = 'pending' END`

// sweepSessionChecks runs every LeaseTTL/3 (beside the run leases). A
// finished run keeps its lease while its session check is awaited: this
// replica renews its own, takes over those of replicas that stopped
// renewing (merging and dispatching the check again when it was never
// dispatched, re-dispatching a pending one), and gives up as an error the
// checks still pending SessionCheckTimeout after their run ended.
func (s *Service) sweepSessionChecks(ctx context.Context) {
	ttl := s.cfg.LeaseTTL.Microseconds()
	if _, err := s.db.Exec(ctx, `UPDATE runs SET lease_expires = now() + $2 * interval '1 microsecond'
		WHERE lease_owner = $1 AND `+awaitingCheck, s.cfg.ReplicaID, ttl); err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "renew the leases of session checks", logx.Err(err))
		}
		return
	}
	type orphan struct {
		tenant, id, repo, base string
		undispatched           bool
	}
	rows, err := s.db.Query(ctx, `UPDATE runs SET lease_owner = $1, lease_expires = now() + $2 * interval '1 microsecond'
		WHERE (tenant_id, id) IN (
			SELECT tenant_id, id FROM runs WHERE `+awaitingCheck+`
				AND (lease_expires IS NULL OR lease_expires < now())
			ORDER BY end_time LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING tenant_id, id, repository, base_commit, session_check = ''`, s.cfg.ReplicaID, ttl, resyncBatch)
	var orphans []orphan
	if err == nil {
		orphans, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (orphan, error) {
			var o orphan
			err := row.Scan(&o.tenant, &o.id, &o.repo, &o.base, &o.undispatched)
			return o, err
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "take over session checks", logx.Err(err))
		}
		return
	}
	for _, o := range orphans {
		log := s.log.With(logx.KeyTenantID, o.tenant, logx.KeyRunID, o.id)
		log.InfoContext(ctx, "took over a run awaiting its session check", slog.Bool("dispatched", !o.undispatched))
		if o.undispatched {
			s.mergeRun(ctx, log, o.tenant, o.id, o.repo, o.base)
		}
		s.dispatchSessionCheck(ctx, log, o.tenant, o.id, !o.undispatched)
	}
	s.expireSessionChecks(ctx)
}

// expireSessionChecks gives up the session checks pending longer than
// SessionCheckTimeout since their run ended (no tester worker reported).
func (s *Service) expireSessionChecks(ctx context.Context) {
	rows, err := s.db.Query(ctx, `SELECT tenant_id, id FROM runs
		WHERE state = 'SUCCEEDED' AND session_checks
			AND CASE WHEN session_check = '' THEN false ELSE session_check::jsonb->>'state' = 'pending' END
			AND end_time < now() - $1 * interval '1 microsecond'
		ORDER BY end_time LIMIT $2`, s.cfg.SessionCheckTimeout.Microseconds(), resyncBatch)
	var keys []runKey
	if err == nil {
		keys, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (runKey, error) {
			var k runKey
			err := row.Scan(&k.Tenant, &k.ID)
			return k, err
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "find session checks that timed out", logx.Err(err))
		}
		return
	}
	for _, k := range keys {
		log := s.log.With(logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID)
		chk := &orchestratorv1.SessionCheck{State: worker.CheckError,
			Detail: fmt.Sprintf("timed out: no tester worker reported the session check within %s of the run's end", s.cfg.SessionCheckTimeout)}
		if err := s.finishSessionCheck(ctx, log, k.Tenant, k.ID, chk); err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "give up a session check that timed out", logx.Err(err))
		}
	}
}

// dagRoleTester runs session checks.
const dagRoleTester = "tester"

// setSessionCheck stores a session check; with from set, only over a check
// in that state. It reports whether it stored it.
func (s *Service) setSessionCheck(ctx context.Context, tenant, runID string, chk *orchestratorv1.SessionCheck, from string) (bool, error) {
	b, err := protojson.Marshal(chk)
	if err != nil {
		return false, err
	}
	var q string
	if from == "" {
		q = `UPDATE runs SET session_check = $3 WHERE tenant_id = $1 AND id = $2 AND session_check = ''`
	} else {
		q = `UPDATE runs SET session_check = $3 WHERE tenant_id = $1 AND id = $2 AND session_check <> '' AND session_check::jsonb->>'state' = $4`
	}
	args := []any{tenant, runID, string(b)}
	if from != "" {
		args = append(args, from)
	}
	tag, err := s.db.Exec(ctx, q, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// handleSessionCheckResult applies a session check's result; it reports
// whether the result was one.
func (s *Service) handleSessionCheckResult(ctx context.Context, res *result) bool {
	if res.r.GetNodeId() != SessionCheckNode {
		return false
	}
	tenant, runID := res.env.GetTenantId(), res.r.GetRunId()
	log := s.log.With(logx.KeyTenantID, tenant, logx.KeyRunID, runID)
	chk := &orchestratorv1.SessionCheck{}
	if raw := res.env.GetMetadata()[worker.MetaSessionCheck]; raw == "" || protojson.Unmarshal([]byte(raw), chk) != nil {
		chk = &orchestratorv1.SessionCheck{State: worker.CheckError, Detail: "the worker's report holds no session check: " + res.r.GetError(), WorkerId: res.r.GetWorkerId()}
	}
	if err := s.finishSessionCheck(ctx, log, tenant, runID, chk); err != nil {
		// Applied again on redelivery.
		log.WarnContext(ctx, "session check result will be redelivered", logx.Err(err))
		_ = res.msg.NakWithDelay(resultRedeliveryDelay)
		return true
	}
	_ = res.msg.Ack()
	return true
}

// finishSessionCheck records a session check's outcome, asks the Architect
// for a fix DAG when it failed, and announces it.
func (s *Service) finishSessionCheck(ctx context.Context, log *slog.Logger, tenant, runID string, chk *orchestratorv1.SessionCheck) error {
	run, err := getRun(ctx, s.db, tenant, runID)
	if errors.Is(err, errNotFound) {
		log.WarnContext(ctx, "dropping a session check result for an unknown run")
		return nil
	}
	if err != nil {
		return err
	}
	if chk.GetState() == worker.CheckFailed && run.SessionID != "" {
		chk.FixRequested = true
	}
	stored, err := s.setSessionCheck(ctx, tenant, runID, chk, worker.CheckPending)
	if err == nil && !stored {
		stored, err = s.setSessionCheck(ctx, tenant, runID, chk, "")
	}
	if err != nil {
		return err
	}
	if !stored {
		log.InfoContext(ctx, "ignoring a session check result for a run not awaiting one")
		return nil
	}
	log.InfoContext(ctx, "session check done", slog.String("state", chk.GetState()), slog.String("detail", chk.GetDetail()))
	if run.SessionID == "" {
		return nil
	}
	s.publishEvent(ctx, log, topology.Event{Tenant: tenant, Session: run.SessionID, ID: fmt.Sprintf("%s:session-check:%s:%s", runID, chk.GetState(), ids.New()),
		Type: EventSessionCheck, Source: topology.AgentOrchestrator, CorrelationID: runName(runID),
		Text: fmt.Sprintf("session check of %s %s: %s", runName(runID), chk.GetState(), chk.GetDetail()),
		Data: map[string]any{"run": runName(runID), "state": chk.GetState(), "fix_requested": chk.GetFixRequested()}})
	if !chk.GetFixRequested() {
		return nil
	}
	if err := s.askArchitect(ctx, tenant, run, "fix:"+ids.New(), fixRequestText(run, chk), map[string]string{"sylk.fix_request": "session_check"}); err != nil {
		// Said on the run rather than retried: the check is not run twice.
		log.ErrorContext(ctx, "send the fix-DAG request", logx.Err(err))
		chk.FixRequested = false
		chk.Detail += "; the fix-DAG request could not be sent to the Architect"
		_, err = s.setSessionCheck(ctx, tenant, runID, chk, worker.CheckFailed)
		return err
	}
	s.publishEvent(ctx, log, topology.Event{Tenant: tenant, Session: run.SessionID, ID: runID + ":fix-requested:" + ids.New(),
		Type: EventFixRequested, Source: topology.AgentOrchestrator, CorrelationID: runName(runID),
		Text: "the Architect is asked for a fix DAG for " + runName(runID),
		Data: map[string]any{"run": runName(runID), "detail": chk.GetDetail()}})
	return nil
}

// fixRequestText is the fix-DAG request the Architect gets.
func fixRequestText(run *runRow, chk *orchestratorv1.SessionCheck) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Fix DAG request: the session-level checks of %s failed over its merged result (%s).\n", runName(run.ID), chk.GetDetail())
	n := 0
	for _, f := range chk.GetFindings() {
		if strings.HasPrefix(f, "warning: ") || n >= 20 {
			continue
		}
		b.WriteString("- " + f + "\n")
		n++
	}
	for i, f := range chk.GetTestResult().GetFailures() {
		if i >= 20 {
			break
		}
		loc := ""
		if f.GetFilePath() != "" {
			loc = fmt.Sprintf(" (%s:%d)", f.GetFilePath(), f.GetLine())
		}
		fmt.Fprintf(&b, "- test %s failed%s: %s\n", f.GetTestName(), loc, truncateMiddle(f.GetMessage(), 500))
	}
	b.WriteString("Plan the tasks that fix these failures.")
	return truncateMiddle(b.String(), 6000)
}

package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/topology"
)

// Session-level checks (spec F-06, level 2): once a repository run with
// session_checks succeeded and its patches are merged, a tester worker runs
// the session-wide Inspector and, when it passes, the session-wide Tester
// over the merged result. A failure (or a merge conflict) is sent to the
// Architect as a fix-DAG request.

// SessionCheckNode is the node id of a session check's task; it cannot
// clash with a DAG node ("~" is not allowed in node ids).
const SessionCheckNode = "~session"

// maxResultPatchBytes bounds the merged patch sent with a session check.
const maxResultPatchBytes = 512 << 10

// startSessionCheck dispatches the session check of a run that just
// succeeded and was merged.
func (s *Service) startSessionCheck(ctx context.Context, log *slog.Logger, tenant, runID string) {
	s.dispatchSessionCheck(ctx, log, tenant, runID, false)
}

// checkRun is what a session check's dispatch reads of its run.
type checkRun struct {
	run       runRow
	enabled   bool
	patch     string
	current   string
	conflicts []string
	// seq numbers the check's dispatches: the sum of the nodes' attempts,
	// which grows each time the run is reopened and ends again.
	seq int32
}

// dispatchSessionCheck dispatches a run's session check: a new one (the
// run has none yet), or with redispatch the one left pending by a replica
// that died, under the same message id (JetStream drops the copy it may
// already hold; a second result finds the check no longer pending).
func (s *Service) dispatchSessionCheck(ctx context.Context, log *slog.Logger, tenant, runID string, redispatch bool) {
	c := checkRun{run: runRow{TenantID: tenant, ID: runID}}
	err := s.db.QueryRow(ctx, `SELECT session_checks, session_id, user_id, result_patch, merge_conflicts, repository, base_commit, session_check,
			(SELECT coalesce(sum(attempt), 0)::int4 FROM nodes WHERE tenant_id = $1 AND run_id = $2)
		FROM runs WHERE tenant_id = $1 AND id = $2 AND state = 'SUCCEEDED'`, tenant, runID).
		Scan(&c.enabled, &c.run.SessionID, &c.run.UserID, &c.patch, &c.conflicts, &c.run.Repository, &c.run.BaseCommit, &c.current, &c.seq)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (!c.enabled || (c.current != "") != redispatch)) {
		return
	}
	if err != nil {
		log.ErrorContext(ctx, "load run for its session check", logx.Err(err))
		return
	}
	if !s.checkDue(ctx, log, &c, redispatch) {
		return
	}
	msgID := fmt.Sprintf("%s:%s:%d", runID, SessionCheckNode, c.seq)
	d := s.newDispatch(&c.run, SessionCheckNode, dagRoleTester, c.seq, msgID)
	d.SessionCheck = &taskv1.SessionCheckRequest{ResultPatch: c.patch}
	if _, err := s.bus.Publish(ctx, topology.TaskSubject(s.bus, dagRoleTester), msgID, d); err != nil {
		log.ErrorContext(ctx, "dispatch the session check", logx.Err(err))
		if err := s.finishSessionCheck(ctx, log, tenant, runID, &orchestratorv1.SessionCheck{State: pipeline.CheckError, Detail: "the session check could not be dispatched"}); err != nil {
			log.ErrorContext(ctx, "store the session check", logx.Err(err))
		}
		return
	}
	if redispatch {
		log.InfoContext(ctx, "session check dispatched again after taking over the run")
		s.publishEvent(ctx, log, tenant, c.run.SessionID, fmt.Sprintf("%s:session-check:%d:redispatched:%s", runID, c.seq, ids.New()),
			runEvent(eventv1.EventType_EVENT_TYPE_RUN_SESSION_CHECK, runID,
				"session-level inspection and tests of "+runName(runID)+" dispatched again: the replica that started them stopped",
				&eventv1.RunEvent{CheckState: pipeline.CheckPending, Redispatched: true}))
		return
	}
	s.publishEvent(ctx, log, tenant, c.run.SessionID, fmt.Sprintf("%s:session-check:%d:started", runID, c.seq),
		runEvent(eventv1.EventType_EVENT_TYPE_RUN_SESSION_CHECK, runID,
			"session-level inspection and tests started over the merged result of "+runName(runID),
			&eventv1.RunEvent{CheckState: pipeline.CheckPending}))
}

// checkDue says whether a run's session check is to be dispatched: a
// pending one to dispatch again, or a new one, stored pending, unless the
// merge already decided it (conflicting patches, a merged patch too large
// to check), which is then finished at once.
func (s *Service) checkDue(ctx context.Context, log *slog.Logger, c *checkRun, redispatch bool) bool {
	if redispatch {
		cur := &orchestratorv1.SessionCheck{}
		return protojson.Unmarshal([]byte(c.current), cur) == nil && cur.GetState() == pipeline.CheckPending
	}
	chk := &orchestratorv1.SessionCheck{State: pipeline.CheckPending}
	switch {
	case len(c.conflicts) > 0:
		chk.State = pipeline.CheckFailed
		chk.Detail = "the tasks' patches conflict: " + strings.Join(c.conflicts, ", ")
	case len(c.patch) > maxResultPatchBytes:
		chk.State = pipeline.CheckError
		chk.Detail = fmt.Sprintf("the merged patch of %d bytes exceeds the %d a session check takes", len(c.patch), maxResultPatchBytes)
	}
	if chk.State != pipeline.CheckPending {
		if err := s.finishSessionCheck(ctx, log, c.run.TenantID, c.run.ID, chk); err != nil {
			log.ErrorContext(ctx, "store the session check", logx.Err(err))
		}
		return false
	}
	ok, err := s.setSessionCheck(ctx, c.run.TenantID, c.run.ID, chk, "")
	if err != nil {
		log.ErrorContext(ctx, "store the session check", logx.Err(err))
	}
	return ok && err == nil
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
		keys, err = pgx.CollectRows(rows, scanRunKey)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "find session checks that timed out", logx.Err(err))
		}
		return
	}
	for _, k := range keys {
		log := s.log.With(logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID)
		chk := &orchestratorv1.SessionCheck{State: pipeline.CheckError,
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
	tenant, runID := res.r.GetTenantId(), res.r.GetRunId()
	log := s.log.With(logx.KeyTenantID, tenant, logx.KeyRunID, runID)
	chk := res.r.GetSessionCheck()
	if chk == nil {
		chk = &orchestratorv1.SessionCheck{State: pipeline.CheckError, Detail: "the worker's report holds no session check: " + res.r.GetError(), WorkerId: res.r.GetWorkerId()}
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
	if chk.GetState() == pipeline.CheckFailed && run.SessionID != "" {
		chk.FixRequested = true
	}
	stored, err := s.setSessionCheck(ctx, tenant, runID, chk, pipeline.CheckPending)
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
	s.kickDelivery() // delivery.go
	if run.SessionID == "" {
		return nil
	}
	s.publishEvent(ctx, log, tenant, run.SessionID, fmt.Sprintf("%s:session-check:%s:%s", runID, chk.GetState(), ids.New()),
		runEvent(eventv1.EventType_EVENT_TYPE_RUN_SESSION_CHECK, runID,
			fmt.Sprintf("session check of %s %s: %s", runName(runID), chk.GetState(), chk.GetDetail()),
			&eventv1.RunEvent{CheckState: chk.GetState(), FixRequested: chk.GetFixRequested(), Detail: chk.GetDetail()}))
	if !chk.GetFixRequested() {
		return nil
	}
	if err := s.askArchitect(ctx, tenant, run, "fix:"+ids.New(), fixRequestText(run, chk)); err != nil {
		// Said on the run rather than retried: the check is not run twice.
		log.ErrorContext(ctx, "send the fix-DAG request", logx.Err(err))
		chk.FixRequested = false
		chk.Detail += "; the fix-DAG request could not be sent to the Architect"
		_, err = s.setSessionCheck(ctx, tenant, runID, chk, pipeline.CheckFailed)
		return err
	}
	s.publishEvent(ctx, log, tenant, run.SessionID, runID+":fix-requested:"+ids.New(),
		runEvent(eventv1.EventType_EVENT_TYPE_RUN_FIX_REQUESTED, runID, "the Architect is asked for a fix DAG for "+runName(runID),
			&eventv1.RunEvent{FixRequested: true, Detail: chk.GetDetail()}))
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

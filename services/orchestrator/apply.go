package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
)

// applyResults records reports of one run's nodes in one transaction under
// the run's lock, then moves the run on once. Each report applies only to
// the attempt its node awaits, so a redelivered batch changes nothing twice.
// Without global slots the common case takes one round trip (applyDirect).
func (s *Service) applyResults(ctx context.Context, tenant, runID string, results []*result) error {
	log := s.log.With(logx.KeyTenantID, tenant, logx.KeyRunID, runID)
	reported, byKey := reportsOf(results)
	lookup := func(node string, attempt int32) *result { return byKey[nodeAttempt{node, attempt}] }
	if s.slots == nil {
		return s.applyDirect(ctx, log, tenant, runID, reported, func(rec []recordedResult, eff *effects) bool {
			return s.noteRecorded(eff, rec, lookup)
		})
	}
	var limited *runRow
	found, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		recorded, err := recordResults(ctx, tx, tenant, runID, reported)
		if err != nil {
			return fmt.Errorf("record results: %w", err)
		}
		if len(recorded) > 0 {
			limited = run
		}
		if len(recorded) < len(reported) {
			log.DebugContext(ctx, "ignoring results for nodes not awaiting them", slog.Int("ignored", len(reported)-len(recorded)))
		}
		if s.noteRecorded(eff, recorded, lookup) {
			return s.advanceAfterSuccess(ctx, tx, run, eff)
		}
		return s.advance(ctx, tx, run, eff)
	})
	if err != nil {
		return err
	}
	if !found {
		log.WarnContext(ctx, "dropping results for an unknown run", slog.Int("results", len(results)))
	}
	if limited != nil {
		s.wakeSessionPeers(limited)
	}
	return nil
}

// nodeAttempt names one attempt of a node.
type nodeAttempt struct {
	node    string
	attempt int32
}

// reportsOf is what recordResults stores of results, each attempt once (a
// report repeated within the batch is a redelivery), with its decision log
// section; byKey finds a result by its attempt.
func reportsOf(results []*result) (reported []reportedResult, byKey map[nodeAttempt]*result) {
	reported = make([]reportedResult, 0, len(results))
	byKey = make(map[nodeAttempt]*result, len(results))
	for _, rs := range results {
		nodeID, attempt, res := rs.r.GetNodeId(), rs.r.GetAttempt(), rs.stored
		k := nodeAttempt{nodeID, attempt}
		if _, dup := byKey[k]; dup {
			continue
		}
		byKey[k] = rs
		section := ""
		if rs.r.GetReport() != nil || res.Patch != "" || res.State == stateNoChanges {
			section = decisionSection(nodeID, attempt, res, rs.r.GetReport(), len(rs.r.GetGitAudit()))
		}
		reported = append(reported, reportedResult{NodeID: nodeID, Attempt: attempt, Result: res, Section: section})
	}
	return reported, byKey
}

// wakeSessionPeers moves on the other unfinished runs of a run's session
// when the run has session limits and just freed some of their room, so
// that a run held back by them need not wait for the resync.
func (s *Service) wakeSessionPeers(run *runRow) {
	if run.SessionID == "" || (run.SessionMaxTasks == 0 && run.SessionMaxEngineers == 0) {
		return
	}
	ctx := s.runCtx()
	go func() {
		peers, err := sessionRuns(ctx, s.db, run.TenantID, "", run.SessionID)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "list the session's runs", logx.KeyTenantID, run.TenantID, logx.Err(err))
			}
			return
		}
		for _, id := range peers {
			if id == run.ID || ctx.Err() != nil {
				continue
			}
			if _, err := s.withRun(ctx, run.TenantID, id, false, func(tx pgx.Tx, peer *runRow, eff *effects) error {
				return s.advance(ctx, tx, peer, eff)
			}); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "advance a run of the session", logx.KeyTenantID, run.TenantID, logx.KeyRunID, id, logx.Err(err))
			}
		}
	}()
}

// applyDirect is applyResults without global slots, in one round trip: a
// pipelined batch begins a transaction, locks the run, records every
// report, dispatches the nodes they made ready (only while the run is
// running and, under fail_fast, nothing failed), counts what is left and
// commits. Its effects are carried out asynchronously, in order (see
// carryOutOrdered). Whatever else the reports call for (a failure, a retry,
// the run's end, a paused run) is decided by advance in a second
// transaction, exactly as a resync would.
func (s *Service) applyDirect(ctx context.Context, log *slog.Logger, tenant, runID string, reported []reportedResult,
	note func([]recordedResult, *effects) bool) error {
	out, err := s.recordDirect(ctx, tenant, runID, reported)
	if err != nil {
		return err
	}
	run := out.run
	if run == nil {
		log.WarnContext(ctx, "dropping results for an unknown run", slog.Int("results", len(reported)))
		return nil
	}
	if len(out.recorded) < len(reported) {
		log.DebugContext(ctx, "ignoring results for nodes not awaiting them", slog.Int("ignored", len(reported)-len(out.recorded)))
	}
	eff := &effects{tenant: tenant, runID: runID, session: run.SessionID, user: run.UserID}
	onlySuccesses := note(out.recorded, eff)
	if len(out.picked) > 0 {
		s.queuePicked(ctx, log, run, out.picked, eff)
	}
	s.carryOutOrdered(ctx, eff)
	if len(out.recorded) > 0 {
		s.wakeSessionPeers(run)
	}
	if onlySuccesses && out.open && run.State == stateRunning {
		return nil
	}
	_, err = s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		return s.advance(ctx, tx, run, eff)
	})
	return err
}

// directOutcome is what applyDirect's transaction read: the run (nil when
// unknown), the reports it applied, the nodes it dispatched, and whether a
// node is left pending or running.
type directOutcome struct {
	run      *runRow
	recorded []recordedResult
	picked   []schedNode
	open     bool
}

// recordDirect runs applyDirect's transaction as one pipelined batch.
// Should any statement fail, the server skips the rest (COMMIT too) and
// the pool discards the connection with its aborted transaction.
func (s *Service) recordDirect(ctx context.Context, tenant, runID string, reported []reportedResult) (directOutcome, error) {
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(lockRunSQL, tenant, runID)
	b.Queue(recordResultsSQL, recordResultsArgs(tenant, runID, reported)...)
	b.Queue(lockSessionSQL, tenant, runID)
	b.Queue(dispatchReadySQL, tenant, runID, math.MaxInt32)
	b.Queue(runCountsSQL, tenant, runID)
	b.Queue("COMMIT")
	var out directOutcome
	br := s.db.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("begin: %w", err)
	}
	var err error
	if out.run, err = scanRun(br.QueryRow()); err != nil && !errors.Is(err, errNotFound) {
		return out, fmt.Errorf("lock run: %w", err)
	}
	rows, err := br.Query()
	if err == nil {
		out.recorded, err = scanRecorded(rows)
	}
	if err != nil {
		return out, fmt.Errorf("record results: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("lock session: %w", err)
	}
	rows, err = br.Query()
	if err == nil {
		out.picked, err = scanDispatched(rows)
	}
	if err != nil {
		return out, fmt.Errorf("dispatch ready nodes: %w", err)
	}
	var dispatched int
	if err := br.QueryRow().Scan(&dispatched, &out.open); err != nil {
		return out, fmt.Errorf("count nodes: %w", err)
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("transaction ended with %s", tag)
	}
	if err != nil {
		return out, fmt.Errorf("commit: %w", err)
	}
	return out, br.Close()
}

// queuePicked adds the dispatches of nodes a committed transaction marked
// DISPATCHED to the decision's effects. Should their messages fail to
// build, the nodes go back to PENDING for the next pass.
func (s *Service) queuePicked(ctx context.Context, log *slog.Logger, run *runRow, picked []schedNode, eff *effects) {
	ptrs, attempts := pickedAttempts(picked)
	if err := s.queueTasks(ctx, s.db, run, ptrs, attempts, false, eff); err != nil {
		log.ErrorContext(ctx, "build dispatches; the nodes go back to pending", logx.Err(err))
		for _, n := range picked {
			if err := undoDispatch(ctx, s.db, run.TenantID, run.ID, n.ID, n.Attempt); err != nil {
				log.ErrorContext(ctx, "undo dispatch", logx.KeyNodeID, n.ID, logx.Err(err))
			}
		}
	}
}

// noteRecorded adds the events, slot releases and metrics of applied
// reports to a decision's effects, and says whether every one succeeded
// (or changed nothing: its dependents run all the same).
func (s *Service) noteRecorded(eff *effects, recorded []recordedResult, lookup func(node string, attempt int32) *result) bool {
	tenant, runID := eff.tenant, eff.runID
	onlySuccesses := true
	for _, rec := range recorded {
		nodeID, attempt, state, retryAt := rec.NodeID, rec.Attempt, rec.State, rec.RetryAt
		rs := lookup(nodeID, attempt)
		res := rs.stored
		s.metrics.completions.Inc()
		eff.durations = append(eff.durations, res.Duration)
		if s.slots != nil {
			eff.release = append(eff.release, slotMember(tenant, runID, nodeID, attempt))
		}
		if !metForDependents(state) {
			onlySuccesses = false
		}
		switch {
		case res.State == stateHandedOff && state == statePending:
			s.noteHandoff(eff, nodeID, attempt, rs.r.GetHandoff())
		case state == statePending && retryAt != nil:
			s.metrics.retries.Inc()
			eff.event(fmt.Sprintf("%s:%s:%d:retrying", runID, nodeID, attempt), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_RETRYING, runID,
				fmt.Sprintf("node %s failed (exit %d); retry %d at %s", nodeID, res.ExitCode, attempt, retryAt.UTC().Format(time.RFC3339Nano)),
				&eventv1.NodeEvent{Node: nodeID, Attempt: attempt, State: orchestratorv1.NodeState_NODE_STATE_PENDING, ExitCode: res.ExitCode,
					Error: res.Error, NextAttemptTime: timestamppb.New(*retryAt)}))
		default:
			text := fmt.Sprintf("node %s %s (exit %d)", nodeID, strings.ToLower(res.State), res.ExitCode)
			if res.State == stateNoChanges {
				text = fmt.Sprintf("node %s changed nothing: %s", nodeID, res.Error)
			}
			eff.event(fmt.Sprintf("%s:%s:%d:completed", runID, nodeID, attempt), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED, runID, text,
				&eventv1.NodeEvent{Node: nodeID, Attempt: attempt, State: nodeStateOf(res.State), ExitCode: res.ExitCode, Error: res.Error}))
		}
	}
	return onlySuccesses
}

package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// settleNote is what every receipt says of what it cannot list.
const settleNote = "Agents work in their own workspaces: they never change the repository itself, never push, " +
	"and make no outside calls on the run's behalf, so nothing beyond the result patch needs undoing."

// SettleRun keeps or discards the partial work of a failed or cancelled run
// (spec B-37, B-39) and returns a receipt of what its result now holds.
func (s *Service) SettleRun(ctx context.Context, req *orchestratorv1.SettleRunRequest) (_ *orchestratorv1.SettleRunResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "settle run", err) }()
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(req.GetName())
	if err != nil {
		return nil, err
	}
	act := req.GetAction()
	switch act {
	case orchestratorv1.SettleAction_SETTLE_ACTION_KEEP, orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK, orchestratorv1.SettleAction_SETTLE_ACTION_RETRY:
	default:
		return nil, apierr.Invalid("action", "want SETTLE_ACTION_KEEP, SETTLE_ACTION_ROLLBACK or SETTLE_ACTION_RETRY")
	}
	run, err := getRun(ctx, s.db, who.TenantID, id)
	if errors.Is(err, errNotFound) || err == nil && !owns(runOwner(who), run) {
		return nil, runNotFound(req.GetName())
	}
	if err != nil {
		return nil, fmt.Errorf("load run: %w", err)
	}
	if run.State == stateNoChanges {
		return nil, errRunNotSettleable.Withf("run %s changed nothing (NO_CHANGES): it has no partial work to settle; "+
			"run its nodes again with /task <node> retry or prompt", req.GetName())
	}
	if run.State != stateFailed && run.State != stateCancelled {
		return nil, errRunNotSettleable.Withf("run %s is %s: only a FAILED or CANCELLED run has partial work to settle",
			req.GetName(), run.State)
	}
	log := s.log.With(logx.KeyTenantID, who.TenantID, logx.KeyRunID, id, logx.KeyUserID, who.UserID)
	if act == orchestratorv1.SettleAction_SETTLE_ACTION_RETRY {
		return s.retryFromFailure(ctx, log, who.TenantID, run)
	}
	ps, err := patches(ctx, s.db, who.TenantID, id)
	if err != nil {
		return nil, fmt.Errorf("load patches: %w", err)
	}
	receipt := &orchestratorv1.SettleReceipt{Action: act, Note: settleNote}
	keep := act == orchestratorv1.SettleAction_SETTLE_ACTION_KEEP
	// The patch is stored only while the run is still over: one a retry
	// reopened meanwhile stores its own when it ends.
	var stored bool
	if keep && run.Repository != "" && len(ps) > 0 {
		receipt.Conflicts, stored, err = s.mergeAndStore(ctx, log, who.TenantID, id, run.Repository, run.BaseCommit, ps, stateFailed, stateCancelled)
	} else {
		stored, err = storeMerge(ctx, s.db, who.TenantID, id, "", nil, stateFailed, stateCancelled)
	}
	if err != nil {
		return nil, fmt.Errorf("store result patch: %w", err)
	}
	if !stored {
		return nil, errRunChanged.Withf("run %s changed while it was being settled (a retry reopened it?): read it again, and settle it once it ends",
			req.GetName())
	}
	r, err := s.loadRun(ctx, who.TenantID, "", id)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		switch node := p[0]; {
		case !keep:
			receipt.DiscardedNodes = append(receipt.DiscardedNodes, node)
		case !slices.Contains(receipt.Conflicts, node):
			receipt.KeptNodes = append(receipt.KeptNodes, node)
		}
	}
	for _, n := range r.GetNodes() {
		if st := n.GetState(); st != orchestratorv1.NodeState_NODE_STATE_SUCCEEDED && st != orchestratorv1.NodeState_NODE_STATE_NO_CHANGES {
			receipt.UnfinishedNodes = append(receipt.UnfinishedNodes, n.GetNodeId())
		}
	}
	receipt.FilesChanged = int32(strings.Count(r.GetResultPatch(), "diff --git "))
	s.announceSettled(ctx, log, who.TenantID, run, receipt,
		fmt.Sprintf("%d node(s) kept, %d discarded, %d unfinished; the result patch changes %d file(s)",
			len(receipt.KeptNodes), len(receipt.DiscardedNodes), len(receipt.UnfinishedNodes), receipt.FilesChanged))
	return &orchestratorv1.SettleRunResponse{Run: r, Receipt: receipt}, nil
}

// announceSettled logs a settled run and tells its session.
func (s *Service) announceSettled(ctx context.Context, log *slog.Logger, tenant string, run *runRow, receipt *orchestratorv1.SettleReceipt, what string) {
	verb := strings.ToLower(strings.TrimPrefix(receipt.GetAction().String(), "SETTLE_ACTION_"))
	log.InfoContext(ctx, "run settled", slog.String("action", verb), slog.Int("kept", len(receipt.KeptNodes)),
		slog.Int("retried", len(receipt.RetriedNodes)), slog.Int("files", int(receipt.FilesChanged)))
	if run.SessionID == "" {
		return
	}
	s.publishEvent(ctx, log, tenant, run.SessionID, fmt.Sprintf("%s:settled:%s:%s", run.ID, verb, ids.New()),
		runEvent(eventv1.EventType_EVENT_TYPE_RUN_SETTLED, run.ID, fmt.Sprintf("run %s settled (%s): %s", runName(run.ID), verb, what),
			&eventv1.RunEvent{Action: verb, FilesChanged: receipt.GetFilesChanged()}))
}

// retryFromFailure runs a failed run's failed nodes again (spec B-37: retry
// from failure); each is briefed on its earlier attempts (B-38).
func (s *Service) retryFromFailure(ctx context.Context, log *slog.Logger, tenant string, run *runRow) (*orchestratorv1.SettleRunResponse, error) {
	if run.State != stateFailed {
		return nil, errRunNotSettleable.Withf("run %s was cancelled: there is no failure to retry from", runName(run.ID))
	}
	nodes, err := listNodes(ctx, s.db, tenant, run.ID)
	if err != nil {
		return nil, fmt.Errorf("load nodes: %w", err)
	}
	receipt := &orchestratorv1.SettleReceipt{Action: orchestratorv1.SettleAction_SETTLE_ACTION_RETRY, Note: settleNote}
	for _, n := range nodes {
		if n.State != stateFailed {
			continue
		}
		if err := s.reopenNode(ctx, tenant, run.ID, n.NodeID, orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY,
			func(*orchestratorv1.Node) {}); err != nil {
			if len(receipt.RetriedNodes) == 0 {
				return nil, err
			}
			// The nodes reopened so far run; say which did not.
			log.WarnContext(ctx, "retry from failure: a node could not run again", logx.KeyNodeID, n.NodeID, logx.Err(err))
			receipt.UnfinishedNodes = append(receipt.UnfinishedNodes, n.NodeID)
			continue
		}
		receipt.RetriedNodes = append(receipt.RetriedNodes, n.NodeID)
	}
	if len(receipt.RetriedNodes) == 0 {
		return nil, errNodeNotFailed.Withf("run %s has no failed node to retry", runName(run.ID))
	}
	r, err := s.loadRun(ctx, tenant, "", run.ID)
	if err != nil {
		return nil, err
	}
	s.announceSettled(ctx, log, tenant, run, receipt, fmt.Sprintf("%d failed node(s) run again: %s",
		len(receipt.RetriedNodes), strings.Join(receipt.RetriedNodes, ", ")))
	return &orchestratorv1.SettleRunResponse{Run: r, Receipt: receipt}, nil
}

// tierGravity orders error tiers, gravest last.
var tierGravity = []string{tierTransient, tierExternal, tierUserFixable, tierPermanent}

// partialFailure is a failed run's choices with their default (spec B-37),
// from its failed nodes' last attempts. A run that failed because its user
// cancelled one of its nodes, and none failed, lists the cancelled nodes
// and keeps the work by default, with no error tier: nothing went wrong.
func partialFailure(nodes []nodeRow) *orchestratorv1.PartialFailure {
	pf := &orchestratorv1.PartialFailure{}
	worst := -1
	var cancelled []string
	for _, n := range nodes {
		if n.State == stateCancelled {
			cancelled = append(cancelled, n.NodeID)
		}
		if n.State != stateFailed {
			continue
		}
		pf.FailedNodes = append(pf.FailedNodes, n.NodeID)
		tier := errorTier(&orchestratorv1.AttemptSummary{ExitCode: n.ExitCode, TimedOut: n.TimedOut, Error: n.Error})
		worst = max(worst, slices.Index(tierGravity, tier))
	}
	if worst < 0 {
		if len(cancelled) == 0 {
			return nil
		}
		pf.FailedNodes = cancelled
		pf.DefaultAction = orchestratorv1.SettleAction_SETTLE_ACTION_KEEP
		pf.Reason = "no node failed: the run stopped because its user cancelled a node, so the work that succeeded is kept " +
			"unless you roll it back"
		return pf
	}
	pf.ErrorTier = tierGravity[worst]
	switch pf.ErrorTier {
	case tierTransient, tierExternal:
		pf.DefaultAction = orchestratorv1.SettleAction_SETTLE_ACTION_RETRY
		pf.Reason = "the failure came from time or an outside service, not from the work: running the failed nodes again is likely to pass"
	case tierUserFixable:
		pf.DefaultAction = orchestratorv1.SettleAction_SETTLE_ACTION_KEEP
		pf.Reason = "a command could not run: keep the partial work, fix what is missing, then go on"
	default:
		pf.DefaultAction = orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK
		pf.Reason = "the work itself failed: running it again as it is will fail the same way, so the partial work is best rolled back"
	}
	return pf
}

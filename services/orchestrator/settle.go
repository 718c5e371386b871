package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// EventRunSettled is published on the run's session when a user settles
// its partial work.
const EventRunSettled = "run.settled"

// settleNote is what every receipt says of what it cannot list.
const settleNote = "Agents work in their own workspaces: they never change the repository itself, never push, " +
	"and make no outside calls on the run's behalf, so nothing beyond the result patch needs undoing."

// SettleRun keeps or discards the partial work of a failed or cancelled run
// (spec B-37, B-39) and returns a receipt of what its result now holds.
func (s *Service) SettleRun(ctx context.Context, req *orchestratorv1.SettleRunRequest) (*orchestratorv1.SettleRunResponse, error) {
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(req.GetName())
	if err != nil {
		return nil, err
	}
	act := req.GetAction()
	if act != orchestratorv1.SettleAction_SETTLE_ACTION_KEEP && act != orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK {
		return nil, status.Error(codes.InvalidArgument, "action: want SETTLE_ACTION_KEEP or SETTLE_ACTION_ROLLBACK")
	}
	run, err := getRun(ctx, s.db, who.TenantID, id)
	if errors.Is(err, errNotFound) {
		return nil, status.Errorf(codes.NotFound, "run %s not found", req.GetName())
	}
	if err != nil {
		return nil, s.internal(ctx, "load run", err)
	}
	if run.State != stateFailed && run.State != stateCancelled {
		return nil, status.Errorf(codes.FailedPrecondition, "run %s is %s: only a FAILED or CANCELLED run has partial work to settle",
			req.GetName(), run.State)
	}
	ps, err := patches(ctx, s.db, who.TenantID, id)
	if err != nil {
		return nil, s.internal(ctx, "load patches", err)
	}
	log := s.log.With(logx.KeyTenantID, who.TenantID, logx.KeyRunID, id, logx.KeyUserID, who.UserID)
	receipt := &orchestratorv1.SettleReceipt{Action: act, Note: settleNote}
	keep := act == orchestratorv1.SettleAction_SETTLE_ACTION_KEEP
	if keep && run.Repository != "" && len(ps) > 0 {
		receipt.Conflicts = s.mergeAndStore(ctx, log, who.TenantID, id, run.Repository, run.BaseCommit, ps)
	} else if err := storeMerge(ctx, s.db, who.TenantID, id, "", nil); err != nil {
		return nil, s.internal(ctx, "discard result patch", err)
	}
	r, err := s.loadRun(ctx, who.TenantID, id)
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
		if n.GetState() != orchestratorv1.NodeState_NODE_STATE_SUCCEEDED {
			receipt.UnfinishedNodes = append(receipt.UnfinishedNodes, n.GetNodeId())
		}
	}
	receipt.FilesChanged = int32(strings.Count(r.GetResultPatch(), "diff --git "))
	verb := strings.ToLower(strings.TrimPrefix(act.String(), "SETTLE_ACTION_"))
	log.InfoContext(ctx, "run settled", slog.String("action", verb), slog.Int("kept", len(receipt.KeptNodes)),
		slog.Int("files", int(receipt.FilesChanged)))
	if run.SessionID != "" {
		s.publishEvent(ctx, log, topology.Event{
			Tenant: who.TenantID, Session: run.SessionID, ID: fmt.Sprintf("%s:settled:%s:%d", id, verb, len(receipt.KeptNodes)),
			Type: EventRunSettled, Source: topology.AgentOrchestrator, CorrelationID: runName(id),
			Text: fmt.Sprintf("run %s settled (%s): %d node(s) kept, %d discarded, %d unfinished; the result patch changes %d file(s)",
				runName(id), verb, len(receipt.KeptNodes), len(receipt.DiscardedNodes), len(receipt.UnfinishedNodes), receipt.FilesChanged),
			Data: map[string]any{"run": runName(id), "action": verb, "files_changed": int(receipt.FilesChanged)},
		})
	}
	return &orchestratorv1.SettleRunResponse{Run: r, Receipt: receipt}, nil
}

package orchestrator

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/protobuf/encoding/protojson"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/topology"
)

// Pipeline handoffs (spec F-23). An Engineer whose conversation reached its
// handoff threshold (or whose user asked) ends its pipeline with the state
// of all three stages instead of another turn. The Orchestrator closes that
// pipeline (its attempt is recorded as HANDED_OFF and does not count as a
// retry), stores the state in the Archivalist under pipeline_handoff, and
// dispatches the node again: the new pipeline gets the state in
// Node.handoff and starts from the old pipeline's files. The chain has no
// bound; each handoff's index counts it, and the user stops it as any task
// (/task <node> interrupt, cancel). The Architect is not asked: a handoff
// carries on the same task, so the workflow has nothing to adjust.

// CategoryPipelineHandoff is the Archivalist category of handoffs.
const CategoryPipelineHandoff = "pipeline_handoff"

// maxStoredHandoffBytes bounds a stored handoff.
const maxStoredHandoffBytes = 64 << 10

// handedState is what a node's next pipeline starts from.
type handedState struct {
	handoff *orchestratorv1.PipelineHandoff
	patch   string
}

// handedStates loads the last handoff of those nodes that have one.
func handedStates(ctx context.Context, q querier, tenant, runID string, nodeIDs []string) (map[string]handedState, error) {
	rows, err := q.Query(ctx, `SELECT node_id, handoff, coalesce(handoff_patch, '') FROM nodes
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND handoff IS NOT NULL`, tenant, runID, nodeIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]handedState{}
	for rows.Next() {
		var node, raw, patch string
		if err := rows.Scan(&node, &raw, &patch); err != nil {
			return nil, err
		}
		h, err := decodeHandoff(raw)
		if err != nil {
			return nil, fmt.Errorf("node %s: stored handoff: %w", node, err)
		}
		out[node] = handedState{handoff: h, patch: patch}
	}
	return out, rows.Err()
}

func decodeHandoff(raw string) (*orchestratorv1.PipelineHandoff, error) {
	h := &orchestratorv1.PipelineHandoff{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(raw), h); err != nil {
		return nil, err
	}
	return h, nil
}

// noteHandoff adds the event and the Archivalist record of an applied
// handoff to a decision's effects.
func (s *Service) noteHandoff(eff *effects, nodeID string, attempt int32, h *orchestratorv1.PipelineHandoff) {
	s.metrics.handoffs.Inc()
	old := pipeline.ID(eff.runID, nodeID, attempt)
	text := fmt.Sprintf("node %s: pipeline %s handed off (%s, handoff %d); a fresh pipeline carries on", nodeID,
		old, h.GetReason(), h.GetHandoffIndex())
	eff.event(fmt.Sprintf("%s:%s:%d:handed_off", eff.runID, nodeID, attempt), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_HANDED_OFF, eff.runID, text,
		&eventv1.NodeEvent{Node: nodeID, Attempt: attempt, State: orchestratorv1.NodeState_NODE_STATE_PENDING, HandoffIndex: h.GetHandoffIndex(),
			Reason: h.GetReason(), ContextUsage: h.GetContextUsage(), OldPipeline: old}))
	eff.archive = append(eff.archive, archivalistRecord(eff.tenant, eff.session, eff.user, eff.runID,
		fmt.Sprintf("%s:%s:%d:handoff", eff.runID, nodeID, attempt), CategoryPipelineHandoff,
		fmt.Sprintf("Pipeline handoff %d of %s/%s (%s)", h.GetHandoffIndex(), runName(eff.runID), nodeID, h.GetReason()),
		pipeline.HandoffText(h)))
}

// archive sends records (pipeline handoffs, workflow checkpoints) to the
// Archivalist. The message id makes a re-sent one a duplicate; a lost one
// loses the record only, not the state, which the run's rows keep.
func (s *Service) archive(ctx context.Context, log *slog.Logger, envs []*messagev1.Envelope) {
	if len(envs) == 0 {
		return
	}
	if err := topology.EnsureAgents(ctx, s.bus); err != nil {
		log.WarnContext(ctx, "provision the agents' inboxes", logx.Err(err))
		return
	}
	for _, env := range envs {
		if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, topology.AgentArchivalist), env.GetId(), env); err != nil {
			log.WarnContext(ctx, "send a record to the archivalist", slog.String("category", env.GetStoreRequest().GetCategory()), logx.Err(err))
		}
	}
}

// handoffOverLimit says whether a reported handoff goes beyond
// -orchestrator.max-handoffs.
func (s *Service) handoffOverLimit(h *orchestratorv1.PipelineHandoff) bool {
	return s.cfg.MaxHandoffs > 0 && int(h.GetHandoffIndex()) > s.cfg.MaxHandoffs
}

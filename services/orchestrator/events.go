package orchestrator

import (
	"context"
	"log/slog"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// The events the Orchestrator publishes on a run's session stream: each an
// eventv1.Event whose type says what happened and whose payload is a
// RunEvent (the run's steps) or a NodeEvent (a node's). A run outside a
// session publishes none.

// runEvent is an event of run runID with payload p (its run is filled).
func runEvent(typ eventv1.EventType, runID, text string, p *eventv1.RunEvent) *eventv1.Event {
	p.Run = runName(runID)
	return &eventv1.Event{Type: typ, Source: topology.AgentOrchestrator, CorrelationId: runName(runID), Text: text,
		Payload: &eventv1.Event_Run{Run: p}}
}

// nodeEvent is an event of a node of run runID with payload p (its run is
// filled).
func nodeEvent(typ eventv1.EventType, runID, text string, p *eventv1.NodeEvent) *eventv1.Event {
	p.Run = runName(runID)
	return &eventv1.Event{Type: typ, Source: topology.AgentOrchestrator, CorrelationId: runName(runID), Text: text,
		Payload: &eventv1.Event_Node{Node: p}}
}

// runStateOf and nodeStateOf are the API enums of stored states.
func runStateOf(state string) orchestratorv1.RunState {
	return orchestratorv1.RunState(orchestratorv1.RunState_value["RUN_STATE_"+state])
}

func nodeStateOf(state string) orchestratorv1.NodeState {
	return orchestratorv1.NodeState(orchestratorv1.NodeState_value["NODE_STATE_"+state])
}

// publishEvent appends ev to session's stream under id (which
// de-duplicates it); best effort: a failure is logged.
func (s *Service) publishEvent(ctx context.Context, log *slog.Logger, tenant, session, id string, ev *eventv1.Event) {
	if session == "" {
		return
	}
	ev.SessionId = session
	if _, err := topology.PublishEvent(ctx, s.bus, tenant, id, ev); err != nil {
		log.WarnContext(ctx, "publish session event", slog.String("type", ev.GetType().String()), logx.Err(err))
	}
}

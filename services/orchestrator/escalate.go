package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// escalate cancels a node that has not ended and asks the Architect for a
// corrective plan (spec F-11 option 4). A run without a session is refused
// before anything changes: there is no Architect conversation to ask.
func (s *Service) escalate(ctx context.Context, who identity.Identity, runID, nodeID string, n *taskNode, message string) error {
	run, err := getRun(ctx, s.db, who.TenantID, runID)
	if err != nil {
		return fmt.Errorf("load run: %w", err)
	}
	if run.SessionID == "" {
		return errRunHasNoSession.Withf("run %s has no session: there is no Architect conversation to escalate to", runName(runID))
	}
	if n.state == statePending || n.state == stateDispatched {
		if _, err := s.control(ctx, who.TenantID, runID, nodeID, actCancel); err != nil && !refused(err) {
			return fmt.Errorf("cancel node: %w", err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Corrective plan needed: task %s of %s could not be completed", nodeID, runName(runID))
	if n.pipeline != "" {
		var p orchestratorv1.PipelineStatus
		if protojson.Unmarshal([]byte(n.pipeline), &p) == nil && len(p.GetFeedback()) > 0 {
			fmt.Fprintf(&b, " after %d loop(s). Last feedback:\n%s", p.GetLoops(), truncateMiddle(p.GetFeedback()[len(p.GetFeedback())-1], 2000))
		}
	}
	if message != "" {
		b.WriteString("\nThe user says: " + message)
	}
	if err := s.askArchitect(ctx, who.TenantID, run, "escalate:"+nodeID+":"+ids.New(), b.String()); err != nil {
		return err
	}
	log := s.log.With(logx.KeyTenantID, who.TenantID, logx.KeyRunID, runID)
	s.publishEvent(ctx, log, who.TenantID, run.SessionID, ids.New(), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_ESCALATED, runID,
		fmt.Sprintf("node %s escalated to the Architect", nodeID), &eventv1.NodeEvent{Node: nodeID, User: who.UserID}))
	return nil
}

// askArchitect sends a request to the Architect's inbox as the run's user
// (a USER_INPUT envelope, the Architect's plan request, whose correlation
// id names the run), so that it drafts a plan awaiting approval in the
// run's session.
func (s *Service) askArchitect(ctx context.Context, tenant string, run *runRow, key, text string) error {
	env := &messagev1.Envelope{
		Id: ids.New(), CorrelationId: runName(run.ID), TenantId: tenant, SessionId: run.SessionID, UserId: run.UserID,
		Source: topology.AgentOrchestrator, Target: topology.AgentArchitect, Type: messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt: timestamppb.Now(), Priority: messagev1.Priority_PRIORITY_PIPELINE,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
	defer cancel()
	if err := topology.EnsureAgents(pctx, s.bus); err != nil {
		return fmt.Errorf("provision the agents' inboxes: %w", err)
	}
	if _, err := s.bus.Publish(pctx, topology.InboxSubject(s.bus, topology.AgentArchitect), run.ID+":"+key, env); err != nil {
		return fmt.Errorf("send to the Architect: %w", err)
	}
	return nil
}

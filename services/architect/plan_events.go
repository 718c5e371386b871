package architect

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// A plan's steps on its session's event stream: awaiting approval (once
// per version), revised (once per version after the first), approved,
// rejected. Each event's de-duplication id is derived from the plan (and
// version), so publishing twice is harmless.

// eventIDs name each plan event type in its de-duplication id.
var eventIDs = map[eventv1.EventType]string{
	eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL: "plan.awaiting_approval",
	eventv1.EventType_EVENT_TYPE_PLAN_APPROVED:          "plan.approved",
	eventv1.EventType_EVENT_TYPE_PLAN_REJECTED:          "plan.rejected",
	eventv1.EventType_EVENT_TYPE_PLAN_REVISED:           "plan.revised",
}

// perVersion are the plan events published once per version.
var perVersion = map[eventv1.EventType]bool{
	eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL: true,
	eventv1.EventType_EVENT_TYPE_PLAN_REVISED:           true,
}

// announce publishes that p awaits approval.
func (s *Service) announce(ctx context.Context, p plan) error {
	n := len(p.DAG.GetNodes())
	text := fmt.Sprintf("Plan ready for approval: %s (%d %s).%s Approve with POST /v1/%s:approve, or ask for changes with POST /v1/%[5]s:revise",
		p.Title, n, plural(n, "task", "tasks"), criteriaSummary(p.Intent), p.name())
	if len(p.Notes) > 0 {
		text += ". Note: " + strings.Join(p.Notes, "; ")
	}
	return s.publishPlanEvent(ctx, p, eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL, text)
}

// publishRevision records p's new version on the session stream: what
// changed, then that it awaits approval. The version is stored already,
// so a bus failure is only logged.
func (s *Service) publishRevision(ctx context.Context, p plan) {
	text := fmt.Sprintf("Plan revised to version %d: %s", p.Version, p.Diff)
	for _, publish := range []func() error{
		func() error { return s.publishPlanEvent(ctx, p, eventv1.EventType_EVENT_TYPE_PLAN_REVISED, text) },
		func() error { return s.announce(ctx, p) },
	} {
		if err := publish(); err != nil {
			s.log.WarnContext(ctx, "publish plan event", slog.String("plan", p.name()), logx.Err(err))
		}
	}
}

// publishDecision records an approval or rejection on the session stream.
// The decision is committed already, so a bus failure is only logged.
func (s *Service) publishDecision(ctx context.Context, p plan, typ eventv1.EventType, text string) {
	if err := s.publishPlanEvent(ctx, p, typ, text); err != nil {
		s.log.WarnContext(ctx, "publish plan event", slog.String("type", typ.String()), slog.String("plan", p.name()), logx.Err(err))
	}
}

// publishPlanEvent appends a plan event of type typ for p to its
// session's stream.
func (s *Service) publishPlanEvent(ctx context.Context, p plan, typ eventv1.EventType, text string) error {
	id := p.ID + "." + eventIDs[typ]
	if perVersion[typ] {
		id += ".v" + strconv.Itoa(int(p.Version))
	}
	ev := &eventv1.Event{
		SessionId:     p.SessionID,
		Type:          typ,
		Source:        topology.AgentArchitect,
		CorrelationId: p.CorrelationID,
		Text:          text,
		Payload:       &eventv1.Event_Plan{Plan: planEvent(p)},
	}
	if typ == eventv1.EventType_EVENT_TYPE_PLAN_REVISED {
		ev.Payload = &eventv1.Event_PlanRevised{PlanRevised: &eventv1.PlanRevisedEvent{
			Plan: p.name(), Version: p.Version, Feedback: p.Feedback, Diff: p.Diff}}
	}
	_, err := topology.PublishEvent(ctx, s.bus, p.TenantID, id, ev)
	return err
}

// planEvent is what a plan event says of p.
func planEvent(p plan) *eventv1.PlanEvent {
	return &eventv1.PlanEvent{
		Plan:             p.name(),
		Title:            p.Title,
		Version:          p.Version,
		Nodes:            int32(len(p.DAG.GetNodes())),
		Planner:          p.Planner,
		FeatureDomain:    p.Intent.GetFeatureDomain(),
		InferredCriteria: inferredCriteria(p.Intent),
		Run:              p.Run,
		Reason:           p.RejectReason,
	}
}

// inferredCriteria lists the criteria the plan's feature domain added.
func inferredCriteria(pi *architectv1.PlanIntent) []string {
	var out []string
	for _, c := range pi.GetSuccessCriteria() {
		if c.GetSource() == messagev1.CriterionSource_CRITERION_SOURCE_INFERRED {
			out = append(out, c.GetCriterion())
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// criteriaSummary says, in a sentence, which criteria the plan was drafted
// against and where the inferred ones came from.
func criteriaSummary(pi *architectv1.PlanIntent) string {
	inferred := inferredCriteria(pi)
	stated := len(pi.GetSuccessCriteria()) - len(inferred)
	switch {
	case len(inferred) > 0:
		return fmt.Sprintf(" Success criteria: %d stated, %d expected of %s (%s).", stated, len(inferred), pi.GetFeatureDomain(), strings.Join(inferred, "; "))
	case strings.HasPrefix(pi.GetInference(), inferenceUnavailable):
		return fmt.Sprintf(" Success criteria: %d stated; what %s implies is not included (%s).", stated, pi.GetFeatureDomain(),
			strings.TrimPrefix(pi.GetInference(), inferenceUnavailable))
	case stated > 0:
		return fmt.Sprintf(" Success criteria: %d stated.", stated)
	}
	return ""
}

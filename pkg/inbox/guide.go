package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/confidence"
	"sylk.dev/sylk/pkg/topology"
)

// An agent that cannot help with a request, or cannot help until the user
// says more, tells the Guide (spec E-02, A-07, A-08): the Guide follows a
// decline to the suggested agent, within its hop limit, and delivers a
// question to the user, whose answer comes back to this inbox.

// Clarified reports whether env is the user's answer to this agent's own
// question, and returns the request asked (which the Guide carries in the
// structured intent) and the answer.
func Clarified(env *messagev1.Envelope) (original, answer string, ok bool) {
	cr := env.GetClarificationResponse()
	if cr == nil && env.GetType() != messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_RESPONSE {
		return "", "", false
	}
	return strings.TrimSpace(env.GetStructuredIntent().GetOriginalRequest()), strings.TrimSpace(cr.GetAnswer()), true
}

// Visited reports whether agent already declined the request env carries.
func Visited(env *messagev1.Envelope, agent string) bool {
	for _, h := range env.GetRerouteHistory() {
		if h.GetFrom() == agent {
			return true
		}
	}
	return false
}

// toGuide sends the handler's decline or question to the Guide's inbox,
// de-duplicated on env's id so that a redelivered envelope never declines
// or asks twice.
func (in *inbox) toGuide(ctx context.Context, log *slog.Logger, env *messagev1.Envelope, res Result) (string, error) {
	out, outcome := in.guideEnvelope(env, res)
	if _, err := in.bus.Publish(ctx, topology.InboxSubject(in.bus, topology.AgentGuide), out.GetId(), out); err != nil {
		return OutcomeFailed, fmt.Errorf("send the %s of envelope %q to the guide: %w", outcome, env.GetId(), err)
	}
	log.InfoContext(ctx, "request handed back to the guide", slog.String("outcome", outcome),
		slog.String("suggested_target", out.GetRerouteRequest().GetSuggestedTarget()))
	if res.Outcome != "" {
		return res.Outcome, nil
	}
	return outcome, nil
}

// guideEnvelope is env's decline or question as the Guide reads it: the
// same correlation, session, user and intent (the request is its original
// when the Guide extracted none), the chain with this agent's entry and,
// for a decline, the history with this agent's hop. An agent never
// suggests itself or one that declined already: the Guide then picks.
func (in *inbox) guideEnvelope(env *messagev1.Envelope, res Result) (*messagev1.Envelope, string) {
	correlation := env.GetCorrelationId()
	if correlation == "" {
		correlation = env.GetId()
	}
	intent := proto.CloneOf(env.GetStructuredIntent())
	if intent == nil {
		intent = &messagev1.StructuredIntent{}
	}
	if intent.GetOriginalRequest() == "" {
		intent.OriginalRequest, _ = Question(env)
	}
	entry := proto.CloneOf(res.Confidence)
	if entry != nil && entry.GetAgent() == "" {
		entry.Agent = in.cfg.Agent
	}
	out := &messagev1.Envelope{
		CorrelationId: correlation, ParentId: env.GetId(), TenantId: env.GetTenantId(), SessionId: env.GetSessionId(),
		UserId: env.GetUserId(), Source: in.cfg.Agent, Target: topology.AgentGuide, CreatedAt: timestamppb.Now(),
		Priority: env.GetPriority(), Metadata: env.GetMetadata(), StructuredIntent: intent, Repository: env.GetRepository(),
		ConfidenceChain: confidence.Append(env.GetConfidenceChain(), entry),
		RerouteHistory:  append([]*messagev1.RerouteHop(nil), env.GetRerouteHistory()...),
	}
	if rr := res.Reroute; rr != nil {
		rr = proto.CloneOf(rr)
		rr.Source = in.cfg.Agent
		if rr.GetSuggestedTarget() == in.cfg.Agent || Visited(env, rr.GetSuggestedTarget()) {
			rr.SuggestedTarget = ""
		}
		out.Id, out.Type = env.GetId()+":reroute", messagev1.MessageType_MESSAGE_TYPE_REROUTE_REQUEST
		out.RerouteHistory = append(out.RerouteHistory, &messagev1.RerouteHop{From: in.cfg.Agent, Reason: rr.GetReason(), To: rr.GetSuggestedTarget()})
		out.Payload = &messagev1.Envelope_RerouteRequest{RerouteRequest: rr}
		return out, OutcomeRerouted
	}
	cr := proto.CloneOf(res.Clarify)
	cr.RequestingAgent = in.cfg.Agent
	out.Id, out.Type = env.GetId()+":clarify", messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_REQUEST
	out.Payload = &messagev1.Envelope_ClarificationRequest{ClarificationRequest: cr}
	return out, OutcomeClarify
}

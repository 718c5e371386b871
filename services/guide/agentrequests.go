package guide

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/confidence"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Agents ask one another through the Guide (spec ): a request
// is routed to the agent that owns it and tracked, and its answer goes back
// to the agent that asked; an answer addressed to an agent is relayed to
// it unchanged.

// relayAnswer delivers an answer to the agent that asked, matched by
// correlation id, unchanged: the Guide adds no confidence entry (spec A-25).
// An answer for the user lands on the session's event stream, with the
// chain's cumulative confidence, its band and the suggested action.
func (s *Service) relayAnswer(ctx context.Context, sess session, env *messagev1.Envelope) (string, error) {
	to := env.GetTarget()
	if to == "" || to == authorGuide {
		if p, found, err := getPending(ctx, s.db, sess.TenantID, env.GetCorrelationId(), false); err != nil {
			return "", err
		} else if found {
			if prev := decodeEnvelope(p.Envelope); prev != nil {
				to = prev.GetSource()
			}
		}
	}
	if to == "" || to == authorGuide || to == authorUser {
		a := proto.CloneOf(env.GetAgentAnswer())
		a.Agent = firstNonEmpty(a.GetAgent(), env.GetSource())
		confidence.Annotate(a, env.GetConfidenceChain())
		ev := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, sess.ID, env.GetCorrelationId(), a.GetText())
		ev.Source = a.Agent
		ev.Payload = &eventv1.Event_MessageAnswered{MessageAnswered: a}
		if err := s.publishEvent(ctx, sess.TenantID, env.GetId()+".relayed", ev); err != nil {
			return "", err
		}
		return "relayed", nil
	}
	// Only an agent's inbox is read: an answer for anything else would
	// wait on the stream for good.
	if !routable(to) {
		return s.reject(ctx, env, fmt.Sprintf("no agent %q to relay the answer to", truncate(to, 60)))
	}
	// The envelope keeps its id; the de-duplication id differs from the one
	// it had on its way into the Guide's inbox (the same stream).
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, strings.ToLower(to)), "relay:"+env.GetId(), env); err != nil {
		return "", err
	}
	return "relayed", nil
}

// requestTypes map the knowledge requests agents send through the Guide
// (spec A-32, E-06) to the agent that owns them; "" for a consultation,
// which is classified.
var requestTypes = map[messagev1.MessageType]string{
	messagev1.MessageType_MESSAGE_TYPE_CONTEXT_REQUEST:  topology.AgentLibrarian,
	messagev1.MessageType_MESSAGE_TYPE_HISTORY_REQUEST:  topology.AgentArchivalist,
	messagev1.MessageType_MESSAGE_TYPE_RESEARCH_REQUEST: topology.AgentAcademic,
	messagev1.MessageType_MESSAGE_TYPE_CONSULT_REQUEST:  "classify",
}

// responseTypes are the answers to requestTypes.
var responseTypes = map[messagev1.MessageType]messagev1.MessageType{
	messagev1.MessageType_MESSAGE_TYPE_CONTEXT_REQUEST:  messagev1.MessageType_MESSAGE_TYPE_CONTEXT_RESPONSE,
	messagev1.MessageType_MESSAGE_TYPE_HISTORY_REQUEST:  messagev1.MessageType_MESSAGE_TYPE_HISTORY_RESPONSE,
	messagev1.MessageType_MESSAGE_TYPE_RESEARCH_REQUEST: messagev1.MessageType_MESSAGE_TYPE_RESEARCH_RESPONSE,
	messagev1.MessageType_MESSAGE_TYPE_CONSULT_REQUEST:  messagev1.MessageType_MESSAGE_TYPE_CONSULT_RESPONSE,
}

// routeAgentRequest routes an agent's knowledge request or ambiguous
// consultation to the agent that owns it and tracks it, so that the answer
// goes back to the agent that asked (spec ).
func (s *Service) routeAgentRequest(ctx context.Context, sess session, env *messagev1.Envelope) (string, error) {
	text := firstNonEmpty(env.GetUserInput().GetText(), env.GetStructuredIntent().GetOriginalRequest())
	from := env.GetSource()
	if text == "" || from == "" {
		return s.reject(ctx, env, "an agent request needs a text and the agent asking")
	}
	to := requestTypes[env.GetType()]
	if t := strings.ToLower(env.GetTarget()); t != "" && t != authorGuide && routable(t) {
		to = t
	}
	conf, reason := 1.0, "request type "+env.GetType().String()
	if to == "" || to == "classify" {
		cl, err := s.classifier.Classify(ctx, text)
		if err != nil {
			return "", err
		}
		if cl.Target == "" || cl.Confidence < s.cfg.RouteThreshold {
			return s.reject(ctx, env, fmt.Sprintf("could not tell which agent owns the request (confidence %.2f)", cl.Confidence))
		}
		to, conf, reason = cl.Target, cl.Confidence, cl.Reason
	}
	// The routed request gets its own correlation id, so that it cannot
	// collide with a user request the asking agent is working on; the
	// answer goes back with the agent's own.
	corr := idFor(env.GetId() + ".correlation")
	out := s.onward(sess, env, env.GetId()+".route", corr, to, text)
	out.Source = from
	out.RoutedRequest = &messagev1.RoutedRequest{RequestedBy: from, RequestType: env.GetType(),
		RequestCorrelation: firstNonEmpty(env.GetCorrelationId(), env.GetId())}
	raw, err := proto.Marshal(out)
	if err != nil {
		return "", err
	}
	// A request for a suspended session starts frozen, as its session's
	// other requests are: its deadline runs once the session is resumed.
	state := statePending
	if sess.State == stateSuspended {
		state = stateFrozen
	}
	if err := trackPending(ctx, s.db, pendingRequest{CorrelationID: corr, TenantID: sess.TenantID, UserID: sess.UserID,
		SessionID: sess.ID, Target: to, IntentType: env.GetType().String(), Original: text, Envelope: raw,
		Deadline: s.now().Add(s.cfg.RequestTimeout), CreateTime: s.now(), State: state}); err != nil {
		return "", err
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_ROUTED, sess.ID, corr, fmt.Sprintf("Routed the %s's request to the %s", from, to))
	ev.Payload = &eventv1.Event_MessageRouted{MessageRouted: &eventv1.MessageRouted{Target: to, RequestedBy: from,
		Confidence: conf, Reason: reason, Tier: tierClassifier}}
	if err := s.publishEvent(ctx, sess.TenantID, out.GetId()+".routed", ev); err != nil {
		return "", err
	}
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, to), out.GetId(), out); err != nil {
		return "", err
	}
	return "routed", nil
}

// answerRequester sends an answer to the agent whose request the Guide
// routed, as the response type of its request, with the asking agent's
// correlation id.
func (s *Service) answerRequester(ctx context.Context, p pendingRequest, ev *eventv1.Event) {
	prev := decodeEnvelope(p.Envelope)
	rr := prev.GetRoutedRequest()
	if rr.GetRequestedBy() == "" {
		return
	}
	typ, ok := responseTypes[rr.GetRequestType()]
	if !ok {
		typ = messagev1.MessageType_MESSAGE_TYPE_CONSULT_RESPONSE
	}
	a := proto.CloneOf(ev.GetMessageAnswered())
	if a == nil {
		a = &messagev1.AgentAnswer{Text: ev.GetText()}
	}
	a.Agent = firstNonEmpty(a.GetAgent(), ev.GetSource(), p.Target)
	resp := &messagev1.Envelope{
		Id:              idFor(p.CorrelationID + ".response"),
		CorrelationId:   firstNonEmpty(rr.GetRequestCorrelation(), p.CorrelationID),
		ParentId:        prev.GetId(),
		TenantId:        p.TenantID,
		SessionId:       p.SessionID,
		UserId:          p.UserID,
		Source:          firstNonEmpty(ev.GetSource(), p.Target),
		Target:          rr.GetRequestedBy(),
		Type:            typ,
		CreatedAt:       timestamppb.New(s.now()),
		Status:          messagev1.MessageStatus_MESSAGE_STATUS_COMPLETED,
		Attempt:         1,
		Priority:        prev.GetPriority(),
		ConfidenceChain: prev.GetConfidenceChain(),
		Payload:         &messagev1.Envelope_AgentAnswer{AgentAnswer: a},
	}
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, resp.GetTarget()), resp.GetId(), resp); err != nil {
		s.log.WarnContext(ctx, "send answer to the requesting agent", logx.Err(err))
		_ = s.deadLetter(ctx, resp, "could not deliver the answer: "+truncate(err.Error(), 200)) // logged
	}
}

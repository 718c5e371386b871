package guide

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
)

// sealEnvelope builds a routed message's envelope once, to be stored with
// it and published as stored.
func (s *Service) sealEnvelope(who identity.Identity, m *message) error {
	m.Envelope = nil
	if m.Route.Target == "" || m.Route.Target == authorGuide || m.Route.Cached {
		return nil
	}
	// A route, unlike the answer to an agent's own question, goes only to
	// an inbox that a service reads (targets.go).
	if _, ok := inboxConsumers[m.Route.Target]; !ok && m.AnswerTo == nil {
		return fmt.Errorf("route to the %s: no service reads its inbox", m.Route.Target)
	}
	b, err := proto.Marshal(s.envelope(who, *m))
	if err != nil {
		return fmt.Errorf("encode envelope: %w", err)
	}
	m.Envelope = b
	return nil
}

// envelope is what a routed message looks like in the target's inbox: the
// structured intent, extracted once here, and the confidence chain the
// Guide starts (spec ).
func (s *Service) envelope(who identity.Identity, m message) *messagev1.Envelope {
	// Annotations for tracing and people reading the envelope; no agent
	// reads them (what an agent acts on is typed).
	md := map[string]string{"message": messageName(m.SessionID, m.ID)}
	if m.Route.KnowledgeIntent != "" {
		md["routing.knowledge_intent"] = m.Route.KnowledgeIntent
	}
	if m.Route.TimeScope != "" {
		md["routing.time_scope"] = m.Route.TimeScope
	}
	if m.Route.Tier == tierSlashCommand {
		md["command"] = strings.TrimPrefix(commandName(m.Text), "/")
	}
	text := m.Text
	if m.RouteText != "" {
		text = m.RouteText
	}
	if c := m.AnswerTo; c != nil {
		return &messagev1.Envelope{
			Id:            deref(m.EnvelopeID),
			CorrelationId: c.CorrelationID,
			TenantId:      who.TenantID,
			SessionId:     m.SessionID,
			UserId:        who.UserID,
			Source:        authorUser,
			Target:        c.RequestingAgent,
			Type:          messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_RESPONSE,
			CreatedAt:     timestamppb.New(m.CreateTime),
			Status:        messagev1.MessageStatus_MESSAGE_STATUS_PENDING,
			Attempt:       1,
			MaxAttempts:   1,
			Priority:      messagev1.Priority_PRIORITY_USER,
			Metadata:      map[string]string{"message": messageName(m.SessionID, m.ID), "clarification": clarificationName(m.SessionID, c.ID)},
			Repository:    m.Repository,
			// The request the agent asked about, so that it answers that
			// request refined by the answer (pkg/inbox Question), and the
			// user's word as the chain's first entry.
			StructuredIntent: &messagev1.StructuredIntent{OriginalRequest: c.Original},
			ConfidenceChain: []*messagev1.ConfidenceEntry{{Agent: authorGuide, Confidence: m.Route.Confidence,
				Reason: m.Route.Reason}},
			Payload: &messagev1.Envelope_ClarificationResponse{ClarificationResponse: &messagev1.ClarificationResponse{
				Answer: m.Text,
			}},
		}
	}
	return &messagev1.Envelope{
		Id:            deref(m.EnvelopeID),
		CorrelationId: m.CorrelationID,
		TenantId:      who.TenantID,
		SessionId:     m.SessionID,
		UserId:        who.UserID,
		Source:        authorGuide,
		Target:        m.Route.Target,
		Type:          messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt:     timestamppb.New(m.CreateTime),
		Deadline:      timestamppb.New(m.CreateTime.Add(s.cfg.RequestTimeout)),
		Status:        messagev1.MessageStatus_MESSAGE_STATUS_PENDING,
		Attempt:       1,
		MaxAttempts:   1,
		Priority:      messagev1.Priority_PRIORITY_USER,
		Metadata:      md,
		PreRoute:      m.PreRoute,
		Repository:    m.Repository,
		StructuredIntent: &messagev1.StructuredIntent{
			OriginalRequest: text,
			IntentType:      m.Route.IntentType,
			Subject:         m.IntentSubject,
			KeyConstraints:  m.Constraints,
			SuccessCriteria: m.Criteria,
			KnowledgeIntent: m.Route.KnowledgeIntent,
			TimeScope:       m.Route.TimeScope,
		},
		ConfidenceChain: []*messagev1.ConfidenceEntry{{
			Agent:      authorGuide,
			Confidence: m.Route.Confidence,
			Reason:     m.Route.Reason,
		}},
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

// onward is an agent's request env as the Guide sends it on to agent to,
// under an id derived from id: the same intent, confidence chain, hops,
// priority, annotations and repository (the session's when env names
// none), the text to do, and a deadline of its own.
func (s *Service) onward(sess session, env *messagev1.Envelope, id, correlation, to, text string) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:               idFor(id),
		CorrelationId:    correlation,
		ParentId:         env.GetId(),
		TenantId:         sess.TenantID,
		SessionId:        sess.ID,
		UserId:           sess.UserID,
		Source:           authorGuide,
		Target:           to,
		Type:             messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt:        timestamppb.New(s.now()),
		Deadline:         timestamppb.New(s.now().Add(s.cfg.RequestTimeout)),
		Status:           messagev1.MessageStatus_MESSAGE_STATUS_PENDING,
		Attempt:          1,
		MaxAttempts:      1,
		Priority:         env.GetPriority(),
		Metadata:         env.GetMetadata(),
		StructuredIntent: env.GetStructuredIntent(),
		ConfidenceChain:  env.GetConfidenceChain(),
		RerouteHistory:   env.GetRerouteHistory(),
		Repository:       firstNonEmpty(env.GetRepository(), sess.Repository),
		Payload:          &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

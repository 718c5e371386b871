package guide

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Routing tiers, as reported in Route.tier.
const (
	tierSlashCommand  = "slash_command"
	tierSkill         = "skill"
	tierCache         = "cache"
	tierClassifier    = "classifier"
	tierClarification = "clarification"
)

// agentPurposes describe the routable agents when the Guide asks the user
// to choose, in the order they are offered.
var agentPurposes = []struct{ agent, purpose string }{
	{topology.AgentLibrarian, "search this codebase"},
	{topology.AgentArchivalist, "recall what was done or decided before"},
	{topology.AgentAcademic, "look up external knowledge (documentation, best practices, research)"},
	{topology.AgentArchitect, "plan a change to the code"},
}

func (m message) proto() *guidev1.Message {
	return &guidev1.Message{
		Name:          messageName(m.SessionID, m.ID),
		Id:            m.ID,
		Text:          m.Text,
		Author:        m.Author,
		CreateTime:    timestamppb.New(m.CreateTime),
		CorrelationId: m.CorrelationID,
	}
}

func (m message) response() *guidev1.SendMessageResponse {
	return &guidev1.SendMessageResponse{
		Message:       m.proto(),
		Route:         m.Route.proto(),
		Reply:         m.Reply,
		CorrelationId: m.CorrelationID,
	}
}

// replyMessage is the Guide's reply to m, stored with it.
func (s *Service) replyMessage(m message) message {
	return message{
		ID:            *m.ReplyID,
		SessionID:     m.SessionID,
		Author:        authorGuide,
		Text:          m.Reply,
		CorrelationID: m.CorrelationID,
		CreateTime:    s.now(),
	}
}

// clarification builds the question asked when routing is ambiguous and the
// agents offered as answers: the plausible ones, or all when fewer than two
// matched.
func clarification(c Classification) (string, []string) {
	options := slices.Clone(c.Candidates)
	if len(options) > 3 {
		options = options[:3]
	}
	if len(options) < 2 {
		for _, p := range agentPurposes {
			if !slices.Contains(options, p.agent) {
				options = append(options, p.agent)
			}
		}
	}
	parts := make([]string, 0, len(options))
	for _, o := range options {
		for _, p := range agentPurposes {
			if p.agent == o {
				parts = append(parts, fmt.Sprintf("%s (%s)", p.purpose, p.agent))
			}
		}
	}
	var list string
	switch len(parts) {
	case 0:
	case 1:
		list = parts[0]
	default:
		list = strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
	}
	return fmt.Sprintf("I am not sure who should handle this. Do you want to %s? Reply with more detail.", list), options
}

// replay answers a retried request with its stored outcome, finishing its
// dispatch if the first attempt could not: the stored envelope is published
// again as it was (the inbox drops it if it arrived the first time).
func (s *Service) replay(ctx context.Context, who identity.Identity, m message) (*guidev1.SendMessageResponse, error) {
	// A message routed to an agent without an envelope was answered from
	// the answer cache.
	m.Route.Cached = m.Envelope == nil && m.Route.Target != "" && m.Route.Target != authorGuide && m.Reply != ""
	if m.Undispatched && m.Envelope == nil {
		// Stored before envelopes were: rebuilt from the stored route.
		if err := s.sealEnvelope(who, &m); err != nil {
			return nil, apierr.Status(ctx, s.log, "send message", err)
		}
	}
	if m.Undispatched {
		if err := s.dispatch(ctx, who, m); err != nil {
			return nil, err
		}
	}
	return m.response(), nil
}

// dispatch publishes a handled message's events, in order, and its envelope
// when it was routed, then marks it dispatched. Every publication carries a
// de-duplication id derived from the message, so a retry never duplicates.
func (s *Service) dispatch(ctx context.Context, who identity.Identity, m message) error {
	events := outcomeEvents(m)
	batch := make([]outbound, 0, len(events)+1)
	for _, e := range events {
		o, err := s.eventOut(who.TenantID, e.id, e.ev)
		if err != nil {
			return s.busDown(ctx, m, err)
		}
		batch = append(batch, o)
	}
	if m.Envelope != nil {
		env := &messagev1.Envelope{}
		if err := proto.Unmarshal(m.Envelope, env); err != nil {
			return s.busDown(ctx, m, fmt.Errorf("stored envelope: %w", err))
		}
		batch = append(batch, outbound{subject: topology.InboxSubject(s.bus, env.GetTarget()), id: env.GetId(), msg: env})
	}
	if err := s.publishBatch(ctx, batch); err != nil {
		return s.busDown(ctx, m, err)
	}
	// Everything is on the bus; the outbox row only spares a retry and the
	// outbox relay from republishing duplicates that the streams drop, so it
	// is deleted later, in a batch.
	s.marks.add(who.TenantID, m.ID)
	return nil
}

// idEvent is an event and its de-duplication id.
type idEvent struct {
	id string
	ev *eventv1.Event
}

// outcomeEvents are the events of a handled message, in order: it was
// received, then answered by the Guide (a command), turned into a question
// for the user, or routed (and answered from the cache).
func outcomeEvents(m message) []idEvent {
	name := messageName(m.SessionID, m.ID)
	received := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_RECEIVED, m.SessionID, m.CorrelationID, m.Text)
	received.Payload = &eventv1.Event_MessageReceived{MessageReceived: &eventv1.MessageReceived{Message: name, Author: authorUser}}
	out := []idEvent{{m.ID + ".received", received}}
	switch {
	case m.Route.Tier == tierSlashCommand && m.Envelope == nil:
		ev := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, m.SessionID, m.CorrelationID, m.Reply)
		ev.Payload = &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{Agent: authorGuide, Text: m.Reply,
			Message: messageName(m.SessionID, deref(m.ReplyID)), InReplyTo: name}}
		return append(out, idEvent{m.ID + ".answered", ev})
	case m.Route.Target == "":
		q := &eventv1.ClarificationRequested{RequestingAgent: authorGuide, Options: m.Options, Confidence: m.Route.Confidence,
			Message: messageName(m.SessionID, deref(m.ReplyID)), InReplyTo: name, Reason: m.ClarifyReason}
		if m.ClarificationID != "" {
			q.Clarification = clarificationName(m.SessionID, m.ClarificationID)
		}
		ev := newEvent(eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED, m.SessionID, m.CorrelationID, m.Reply)
		ev.Payload = &eventv1.Event_ClarificationRequested{ClarificationRequested: q}
		return append(out, idEvent{m.ID + ".clarification", ev})
	}
	routed := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_ROUTED, m.SessionID, m.CorrelationID,
		fmt.Sprintf("Routed to the %s (%s, confidence %.2f)", m.Route.Target, m.Route.IntentType, m.Route.Confidence))
	routed.Payload = &eventv1.Event_MessageRouted{MessageRouted: m.Route.routed(name)}
	out = append(out, idEvent{m.ID + ".routed", routed})
	if m.Route.Cached {
		a := m.CachedAnswer
		if a == nil {
			// Replayed from the store, which keeps the reply only.
			a = &messagev1.AgentAnswer{Agent: m.Route.Target, Text: m.Reply}
		}
		a = proto.CloneOf(a)
		a.Cached = true
		cached := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, m.SessionID, m.CorrelationID, m.Reply)
		cached.Source = m.Route.Target
		cached.Payload = &eventv1.Event_MessageAnswered{MessageAnswered: a}
		out = append(out, idEvent{m.ID + ".cached", cached})
	}
	return out
}

func (s *Service) busDown(ctx context.Context, m message, err error) error {
	s.log.ErrorContext(ctx, "publish message outcome", slog.String(logx.KeySessionID, m.SessionID),
		slog.String(logx.KeyCorrelationID, m.CorrelationID), logx.Err(err))
	if ctx.Err() != nil {
		return apierr.Status(ctx, s.log, "send message", ctx.Err())
	}
	msg := fmt.Sprintf("event bus unavailable; message %s is stored", messageName(m.SessionID, m.ID))
	if m.RequestID != nil {
		msg += "; retry with the same request_id to finish routing it"
	}
	return apierr.Status(ctx, s.log, "send message", apierr.Unavailable(apierr.ReasonBusUnavailable, "%s", msg))
}

// sealEnvelope builds a routed message's envelope once, to be stored with
// it and published as stored.
func (s *Service) sealEnvelope(who identity.Identity, m *message) error {
	m.Envelope = nil
	if m.Route.Target == "" || m.Route.Target == authorGuide || m.Route.Cached {
		return nil
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
		StructuredIntent: &messagev1.StructuredIntent{
			OriginalRequest: text,
			IntentType:      m.Route.IntentType,
			Subject:         m.IntentSubject,
			KeyConstraints:  m.Constraints,
			SuccessCriteria: m.Criteria,
		},
		ConfidenceChain: []*messagev1.ConfidenceEntry{{
			Agent:      authorGuide,
			Confidence: m.Route.Confidence,
			Reason:     m.Route.Reason,
		}},
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ListMessages returns a session's messages, oldest first.
func (s *Service) ListMessages(ctx context.Context, req *guidev1.ListMessagesRequest) (*guidev1.ListMessagesResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sid, err := parseSessionName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultMessagePageSize, maxMessagePageSize)
	if err != nil {
		return nil, err
	}
	var after *messageCursor
	if tok := req.GetPageToken(); tok != "" {
		t, id, err := decodeCursor(tok)
		if err != nil {
			return nil, err
		}
		after = &messageCursor{CreateTime: t, ID: id}
	}
	o := ownerOf(who)
	if _, err := getSession(ctx, s.db, o, sid, false); err != nil {
		return nil, apierr.Status(ctx, s.log, "list messages", err)
	}
	rows, err := listMessages(ctx, s.db, o, sid, after, size+1)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list messages", err)
	}
	resp := &guidev1.ListMessagesResponse{}
	if len(rows) > size {
		rows = rows[:size]
		last := rows[len(rows)-1]
		resp.NextPageToken = encodeCursor(last.CreateTime, last.ID)
	}
	for _, m := range rows {
		resp.Messages = append(resp.Messages, m.proto())
	}
	return resp, nil
}

// replayRequest answers a message whose request id was stored before: with
// the stored outcome when the text is the same, else AlreadyExists, so
// that a new message sent under a reused id is not silently dropped.
func (s *Service) replayRequest(ctx context.Context, who identity.Identity, stored message, requestID, text string) (*guidev1.SendMessageResponse, error) {
	if stored.Text != text {
		name := messageName(stored.SessionID, stored.ID)
		return nil, apierr.Status(ctx, s.log, "send message", apierr.New(codes.AlreadyExists, reasonRequestIDReused,
			"request_id %q was used for another message (%s); use a new id", requestID, name).With("resource", name))
	}
	return s.replay(ctx, who, stored)
}

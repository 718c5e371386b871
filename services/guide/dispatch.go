package guide

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// A handled message is dispatched once stored: its events and, when it was
// routed, its envelope are published together, each under a
// de-duplication id derived from the message, so that a retry or the
// outbox relay publishes it again without duplicates.

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
	case m.Route.Target == authorGuide && m.Envelope == nil:
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

package guide

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/topology"
)

// contextReroute marks the Guide's question after too many reroutes.
const contextReroute = "reroute"

// handleReroute follows a declining agent's suggested target while the
// reroute history is short, and asks the user once it reaches the limit,
// listing each hop's reason (spec, E-03).
func (s *Service) handleReroute(ctx context.Context, sess session, env *messagev1.Envelope) (string, error) {
	rr := env.GetRerouteRequest()
	from := rr.GetSource()
	if from == "" {
		from = env.GetSource()
	}
	history := slices.Clone(env.GetRerouteHistory())
	if n := len(history); n == 0 || history[n-1].GetFrom() != from {
		// The declining agent did not append its hop; the Guide does.
		history = append(history, &messagev1.RerouteHop{From: from, Reason: rr.GetReason(), To: rr.GetSuggestedTarget()})
	}
	original := env.GetStructuredIntent().GetOriginalRequest()
	var pending pendingRequest
	var found bool
	var err error
	if corr := env.GetCorrelationId(); corr != "" {
		if pending, found, err = getPending(ctx, s.db, sess.TenantID, corr, false); err != nil {
			return "", err
		}
	}
	if original == "" && found {
		original = pending.Original
	}
	// A reroute is an explicit redirect: a routing failure (spec A-33).
	to := strings.ToLower(rr.GetSuggestedTarget())
	var classified string
	if found {
		classified = pending.IntentType
	}
	if to == "" || !routable(to) {
		cl, err := s.classifier.Classify(ctx, original)
		if err == nil {
			for _, c := range cl.Candidates {
				if !visited(history, c) {
					to = c
					break
				}
			}
		}
	}
	if to != "" && routable(to) {
		f := routingFailure{TenantID: sess.TenantID, UserID: sess.UserID, SessionID: sess.ID,
			OriginalRequest: original, ClassifiedAs: classified, RoutedTo: from, ShouldHaveBeen: to,
			Signal: signalFromName("EXPLICIT_REDIRECT"), RoutedConfidence: guideConfidence(env), Key: env.GetId()}
		if found {
			f = f.decided(pending)
		}
		f, err := s.insertFailure(ctx, s.db, f)
		if err != nil {
			return "", err
		}
		if !f.Repeat {
			s.afterFailure(ctx, f)
		}
	}
	if len(history) >= s.cfg.RerouteLimit || to == "" || !routable(to) {
		return s.escalateReroute(ctx, sess, env, history, original, found)
	}
	next := &messagev1.Envelope{
		Id:               idFor(env.GetId() + ".reroute"),
		CorrelationId:    env.GetCorrelationId(),
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
		RerouteHistory:   history,
		Payload:          &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: original}},
	}
	if found {
		if prev := decodeEnvelope(pending.Envelope); prev != nil && prev.GetUserInput() != nil {
			next.Payload = &messagev1.Envelope_UserInput{UserInput: prev.GetUserInput()}
		}
		raw, err := proto.Marshal(next)
		if err != nil {
			return "", err
		}
		pending.Target, pending.Envelope = to, raw
		// A suspended session's request stays frozen: its deadline runs
		// again once the session is resumed.
		if pending.State != stateFrozen {
			pending.State = statePending
		}
		pending.Deadline = s.now().Add(s.cfg.RequestTimeout)
		if err := trackPending(ctx, s.db, pending); err != nil {
			return "", err
		}
	}
	rerouted := &eventv1.MessageRerouted{From: from, To: to, Reason: rr.GetReason(), History: history}
	if len(history) == s.cfg.RerouteLimit-1 {
		rerouted.Warning = fmt.Sprintf("this request has been rerouted %d times; one more and you will be asked", len(history))
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_REROUTED, sess.ID, env.GetCorrelationId(),
		fmt.Sprintf("The %s declined (%s); rerouted to the %s", from, truncate(rr.GetReason(), 200), to))
	ev.Payload = &eventv1.Event_MessageRerouted{MessageRerouted: rerouted}
	if err := s.publishEvent(ctx, sess.TenantID, next.GetParentId()+".rerouted", ev); err != nil {
		return "", err
	}
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, to), next.GetId(), next); err != nil {
		return "", err
	}
	s.metrics.reroutes.WithLabelValues("followed").Inc()
	return "rerouted", nil
}

func visited(history []*messagev1.RerouteHop, agent string) bool {
	for _, h := range history {
		if h.GetFrom() == agent {
			return true
		}
	}
	return false
}

// escalateReroute asks the user where a request bouncing between agents
// should go, naming each agent and its reason and the original request.
func (s *Service) escalateReroute(ctx context.Context, sess session, env *messagev1.Envelope, history []*messagev1.RerouteHop, original string, found bool) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Your request was passed between agents %d times without an answer:\n", len(history))
	var options []string
	for i, h := range history {
		fmt.Fprintf(&b, "  %d. the %s declined: %s", i+1, h.GetFrom(), h.GetReason())
		if h.GetTo() != "" {
			fmt.Fprintf(&b, " (suggested the %s)", h.GetTo())
		}
		b.WriteString("\n")
		for _, a := range []string{h.GetTo(), h.GetFrom()} {
			if a != "" && routable(a) && !slices.Contains(options, a) {
				options = append(options, a)
			}
		}
	}
	fmt.Fprintf(&b, "Original request: %q\n", truncate(original, 500))
	letters := "ABCDEFGH"
	b.WriteString("Which agent should handle it?")
	for i, o := range options {
		if i < len(letters) {
			fmt.Fprintf(&b, " %c) the %s", letters[i], o)
		}
	}
	b.WriteString(" Or rephrase the request.")
	c := clarificationRow{ID: ids.New(), TenantID: sess.TenantID, UserID: sess.UserID, SessionID: sess.ID,
		CorrelationID: env.GetCorrelationId(), RequestingAgent: authorGuide, Question: b.String(), Options: options,
		Context: contextReroute, Original: original, CreateTime: s.now()}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := askQuestion(ctx, tx, c); err != nil {
			return err
		}
		if found {
			if _, err := setPendingState(ctx, tx, sess.TenantID, env.GetCorrelationId(), statePending, stateEscalated); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED, sess.ID, env.GetCorrelationId(), b.String())
	ev.Payload = &eventv1.Event_ClarificationRequested{ClarificationRequested: &eventv1.ClarificationRequested{
		Clarification: clarificationName(sess.ID, c.ID), RequestingAgent: authorGuide, Options: options,
		RerouteHistory: history, OriginalRequest: original, Reason: "reroute_limit"}}
	if err := s.publishEvent(ctx, sess.TenantID, env.GetId()+".escalated", ev); err != nil {
		return "", err
	}
	s.metrics.reroutes.WithLabelValues("escalated").Inc()
	return "escalated", nil
}

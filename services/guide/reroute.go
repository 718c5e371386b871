package guide

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

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
	r, err := s.readReroute(ctx, sess, env)
	if err != nil {
		return "", err
	}
	// A reroute is an explicit redirect: a routing failure (spec A-33).
	if err := s.recordRedirect(ctx, r); err != nil {
		return "", err
	}
	if len(r.history) >= s.cfg.RerouteLimit || !routable(r.to) {
		return s.escalateReroute(ctx, sess, env, r.history, r.original, r.found)
	}
	next, err := s.forward(ctx, r)
	if err != nil {
		return "", err
	}
	if err := s.publishRerouted(ctx, r); err != nil {
		return "", err
	}
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, r.to), next.GetId(), next); err != nil {
		return "", err
	}
	s.metrics.reroutes.WithLabelValues("followed").Inc()
	return "rerouted", nil
}

// reroute is an agent's decline of a request: who declined, where the
// request goes next ("" when no agent is left), its hops so far, and the
// pending request it declines, when the Guide tracks it.
type reroute struct {
	sess     session
	env      *messagev1.Envelope
	from, to string
	history  []*messagev1.RerouteHop
	original string
	pending  pendingRequest
	found    bool
}

// readReroute reads a decline: its hop (appended when the agent did not),
// the request it declines and where it goes next: the suggested target,
// else the first candidate of the classifier not yet visited.
func (s *Service) readReroute(ctx context.Context, sess session, env *messagev1.Envelope) (reroute, error) {
	rr := env.GetRerouteRequest()
	r := reroute{sess: sess, env: env, from: firstNonEmpty(rr.GetSource(), env.GetSource()),
		history: slices.Clone(env.GetRerouteHistory()), original: env.GetStructuredIntent().GetOriginalRequest()}
	// A worker role suggested goes to the Architect (targets.go).
	r.to, _ = routeTarget(rr.GetSuggestedTarget())
	if n := len(r.history); n == 0 || r.history[n-1].GetFrom() != r.from {
		// The declining agent did not append its hop; the Guide does.
		r.history = append(r.history, &messagev1.RerouteHop{From: r.from, Reason: rr.GetReason(), To: rr.GetSuggestedTarget()})
	}
	if corr := env.GetCorrelationId(); corr != "" {
		var err error
		if r.pending, r.found, err = getPending(ctx, s.db, sess.TenantID, corr, false); err != nil {
			return reroute{}, err
		}
	}
	if r.original == "" && r.found {
		r.original = r.pending.Original
	}
	if !routable(r.to) {
		r.to = ""
		if cl, err := s.classifier.Classify(ctx, r.original); err == nil {
			for _, c := range cl.Candidates {
				if !visited(r.history, c) {
					r.to = c
					break
				}
			}
		}
	}
	return r, nil
}

// recordRedirect stores the decline as a routing failure, when it names
// an agent the request should have gone to.
func (s *Service) recordRedirect(ctx context.Context, r reroute) error {
	if !routable(r.to) {
		return nil
	}
	f := routingFailure{TenantID: r.sess.TenantID, UserID: r.sess.UserID, SessionID: r.sess.ID,
		OriginalRequest: r.original, RoutedTo: r.from, ShouldHaveBeen: r.to,
		Signal: signalFromName("EXPLICIT_REDIRECT"), RoutedConfidence: guideConfidence(r.env), Key: r.env.GetId()}
	if r.found {
		f.ClassifiedAs = r.pending.IntentType
		f = f.decided(r.pending)
	}
	f, err := s.insertFailure(ctx, s.db, f)
	if err != nil {
		return err
	}
	if !f.Repeat {
		s.afterFailure(ctx, f)
	}
	return nil
}

// forward is the request as it goes to its next agent, with the intent and
// confidence chain unchanged and the hops so far; a tracked request now
// waits for that agent's answer, its deadline anew.
func (s *Service) forward(ctx context.Context, r reroute) (*messagev1.Envelope, error) {
	next := s.onward(r.sess, r.env, r.env.GetId()+".reroute", r.env.GetCorrelationId(), r.to, r.original)
	next.RerouteHistory = r.history
	if !r.found {
		return next, nil
	}
	if prev := decodeEnvelope(r.pending.Envelope); prev != nil && prev.GetUserInput() != nil {
		next.Payload = &messagev1.Envelope_UserInput{UserInput: prev.GetUserInput()}
	}
	raw, err := proto.Marshal(next)
	if err != nil {
		return nil, err
	}
	p := r.pending
	p.Target, p.Envelope = r.to, raw
	// A suspended session's request stays frozen: its deadline runs again
	// once the session is resumed.
	if p.State != stateFrozen {
		p.State = statePending
	}
	p.Deadline = s.now().Add(s.cfg.RequestTimeout)
	return next, trackPending(ctx, s.db, p)
}

// publishRerouted tells the session where the request went, warning when
// one more decline will ask the user.
func (s *Service) publishRerouted(ctx context.Context, r reroute) error {
	reason := r.env.GetRerouteRequest().GetReason()
	rerouted := &eventv1.MessageRerouted{From: r.from, To: r.to, Reason: reason, History: r.history}
	if len(r.history) == s.cfg.RerouteLimit-1 {
		rerouted.Warning = fmt.Sprintf("this request has been rerouted %d times; one more and you will be asked", len(r.history))
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_MESSAGE_REROUTED, r.sess.ID, r.env.GetCorrelationId(),
		fmt.Sprintf("The %s declined (%s); rerouted to the %s", r.from, truncate(reason, 200), r.to))
	ev.Payload = &eventv1.Event_MessageRerouted{MessageRerouted: rerouted}
	return s.publishEvent(ctx, r.sess.TenantID, r.env.GetId()+".rerouted", ev)
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

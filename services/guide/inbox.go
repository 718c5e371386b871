package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// The Guide's own inbox takes what agents send it: reroute requests
// (spec, E-03), clarification requests for the user,
// task help escalations and responses to relay to the agent that
// asked.

// contextReroute marks the Guide's question after too many reroutes.
const contextReroute = "reroute"

func decodeEnvelope(raw []byte) *messagev1.Envelope {
	env := &messagev1.Envelope{}
	if err := proto.Unmarshal(raw, env); err != nil {
		return nil
	}
	return env
}

// handleInbox handles one envelope from an agent.
func (s *Service) handleInbox(ctx context.Context, msg jetstream.Msg) error {
	env := &messagev1.Envelope{}
	if err := natsx.Unmarshal(msg, env); err != nil {
		s.metrics.inbox.WithLabelValues("dropped").Inc()
		return err
	}
	outcome, err := s.handleEnvelope(ctx, env)
	if err != nil && outcome == "" {
		outcome = "retry"
	}
	s.metrics.inbox.WithLabelValues(outcome).Inc()
	return err
}

func (s *Service) handleEnvelope(ctx context.Context, env *messagev1.Envelope) (string, error) {
	// Within the inbox's ack wait: an envelope still being handled past it
	// would be delivered again meanwhile.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.InboxTimeout)
	defer cancel()
	log := s.log.With(slog.String(logx.KeyCorrelationID, env.GetCorrelationId()), slog.String(logx.KeySessionID, env.GetSessionId()),
		slog.String(logx.KeyAgent, env.GetSource()))
	if env.GetTenantId() == "" || !ids.Valid(env.GetSessionId()) || env.GetId() == "" {
		return s.reject(ctx, env, "envelope needs an id, a tenant and a session id")
	}
	// Session context checks (spec A-26): the session must exist in the
	// envelope's tenant and be live; an agent of another session is refused.
	sess, err := sessionForTenant(ctx, s.db, env.GetTenantId(), strings.ToLower(env.GetSessionId()))
	if errors.Is(err, errSessionNotFound) {
		log.WarnContext(ctx, "envelope for an unknown session refused")
		return s.reject(ctx, env, "session not found in the envelope's tenant")
	}
	if err != nil {
		return "", err
	}
	if sess.State == stateCompleted || sess.State == stateFailed {
		return s.reject(ctx, env, "session is "+sess.State)
	}
	if env.GetUserId() != "" && env.GetUserId() != sess.UserID {
		return s.reject(ctx, env, "envelope's user does not own the session")
	}
	switch {
	case env.GetType() == messagev1.MessageType_MESSAGE_TYPE_REROUTE_REQUEST || env.GetRerouteRequest() != nil:
		return s.handleReroute(ctx, sess, env)
	case env.GetType() == messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_REQUEST || env.GetClarificationRequest() != nil:
		return s.handleAgentClarification(ctx, sess, env)
	case env.GetType() == messagev1.MessageType_MESSAGE_TYPE_TASK_HELP || env.GetTaskHelp() != nil:
		return s.handleTaskHelp(ctx, sess, env)
	case env.GetAgentAnswer() != nil:
		return s.relayAnswer(ctx, sess, env)
	case requestTypes[env.GetType()] != "" || env.GetUserInput() != nil:
		return s.routeAgentRequest(ctx, sess, env)
	}
	return s.reject(ctx, env, fmt.Sprintf("the guide does not handle %s", env.GetType()))
}

// sessionForTenant loads a session by id within a tenant (any user).
func sessionForTenant(ctx context.Context, q querier, tenant, id string) (session, error) {
	sess, err := scanSession(q.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE tenant_id = $1 AND id = $2`, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return session{}, sessionNotFound(id)
	}
	if err != nil {
		return session{}, fmt.Errorf("load session %s: %w", id, err)
	}
	return sess, nil
}

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

// handleAgentClarification delivers an agent's question to the user and
// remembers who asked, so the answer goes back to it (spec A-07). More
// than ClarificationLoop questions for one request is a routing failure.
func (s *Service) handleAgentClarification(ctx context.Context, sess session, env *messagev1.Envelope) (string, error) {
	cr := env.GetClarificationRequest()
	asker := cr.GetRequestingAgent()
	if asker == "" {
		asker = env.GetSource()
	}
	if asker == "" || cr.GetQuestion() == "" {
		return s.reject(ctx, env, "clarification request needs a question and the agent asking")
	}
	corr := env.GetCorrelationId()
	if corr == "" {
		corr = env.GetId()
	}
	// The envelope id makes the question idempotent under redelivery.
	c := clarificationRow{ID: idFor(env.GetId()), TenantID: sess.TenantID, UserID: sess.UserID, SessionID: sess.ID,
		CorrelationID: corr, RequestingAgent: asker, Question: cr.GetQuestion(), Options: cr.GetOptions(),
		Context: cr.GetContext(), Original: env.GetStructuredIntent().GetOriginalRequest(), CreateTime: s.now()}
	var loop *routingFailure
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := askQuestion(ctx, tx, c); err != nil {
			return err
		}
		p, found, err := getPending(ctx, tx, sess.TenantID, corr, true)
		if err != nil || !found {
			return err
		}
		n := p.Clarifications + 1
		if _, err := tx.Exec(ctx, `UPDATE pending_requests SET clarifications = $2 WHERE correlation_id = $1 AND tenant_id = $3`, corr, n, sess.TenantID); err != nil {
			return err
		}
		if n == s.cfg.ClarificationLoop+1 {
			f, err := s.insertFailure(ctx, tx, routingFailure{TenantID: sess.TenantID, UserID: sess.UserID, SessionID: sess.ID,
				OriginalRequest: p.Original, ClassifiedAs: p.IntentType, RoutedTo: p.Target, ShouldHaveBeen: p.Target,
				Signal: signalFromName("CLARIFICATION_LOOP")}.decided(p))
			if err != nil {
				return err
			}
			loop = &f
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if loop != nil {
		s.afterFailure(ctx, *loop)
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED, sess.ID, corr, c.Question)
	ev.Source = asker
	ev.Payload = &eventv1.Event_ClarificationRequested{ClarificationRequested: &eventv1.ClarificationRequested{
		Clarification: clarificationName(sess.ID, c.ID), RequestingAgent: asker, Options: c.Options, Context: c.Context,
		Reason: "agent_question"}}
	if err := s.publishEvent(ctx, sess.TenantID, env.GetId()+".clarification", ev); err != nil {
		return "", err
	}
	return "clarification", nil
}

// handleTaskHelp records a help escalation caused by the wrong context
// source as a routing failure (spec A-33, L2550) and shows it to the user.
func (s *Service) handleTaskHelp(ctx context.Context, sess session, env *messagev1.Envelope) (string, error) {
	help := proto.CloneOf(env.GetTaskHelp())
	if help == nil {
		help = &messagev1.TaskHelp{}
	}
	if issue := help.GetContextSourceIssue(); issue != "" && routable(env.GetSource()) {
		f, err := s.insertFailure(ctx, s.db, routingFailure{TenantID: sess.TenantID, UserID: sess.UserID, SessionID: sess.ID,
			OriginalRequest: firstNonEmpty(env.GetStructuredIntent().GetOriginalRequest(), issue),
			ClassifiedAs:    env.GetStructuredIntent().GetIntentType(), RoutedTo: env.GetSource(), ShouldHaveBeen: env.GetSource(),
			Signal: signalFromName("TASK_HELP_ESCALATION"), RoutedConfidence: guideConfidence(env), Key: env.GetId()})
		if err != nil {
			return "", err
		}
		if !f.Repeat {
			s.afterFailure(ctx, f)
		}
	}
	if help.Text == "" {
		help.Text = fmt.Sprintf("The %s asks for help.", env.GetSource())
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_TASK_HELP, sess.ID, env.GetCorrelationId(), help.GetText())
	ev.Source = env.GetSource()
	ev.Payload = &eventv1.Event_TaskHelp{TaskHelp: help}
	if err := s.publishEvent(ctx, sess.TenantID, env.GetId()+".help", ev); err != nil {
		return "", err
	}
	return "help", nil
}

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
		a.CumulativeConfidence = CumulativeConfidence(env.GetConfidenceChain())
		a.ConfidenceBand, a.SuggestedAction = ConfidenceBand(a.CumulativeConfidence)
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

func firstNonEmpty(v ...string) string {
	for _, x := range v {
		if x != "" {
			return x
		}
	}
	return ""
}

// idFor is a UUID for an agent-chosen id: the id itself when it is one,
// else a name-based UUID of it, so that redeliveries map to one row.
func idFor(s string) string {
	if ids.Valid(s) {
		return strings.ToLower(s)
	}
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(s)).String()
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
	out := &messagev1.Envelope{
		Id:            idFor(env.GetId() + ".route"),
		CorrelationId: corr,
		ParentId:      env.GetId(),
		TenantId:      sess.TenantID,
		SessionId:     sess.ID,
		UserId:        sess.UserID,
		Source:        from,
		Target:        to,
		Type:          messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt:     timestamppb.New(s.now()),
		Deadline:      timestamppb.New(s.now().Add(s.cfg.RequestTimeout)),
		Status:        messagev1.MessageStatus_MESSAGE_STATUS_PENDING,
		Attempt:       1,
		MaxAttempts:   1,
		Priority:      env.GetPriority(),
		Metadata:      env.GetMetadata(),
		RoutedRequest: &messagev1.RoutedRequest{RequestedBy: from, RequestType: env.GetType(),
			RequestCorrelation: firstNonEmpty(env.GetCorrelationId(), env.GetId())},
		StructuredIntent: env.GetStructuredIntent(),
		ConfidenceChain:  env.GetConfidenceChain(),
		RerouteHistory:   env.GetRerouteHistory(),
		Payload:          &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
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

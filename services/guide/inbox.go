package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
)

// The Guide's own inbox takes what agents send it: reroute requests
// (spec, E-03; reroute.go), clarification requests for the user
// task help escalations, answers to relay and requests to
// route for an agent (A-25, A-32; agentrequests.go).

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
	if issue := help.GetContextSourceIssue(); issue != "" && knownAgent(env.GetSource()) {
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

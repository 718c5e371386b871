package guide

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// answerClarification takes the user's answer to a pending question. The
// answer to an agent's question goes back to that agent (spec A-07); the
// answer to the Guide's own routing question routes the original request
// to the agent chosen, or classifies it again with the added detail.
func (s *Service) answerClarification(ctx context.Context, who identity.Identity, sess session, text, inReplyTo, requestID string) (*guidev1.SendMessageResponse, error) {
	a, err := s.clarificationAnswer(ctx, who, sess, text, inReplyTo, requestID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "answer clarification", err)
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return a.store(ctx, tx) })
	if errors.Is(err, errSessionInactive) {
		err = s.inactive(ctx, a.owner, sess.ID)
	}
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "answer clarification", err)
	}
	if err := s.dispatch(ctx, who, a.m); err != nil {
		return nil, err
	}
	s.publishClarified(ctx, a)
	return a.m.response(), nil
}

// clarificationAnswer is the user's answer to a question, stored in one
// transaction (store): the question is taken, and fails if another answer
// took it first.
type clarificationAnswer struct {
	s     *Service
	who   identity.Identity
	owner owner
	sess  session
	id    string // the clarification's
	// m is the answer as a message; routed is what it becomes when it
	// answers the Guide's own question, decided before the transaction
	// opens.
	m, routed      message
	plan           routePlan
	closeEscalated bool
	taken          clarificationRow
}

// clarificationAnswer reads the answer to the question inReplyTo names.
// The answer to the Guide's own question is classified, and a change
// checked with the knowledge agents, before the transaction opens, so
// that no connection is held while they answer.
func (s *Service) clarificationAnswer(ctx context.Context, who identity.Identity, sess session, text, inReplyTo, requestID string) (*clarificationAnswer, error) {
	sid, cid, err := parseClarificationName("in_reply_to", inReplyTo)
	if err != nil {
		return nil, err
	}
	if sid != sess.ID {
		return nil, apierr.Invalid("in_reply_to", "names a clarification of another session")
	}
	a := &clarificationAnswer{s: s, who: who, owner: ownerOf(who), sess: sess, id: cid,
		m: message{ID: ids.New(), SessionID: sess.ID, Author: authorUser, Text: text, CreateTime: s.now(), Repository: sess.Repository}}
	if requestID != "" {
		a.m.RequestID = &requestID
	}
	open, err := openClarification(ctx, s.db, a.owner, sess.ID, cid, s.clarificationCutoff())
	if err != nil {
		return nil, err
	}
	if open.RequestingAgent == authorGuide {
		a.routed = a.m
		a.plan, a.closeEscalated = s.routeAnswer(ctx, who, sess, &a.routed, open)
	}
	return a, nil
}

// store takes the question and stores the answer in tx: the answer to an
// agent's question goes back to it; the answer to the Guide's own is
// routed as decided.
func (a *clarificationAnswer) store(ctx context.Context, tx pgx.Tx) error {
	if err := touchSession(ctx, tx, a.owner, a.sess.ID, a.m.CreateTime); err != nil {
		return err
	}
	c, err := takeClarification(ctx, tx, a.owner, a.sess.ID, a.id, a.m.Text, a.m.CreateTime)
	if err != nil {
		return err
	}
	a.taken = c
	if c.RequestingAgent != authorGuide {
		a.m.CorrelationID = c.CorrelationID
		envelopeID := ids.New()
		a.m.EnvelopeID = &envelopeID
		a.m.Route = outcomeRoute{Target: c.RequestingAgent, Tier: tierClarification, Confidence: 1,
			IntentType: "CLARIFICATION_RESPONSE", Reason: "answer to the " + c.RequestingAgent + "'s question"}
		a.m.AnswerTo = &c
	} else {
		a.m = a.routed
		if a.closeEscalated {
			if _, err := setPendingState(ctx, tx, a.who.TenantID, c.CorrelationID, stateEscalated, stateClosed); err != nil {
				a.s.log.WarnContext(ctx, "close escalated request", logx.Err(err))
			}
		}
	}
	if err := a.s.sealEnvelope(a.who, &a.m); err != nil {
		return err
	}
	w, err := a.s.messageWrites(a.who, a.m, a.plan, nil)
	if err != nil {
		return err
	}
	return w.send(ctx, tx)
}

// publishClarified tells the session that its question was answered, and
// where the answer went.
func (s *Service) publishClarified(ctx context.Context, a *clarificationAnswer) {
	ev := newEvent(eventv1.EventType_EVENT_TYPE_CLARIFICATION_ANSWERED, a.sess.ID, a.m.CorrelationID, a.m.Text)
	ev.Payload = &eventv1.Event_ClarificationAnswered{ClarificationAnswered: &eventv1.ClarificationAnswered{
		Clarification: clarificationName(a.sess.ID, a.taken.ID), RequestingAgent: a.taken.RequestingAgent, Target: a.m.Route.Target}}
	if err := s.publishEvent(ctx, a.who.TenantID, a.m.ID+".clarified", ev); err != nil {
		s.log.WarnContext(ctx, "publish clarification answer", logx.Err(err))
	}
}

// parseClarificationName returns the session and clarification ids of
// "sessions/{s}/clarifications/{c}".
func parseClarificationName(field, name string) (string, string, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "sessions" || parts[2] != "clarifications" || !ids.Valid(parts[1]) || !ids.Valid(parts[3]) {
		return "", "", apierr.Invalid(field, "want sessions/{uuid}/clarifications/{uuid}, got %q", truncate(name, 120))
	}
	return strings.ToLower(parts[1]), strings.ToLower(parts[3]), nil
}

// routeAnswer handles the answer to the Guide's own question: an agent
// named in the options routes the original request there; otherwise the
// original request and the answer are classified together. closeEscalated
// says that the answer settles an escalated reroute, whose pending request
// the caller closes in its transaction.
func (s *Service) routeAnswer(ctx context.Context, who identity.Identity, sess session, m *message, c clarificationRow) (plan routePlan, closeEscalated bool) {
	chosen := choiceOf(m.Text, c.Options)
	m.RouteText = c.Original
	if chosen != "" {
		cl, err := s.classifier.Classify(ctx, c.Original)
		if err != nil {
			cl = Classification{}
		}
		if cl.Target != chosen {
			cl.KnowledgeIntent, cl.TimeScope = "", ""
			switch chosen {
			case topology.AgentLibrarian:
				cl.KnowledgeIntent = librarianIntent(strings.ToLower(c.Original))
			case topology.AgentArchivalist:
				cl.KnowledgeIntent = archivalistIntent(strings.ToLower(c.Original))
				cl.TimeScope, _ = timeScope(strings.ToLower(c.Original))
			}
			if cl.IntentType == "" || cl.IntentType == gateAmbiguous {
				cl.IntentType = gateExploratory
				if chosen == topology.AgentArchitect {
					cl.IntentType = gateExplicit
				}
			}
		}
		cl.Target, cl.Confidence = chosen, 1
		cl.Reason = "the user chose the " + chosen
		m.CorrelationID = ids.New()
		return s.planRoute(ctx, who, sess, m, cl, tierClarification), c.Context == contextReroute
	}
	m.CorrelationID = ids.New()
	return s.planRoute(ctx, who, sess, m, s.rephrased(ctx, m, c), tierClarification), false
}

// rephrased classifies a reply that chose no agent. The answer to "who
// should handle this?" that is clear on its own is the request in other
// words and routes as written; otherwise, and always when the question was
// about the request's content, the reply is read with the request it
// completes.
func (s *Service) rephrased(ctx context.Context, m *message, c clarificationRow) Classification {
	if c.Context == contextRouting {
		if cl, err := s.classifier.Classify(ctx, m.Text); err == nil && cl.Target != "" && cl.Confidence >= s.cfg.RouteThreshold {
			m.RouteText = m.Text
			return cl
		}
	}
	m.RouteText = c.Original + " " + m.Text
	cl, err := s.classifier.Classify(ctx, m.RouteText)
	if err != nil {
		return Classification{}
	}
	return cl
}

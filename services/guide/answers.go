package guide

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// The correlator follows the agents' events on the session event stream:
// an agent's event with the correlation id of a pending request answers
// it. It reads the typed answer (AgentAnswer): it caches knowledge answers
// (tier 1), notices answers that could not help (a routing failure
// signal), completes recorded queries and sends the answer to an agent
// whose request the Guide routed.

// handleEvent handles one session event.
// answers says whether an event of type t may answer a request: an
// agent's question and a task agent's steps (its tool calls, its text) never
// do, and cost no lookup.
func answers(t eventv1.EventType) bool {
	switch t {
	case eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED, eventv1.EventType_EVENT_TYPE_TOOL_CALL,
		eventv1.EventType_EVENT_TYPE_AGENT_TEXT, eventv1.EventType_EVENT_TYPE_AGENT_WARNING,
		eventv1.EventType_EVENT_TYPE_AGENT_REVERTED:
		return false
	}
	return true
}

func (s *Service) handleEvent(ctx context.Context, msg jetstream.Msg) error {
	ev := &eventv1.Event{}
	if err := proto.Unmarshal(msg.Data(), ev); err != nil {
		return nil // not an event; nothing to correlate
	}
	if ev.GetSource() == authorGuide || ev.GetCorrelationId() == "" || !answers(ev.GetType()) {
		return nil
	}
	tenant := topology.TenantOfEventSubject(s.bus, msg.Subject())
	if tenant == "" {
		return nil
	}
	var p pendingRequest
	var answered bool
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var found bool
		var err error
		p, found, err = getPending(ctx, tx, tenant, ev.GetCorrelationId(), true)
		// A request of a suspended session is frozen, not forgotten: an
		// answer that arrives meanwhile answers it, or the resumed session
		// would report it timed out.
		if err != nil || !found || (p.State != statePending && p.State != stateFrozen) || p.SessionID != ev.GetSessionId() {
			return err
		}
		if _, err := setPendingState(ctx, tx, tenant, p.CorrelationID, p.State, stateAnswered); err != nil {
			return err
		}
		answered = true
		// Through the request's own session's recordings: a correlation id
		// is unique per tenant only.
		_, err = tx.Exec(ctx, `UPDATE recorded_queries q SET response = $2, success = $3 FROM recordings r
			WHERE r.tenant_id = $4 AND r.session_id = $5 AND q.recording_id = r.id AND q.correlation_id = $1`,
			p.CorrelationID, truncate(ev.GetText(), 4<<10), !emptyAnswer(ev), tenant, p.SessionID)
		return err
	})
	if err != nil || !answered {
		return err
	}
	s.metrics.answered.WithLabelValues(p.Target).Inc()
	s.metrics.latency.WithLabelValues(p.Target).Observe(time.Since(p.CreateTime).Seconds())
	s.answerRequester(ctx, p, ev)
	if cannotHelp(ev) {
		f, err := s.insertFailure(ctx, s.db, routingFailure{TenantID: tenant, UserID: p.UserID, SessionID: p.SessionID,
			OriginalRequest: p.Original, ClassifiedAs: p.IntentType, RoutedTo: p.Target, ShouldHaveBeen: p.Target,
			Signal: signalFromName("EMPTY_RESPONSE")}.decided(p))
		if err != nil {
			s.log.WarnContext(ctx, "record empty response", logx.Err(err))
		} else {
			s.afterFailure(ctx, f)
		}
		return nil
	}
	if ev.GetType() == eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED && !emptyAnswer(ev) {
		// An answer that found nothing is an answer (the request went to
		// the right agent), but it is not kept: the next index run or entry
		// may change it.
		s.cacheAnswer(ctx, tenant, p, ev)
	}
	return nil
}

// cannotHelp reports an answer in which the routed agent could not help
// with the request (spec A-33 EMPTY_RESPONSE): one flagged cannot_help, or
// one with neither text nor results. A search that found nothing and says
// so (the archivalist with no history on a subject, the academic with no
// document on it) is an answer from the agent that owns the request, not a
// misroute.
func cannotHelp(ev *eventv1.Event) bool {
	a := ev.GetMessageAnswered()
	if a == nil {
		return false
	}
	return a.GetCannotHelp() || (!holdsResults(a) && strings.TrimSpace(a.GetText()) == "")
}

// emptyAnswer reports an answer with no content: a search (its query set)
// that found nothing, whatever its text says, or an answer with neither
// results nor text.
func emptyAnswer(ev *eventv1.Event) bool {
	a := ev.GetMessageAnswered()
	if a == nil {
		return false
	}
	return !holdsResults(a) && (a.GetQuery() != "" || strings.TrimSpace(a.GetText()) == "")
}

// holdsResults reports an answer with hits, recent entries or citations.
func holdsResults(a *messagev1.AgentAnswer) bool {
	return len(a.GetHits()) > 0 || len(a.GetRecent()) > 0 || len(a.GetCitations()) > 0
}

// cacheAnswer keeps the answer to a cacheable request (its cache key was
// stored with it) for the next one alike.
func (s *Service) cacheAnswer(ctx context.Context, tenant string, p pendingRequest, ev *eventv1.Event) {
	var key string
	var ttlMS int64
	if err := s.db.QueryRow(ctx, `SELECT cache_key, cache_ttl_ms FROM pending_requests WHERE correlation_id = $1 AND tenant_id = $2`,
		p.CorrelationID, tenant).Scan(&key, &ttlMS); err != nil || key == "" {
		return
	}
	a := proto.CloneOf(ev.GetMessageAnswered())
	a.Agent = p.Target
	s.cache.storeAnswer(ctx, tenant, p.SessionID, key, time.Duration(ttlMS)*time.Millisecond, a)
}

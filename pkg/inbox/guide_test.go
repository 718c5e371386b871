package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// step0 declines "decline …", asks about "ask …" and answers anything
// else with a confidence of 0.8; the user's answer to its question is
// answered as the request refined by it.
func step0(_ context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	text, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, err
	}
	if _, _, ok := inbox.Clarified(env); !ok {
		switch {
		case strings.HasPrefix(text, "decline to self"):
			return inbox.Result{Reroute: &messagev1.RerouteRequest{Reason: "loops", SuggestedTarget: agent}}, nil
		case strings.HasPrefix(text, "decline"):
			return inbox.Result{Reroute: &messagev1.RerouteRequest{Reason: "not mine", SuggestedTarget: topology.AgentLibrarian},
				Confidence: &messagev1.ConfidenceEntry{Confidence: 0.9, Reason: "code"}}, nil
		case strings.HasPrefix(text, "ask"):
			return inbox.Result{Clarify: &messagev1.ClarificationRequest{Question: "which one?", Options: []string{"a", "b"}}}, nil
		}
	}
	return inbox.Result{Answer: &messagev1.AgentAnswer{Text: "answer to " + text,
		Confidence: &messagev1.ConfidenceEntry{Confidence: 0.8, Reason: "found"}}}, nil
}

// guideInbox returns the envelopes sent to the Guide's inbox, waiting for
// n, and checks that no more are there.
func (r running) guideInbox(t *testing.T, n int) []*messagev1.Envelope {
	t.Helper()
	ctx := context.Background()
	// The agents' stream is a work queue: a consumer of the Guide's inbox
	// stands in for the Guide.
	cons, err := r.bus.JS.CreateOrUpdateConsumer(ctx, r.bus.Stream(topology.StreamAgents), jetstream.ConsumerConfig{
		Durable: "test-guide", FilterSubject: topology.InboxSubject(r.bus, topology.AgentGuide), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	var out []*messagev1.Envelope
	testenv.Consume(t, cons, 10, 10*time.Second, func(env *messagev1.Envelope) { out = append(out, env) },
		func() bool { return len(out) >= n })
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumPending, "no more envelopes for the guide")
	require.Len(t, out, n)
	return out
}

// A decline goes to the Guide's inbox as a reroute request with the
// request's correlation, intent, hop and chain; a redelivered envelope
// declines once; an agent never suggests itself.
func TestDeclineGoesToTheGuide(t *testing.T) {
	t.Parallel()
	r := run(t, inbox.Config{}, step0)
	session := ids.New()
	q := question(session, "decline this: where is parseDuration")
	q.UserId = "u1"
	q.StructuredIntent = &messagev1.StructuredIntent{OriginalRequest: "where is parseDuration", IntentType: "EXPLORATORY"}
	q.ConfidenceChain = []*messagev1.ConfidenceEntry{{Agent: topology.AgentGuide, Confidence: 0.9}}
	q.RerouteHistory = []*messagev1.RerouteHop{{From: topology.AgentArchivalist, Reason: "earlier", To: agent}}
	r.send(t, q)
	r.send(t, q) // delivered again: declined once
	self := question(session, "decline to self")
	r.send(t, self)
	require.Eventually(t, func() bool { return r.count(inbox.OutcomeRerouted) == 3 }, 10*time.Second, 20*time.Millisecond)

	got := r.guideInbox(t, 2)
	d := got[0]
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_REROUTE_REQUEST, d.GetType())
	require.Equal(t, q.GetCorrelationId(), d.GetCorrelationId())
	require.Equal(t, q.GetId(), d.GetParentId())
	require.Equal(t, "t1", d.GetTenantId())
	require.Equal(t, session, d.GetSessionId())
	require.Equal(t, "u1", d.GetUserId())
	require.Equal(t, agent, d.GetSource())
	require.Equal(t, "where is parseDuration", d.GetStructuredIntent().GetOriginalRequest())
	rr := d.GetRerouteRequest()
	require.Equal(t, agent, rr.GetSource())
	require.Equal(t, topology.AgentLibrarian, rr.GetSuggestedTarget())
	require.Len(t, d.GetRerouteHistory(), 2)
	require.Equal(t, &messagev1.RerouteHop{From: agent, Reason: "not mine", To: topology.AgentLibrarian}, d.GetRerouteHistory()[1])
	chain := d.GetConfidenceChain()
	require.Len(t, chain, 2)
	require.Equal(t, agent, chain[1].GetAgent(), "the agent's entry is filled in")
	require.InDelta(t, 0.9, chain[1].GetConfidence(), 1e-9)

	s := got[1]
	require.Equal(t, self.GetCorrelationId(), s.GetCorrelationId())
	require.Empty(t, s.GetRerouteRequest().GetSuggestedTarget(), "an agent never suggests itself")
	require.Equal(t, "decline to self", s.GetStructuredIntent().GetOriginalRequest(), "the request, when the Guide extracted none")
}

// A question goes to the Guide as a clarification request; the user's
// answer comes back as a clarification response and is answered as the
// request refined by it, with the chain's cumulative confidence.
func TestClarificationRoundTrip(t *testing.T) {
	t.Parallel()
	r := run(t, inbox.Config{}, step0)
	session := ids.New()
	q := question(session, "ask me where it is")
	r.send(t, q)
	c := r.guideInbox(t, 1)[0]
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_REQUEST, c.GetType())
	require.Equal(t, "which one?", c.GetClarificationRequest().GetQuestion())
	require.Equal(t, []string{"a", "b"}, c.GetClarificationRequest().GetOptions())
	require.Equal(t, agent, c.GetClarificationRequest().GetRequestingAgent())
	require.Equal(t, "ask me where it is", c.GetStructuredIntent().GetOriginalRequest())

	reply := &messagev1.Envelope{Id: ids.New(), CorrelationId: q.GetCorrelationId(), TenantId: "t1", SessionId: session,
		Type:             messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_RESPONSE,
		StructuredIntent: &messagev1.StructuredIntent{OriginalRequest: "ask me where it is"},
		ConfidenceChain:  []*messagev1.ConfidenceEntry{{Agent: topology.AgentGuide, Confidence: 1}},
		Payload:          &messagev1.Envelope_ClarificationResponse{ClarificationResponse: &messagev1.ClarificationResponse{Answer: "option b"}}}
	r.send(t, reply)
	evs := r.events(t, "t1", session, 1)
	a := evs[0].GetMessageAnswered()
	require.Equal(t, q.GetCorrelationId(), evs[0].GetCorrelationId())
	require.Equal(t, "answer to ask me where it is option b", a.GetText())
	require.Len(t, a.GetConfidenceChain(), 2)
	require.Equal(t, agent, a.GetConfidenceChain()[1].GetAgent())
	require.InDelta(t, 0.8, a.GetCumulativeConfidence(), 1e-9)
	require.Equal(t, "good", a.GetConfidenceBand())
	require.Equal(t, "proceed", a.GetSuggestedAction())
	require.Eventually(t, func() bool { return r.count(inbox.OutcomeClarify) == 1 }, 10*time.Second, 20*time.Millisecond)
}

// An answer without the agent's own entry takes Config.Confidence's; the
// chain is the envelope's with it appended.
func TestAnswerConfidenceDefault(t *testing.T) {
	t.Parallel()
	r := run(t, inbox.Config{Confidence: func(a *messagev1.AgentAnswer) *messagev1.ConfidenceEntry {
		return &messagev1.ConfidenceEntry{Confidence: 0.5, Reason: "default"}
	}}, echo)
	session := ids.New()
	q := question(session, "how?")
	q.ConfidenceChain = []*messagev1.ConfidenceEntry{{Agent: topology.AgentGuide, Confidence: 0.9}}
	q.RerouteHistory = []*messagev1.RerouteHop{{From: topology.AgentLibrarian, Reason: "not code", To: agent}}
	r.send(t, q)
	a := r.events(t, "t1", session, 1)[0].GetMessageAnswered()
	require.Equal(t, agent, a.GetConfidence().GetAgent())
	require.InDelta(t, 0.45, a.GetCumulativeConfidence(), 1e-9)
	require.Equal(t, "low", a.GetConfidenceBand())
	require.Equal(t, "consider_escalating", a.GetSuggestedAction())
	require.Len(t, a.GetRerouteHistory(), 1)
}

package inbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

const agent = topology.AgentAcademic

// running is an inbox run until the test ends.
type running struct {
	bus      *natsx.Bus
	outcomes *prometheus.CounterVec
}

func run(t *testing.T, cfg inbox.Config, h inbox.Handler) running {
	t.Helper()
	bus := testenv.NATS(t)
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inbox_test_total"}, []string{"outcome"})
	cfg.Agent, cfg.Outcomes = agent, outcomes
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	testenv.Start(t, func(ctx context.Context) error { return inbox.Run(ctx, bus, cfg, h) })
	ctx := context.Background()
	require.NoError(t, topology.EnsureAgents(ctx, bus))
	require.NoError(t, topology.EnsureEvents(ctx, bus))
	return running{bus: bus, outcomes: outcomes}
}

func (r running) send(t *testing.T, env *messagev1.Envelope) {
	t.Helper()
	_, err := r.bus.Publish(context.Background(), topology.InboxSubject(r.bus, agent), "", env)
	require.NoError(t, err)
}

func (r running) count(outcome string) float64 {
	return testutil.ToFloat64(r.outcomes.WithLabelValues(outcome))
}

// events waits for n events of a session and returns them.
func (r running) events(t *testing.T, tenant, session string, n int) []*eventv1.Event {
	t.Helper()
	cons, err := r.bus.JS.OrderedConsumer(context.Background(), r.bus.Stream(topology.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{topology.SessionEvents(r.bus, tenant, session)}})
	require.NoError(t, err)
	var evs []*eventv1.Event
	testenv.Consume(t, cons, 10, 10*time.Second, func(ev *eventv1.Event) { evs = append(evs, ev) },
		func() bool { return len(evs) >= n })
	return evs
}

func question(session, text string) *messagev1.Envelope {
	return &messagev1.Envelope{Id: ids.New(), CorrelationId: ids.New(), TenantId: "t1", SessionId: session,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}}}
}

// echo answers a question with its own text and one hit.
func echo(_ context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	text, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, err
	}
	return inbox.Result{Answer: &messagev1.AgentAnswer{Text: "you asked: " + text, Query: text,
		Hits: []*messagev1.Hit{{Kind: messagev1.HitKind_HIT_KIND_DOCUMENT, Name: "documents/d1"}}}}, nil
}

// An answer is published on the envelope's session as a typed
// message.answered event of the agent, once however often the envelope
// is delivered; envelopes that cannot be handled are dropped without
// holding up the ones after them.
func TestAnswersAndRejects(t *testing.T) {
	t.Parallel()
	r := run(t, inbox.Config{}, echo)
	_, err := r.bus.JS.Publish(context.Background(), topology.InboxSubject(r.bus, agent), []byte("not an envelope"))
	require.NoError(t, err)
	noTenant := question(ids.New(), "who?")
	noTenant.TenantId = ""
	r.send(t, noTenant)
	r.send(t, question("not-a-session", "where?"))

	session := ids.New()
	q := question(session, "how do I deploy?")
	r.send(t, q)
	r.send(t, q) // delivered again: answered once
	uncorrelated := question(session, "and roll back?")
	uncorrelated.CorrelationId = ""
	r.send(t, uncorrelated)

	evs := r.events(t, "t1", session, 2)
	require.Len(t, evs, 2)
	ev := evs[0]
	require.Equal(t, eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, ev.GetType())
	require.Equal(t, agent, ev.GetSource())
	require.Equal(t, q.GetCorrelationId(), ev.GetCorrelationId())
	require.Equal(t, "you asked: how do I deploy?", ev.GetText())
	answer := ev.GetMessageAnswered()
	require.Equal(t, agent, answer.GetAgent(), "the agent is filled in")
	require.Equal(t, "how do I deploy?", answer.GetQuery())
	require.Equal(t, "documents/d1", answer.GetHits()[0].GetName())
	require.Equal(t, uncorrelated.GetId(), evs[1].GetCorrelationId(), "without a correlation id, the envelope's id")

	require.Eventually(t, func() bool { return r.count(inbox.OutcomeAnswered) == 3 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 3.0, r.count(inbox.OutcomeRejected))
}

// An envelope whose deadline passed is acknowledged unhandled.
func TestExpired(t *testing.T) {
	t.Parallel()
	var handled atomic.Int32
	r := run(t, inbox.Config{}, func(ctx context.Context, env *messagev1.Envelope) (inbox.Result, error) {
		handled.Add(1)
		return echo(ctx, env)
	})
	q := question(ids.New(), "too late")
	q.Deadline = timestamppb.New(time.Now().Add(-time.Second))
	r.send(t, q)
	require.Eventually(t, func() bool { return r.count(inbox.OutcomeExpired) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Zero(t, handled.Load())
}

// A handler that keeps failing has the envelope delivered again; on the
// last delivery the Unavailable answer is given instead. A handler's own
// outcome is counted as it names it.
func TestLastDeliveryAnswersUnavailable(t *testing.T) {
	t.Parallel()
	cfg := inbox.Config{MaxDeliver: 3, NakDelay: time.Millisecond,
		Unavailable: func(env *messagev1.Envelope, err error) *messagev1.AgentAnswer {
			return &messagev1.AgentAnswer{Text: "not now: " + err.Error()}
		}}
	r := run(t, cfg, func(_ context.Context, env *messagev1.Envelope) (inbox.Result, error) {
		if env.GetUserInput().GetText() == "store" {
			return inbox.Result{Outcome: "stored"}, nil
		}
		return inbox.Result{}, errors.New("search down")
	})
	r.send(t, question(ids.New(), "store"))
	session := ids.New()
	q := question(session, "find it")
	r.send(t, q)
	evs := r.events(t, "t1", session, 1)
	require.Equal(t, "not now: search down", evs[0].GetText())
	require.Equal(t, q.GetCorrelationId(), evs[0].GetCorrelationId())
	require.Eventually(t, func() bool { return r.count(inbox.OutcomeUnavailable) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 2.0, r.count(inbox.OutcomeFailed))
	require.Equal(t, 1.0, r.count("stored"))
}

func TestQuestion(t *testing.T) {
	t.Parallel()
	session := ids.New()
	for _, tt := range []struct {
		name string
		env  *messagev1.Envelope
		want string
		err  bool
	}{
		{"user input", question(session, "where?"), "where?", false},
		{"structured intent when the input is blank", &messagev1.Envelope{SessionId: session,
			Payload:          &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: "  "}},
			StructuredIntent: &messagev1.StructuredIntent{OriginalRequest: "add a button"}}, "add a button", false},
		{"no question", &messagev1.Envelope{SessionId: session}, "", true},
		{"no session", question("", "where?"), "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := inbox.Question(tt.env)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

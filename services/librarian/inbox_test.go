package librarian

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// runInbox runs the service's consumers until the test ends and checks
// that Run stops cleanly.
func runInbox(t *testing.T, h harness) {
	t.Helper()
	testenv.Start(t, h.svc.Run)
	// Publishing needs the streams; Run provisions them (idempotently).
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, errA := h.bus.JS.Stream(ctx, h.bus.Stream(topology.StreamAgents))
		_, errE := h.bus.JS.Stream(ctx, h.bus.Stream(topology.StreamEvents))
		return errA == nil && errE == nil
	}, 10*time.Second, 20*time.Millisecond)
}

func userInput(id, tenant, session, text string) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:            id,
		CorrelationId: "corr-" + id,
		TenantId:      tenant,
		SessionId:     session,
		UserId:        "u1",
		Source:        "guide",
		Target:        topology.AgentLibrarian,
		Type:          messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		Payload:       &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

// nextEvent waits for the next event on a session's subject.
func nextEvent(t *testing.T, h harness, cons jetstream.Consumer) *eventv1.Event {
	t.Helper()
	var ev *eventv1.Event
	require.Eventually(t, func() bool {
		batch, err := cons.FetchNoWait(1)
		if err != nil {
			return false
		}
		for msg := range batch.Messages() {
			ev = &eventv1.Event{}
			require.NoError(t, proto.Unmarshal(msg.Data(), ev))
		}
		return ev != nil
	}, 10*time.Second, 20*time.Millisecond)
	return ev
}

// indexNotices are the index notices published on subject while the test
// runs.
func indexNotices(t *testing.T, h harness, subject string) <-chan *librarianv1.IndexNotice {
	t.Helper()
	notices := make(chan *librarianv1.IndexNotice, 100)
	sub, err := h.bus.Conn.Subscribe(subject, func(m *nats.Msg) {
		n := &librarianv1.IndexNotice{}
		if proto.Unmarshal(m.Data, n) == nil {
			notices <- n
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return notices
}

func sessionEvents(t *testing.T, h harness, tenant, session string) jetstream.Consumer {
	t.Helper()
	cons, err := h.bus.JS.OrderedConsumer(t.Context(), h.bus.Stream(topology.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{topology.SessionEvents(h.bus, tenant, session)},
	})
	require.NoError(t, err)
	return cons
}

func TestInboxAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, true)
	runInbox(t, h)
	ctx := as(t, "tenant-a")
	inbox := topology.InboxSubject(h.bus, topology.AgentLibrarian)

	t.Run("no repositories yet", func(t *testing.T) {
		s0 := ids.New()
		events := sessionEvents(t, h, "tenant-a", s0)
		_, err := h.bus.Publish(ctx, inbox, "", userInput("m0", "tenant-a", s0, "where is parseHTTPRequest?"))
		require.NoError(t, err)
		ev := nextEvent(t, h, events)
		require.Equal(t, eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, ev.GetType())
		require.Equal(t, noReposAnswer, ev.GetText())
		answer := ev.GetMessageAnswered()
		require.True(t, answer.GetCannotHelp(), "with nothing indexed, the librarian cannot help")
		require.Equal(t, reasonNoRepositories, answer.GetCannotHelpReason())
		require.Equal(t, 0.0, answer.GetConfidence().GetConfidence())
	})

	create(t, ctx, h.svc, writeFixture(t), true)

	t.Run("hits", func(t *testing.T) {
		s1 := ids.New()
		events := sessionEvents(t, h, "tenant-a", s1)
		// A malformed message first: it is dropped and does not block the inbox.
		_, err := h.bus.Publish(ctx, inbox, "", &messagev1.Envelope{Id: "bad"})
		require.NoError(t, err)
		_, err = h.bus.Publish(ctx, inbox, "", userInput("m1", "tenant-a", s1, "Where is parseHTTPRequest defined?"))
		require.NoError(t, err)

		ev := nextEvent(t, h, events)
		require.Equal(t, eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, ev.GetType())
		require.Equal(t, "librarian", ev.GetSource())
		require.Equal(t, "corr-m1", ev.GetCorrelationId())
		require.Equal(t, s1, ev.GetSessionId())
		require.True(t, strings.HasSuffix(ev.GetText(), noModelSentence), "no model wrote it, and it says so: %s", ev.GetText())
		require.Contains(t, ev.GetText(), "server/handler.go:4-70")
		answer := ev.GetMessageAnswered()
		require.Equal(t, "librarian", answer.GetAgent())
		require.Equal(t, ev.GetText(), answer.GetText())
		require.False(t, answer.GetCannotHelp())
		require.Empty(t, answer.GetModel(), "no model writes the answer")
		require.NotEmpty(t, answer.GetHits())
		top := answer.GetHits()[0]
		require.Equal(t, messagev1.HitKind_HIT_KIND_CODE, top.GetKind())
		require.Equal(t, "server/handler.go", top.GetPath())
		require.EqualValues(t, 4, top.GetLineStart())
		require.EqualValues(t, 70, top.GetLineEnd())
		require.Contains(t, top.GetSnippet(), "parseHTTPRequest")
		require.True(t, strings.HasPrefix(top.GetRepository(), "repositories/"), top.GetRepository())
		require.Equal(t, top.GetRepository(), top.GetName())
		require.Greater(t, top.GetScore(), 1.0)
		require.Equal(t, "librarian", answer.GetConfidence().GetAgent())
		require.InDelta(t, 0.95, answer.GetConfidence().GetConfidence(), 1e-9)

		// A redelivered copy of the same envelope is answered once: the
		// answer's event id de-duplicates it on the stream.
		_, err = h.bus.Publish(ctx, inbox, "", userInput("m1", "tenant-a", s1, "Where is parseHTTPRequest defined?"))
		require.NoError(t, err)
		cons, err := h.bus.JS.Consumer(ctx, h.bus.Stream(topology.StreamAgents), topology.AgentLibrarian)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream >= 4
		}, 10*time.Second, 20*time.Millisecond)
		stream, err := h.bus.JS.Stream(ctx, h.bus.Stream(topology.StreamEvents))
		require.NoError(t, err)
		subject := topology.EventSubject(h.bus, "tenant-a", s1, topology.AgentLibrarian)
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		require.NoError(t, err)
		require.Equal(t, uint64(1), info.State.Subjects[subject])
	})

	t.Run("no match", func(t *testing.T) {
		s2 := ids.New()
		events := sessionEvents(t, h, "tenant-a", s2)
		_, err := h.bus.Publish(ctx, inbox, "", userInput("m2", "tenant-a", s2, "zzyzx quuxfoo"))
		require.NoError(t, err)
		ev := nextEvent(t, h, events)
		require.Equal(t, `No indexed code matches "zzyzx quuxfoo".`, ev.GetText())
		answer := ev.GetMessageAnswered()
		require.Empty(t, answer.GetHits())
		require.False(t, answer.GetCannotHelp(), "a search that found nothing is an answer")
		require.Equal(t, "zzyzx quuxfoo", answer.GetQuery())
		require.Equal(t, confidenceEmpty, answer.GetConfidence().GetConfidence())
	})

	t.Run("other tenants see nothing", func(t *testing.T) {
		s3 := ids.New()
		events := sessionEvents(t, h, "tenant-b", s3)
		_, err := h.bus.Publish(ctx, inbox, "", userInput("m3", "tenant-b", s3, "parseHTTPRequest"))
		require.NoError(t, err)
		ev := nextEvent(t, h, events)
		require.Equal(t, noReposAnswer, ev.GetText())
	})
}

func TestInboxAnswersWhenSearchKeepsFailing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, true, "-librarian.inbox-retry-delay", "50ms")
	runInbox(t, h)
	s1 := ids.New()
	events := sessionEvents(t, h, "tenant-a", s1)
	// A closed pool fails every query, as a database outage would.
	h.svc.store.db.Close()
	_, err := h.bus.Publish(t.Context(), topology.InboxSubject(h.bus, topology.AgentLibrarian), "",
		userInput("m1", "tenant-a", s1, "parseHTTPRequest"))
	require.NoError(t, err)
	ev := nextEvent(t, h, events)
	require.Equal(t, unavailable, ev.GetText())
	require.Equal(t, "corr-m1", ev.GetCorrelationId())
	require.False(t, ev.GetMessageAnswered().GetCannotHelp())
	require.Empty(t, ev.GetMessageAnswered().GetHits())
	require.Equal(t, 0.0, ev.GetMessageAnswered().GetConfidence().GetConfidence())
}

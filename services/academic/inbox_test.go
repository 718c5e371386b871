package academic

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

func TestInboxAnswersQuestions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	doc := f.create(t, admin("t1"), &academicv1.Document{Title: "Operations guide", Content: guide})
	f.create(t, admin("t2"), &academicv1.Document{Title: "Other tenant", Content: "# Tap\nThe tap of another tenant."})

	ctx := context.Background()
	require.NoError(t, topology.EnsureAgents(ctx, f.bus))
	require.NoError(t, topology.EnsureEvents(ctx, f.bus))
	testenv.Start(t, f.svc.Run)
	stream, err := f.bus.JS.Stream(ctx, f.bus.Stream(topology.StreamEvents))
	require.NoError(t, err)

	ask := func(session, text string) *eventv1.Event {
		t.Helper()
		env := &messagev1.Envelope{
			Id:            ids.New(),
			CorrelationId: ids.New(),
			TenantId:      "t1",
			SessionId:     session,
			Source:        topology.AgentGuide,
			Target:        topology.AgentAcademic,
			Type:          messagev1.MessageType_MESSAGE_TYPE_RESEARCH_REQUEST,
			Payload:       &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
		}
		_, err := f.bus.Publish(ctx, topology.InboxSubject(f.bus, topology.AgentAcademic), env.GetId(), env)
		require.NoError(t, err)
		var ev eventv1.Event
		require.Eventually(t, func() bool {
			m, err := stream.GetLastMsgForSubject(ctx, topology.EventSubject(f.bus, "t1", session, topology.AgentAcademic))
			if err != nil {
				return false
			}
			ev.Reset()
			require.NoError(t, proto.Unmarshal(m.Data, &ev))
			return ev.GetCorrelationId() == env.GetCorrelationId()
		}, 10*time.Second, 20*time.Millisecond)
		return &ev
	}

	// A message the academic cannot answer is dropped; later ones still are answered.
	_, err = f.bus.Publish(ctx, topology.InboxSubject(f.bus, topology.AgentAcademic), "bad", &messagev1.Envelope{Id: "bad", TenantId: "t1"})
	require.NoError(t, err)

	session := ids.New()
	ev := ask(session, "How do I use the tap on macOS?")
	require.Equal(t, eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, ev.GetType())
	require.Equal(t, topology.AgentAcademic, ev.GetSource())
	require.Contains(t, ev.GetText(), "Operations guide ["+doc.GetName()+"]\n")
	require.Contains(t, ev.GetText(), "- Sylk operations guide > Install > macOS, lines 16-18\n")
	require.True(t, strings.HasSuffix(ev.GetText(), noModelSentence), "no model wrote it, and it says so: %s", ev.GetText())
	answer := ev.GetMessageAnswered()
	require.Equal(t, "academic", answer.GetAgent())
	require.Equal(t, ev.GetText(), answer.GetText())
	require.Equal(t, "How do I use the tap on macOS?", answer.GetQuery())
	require.False(t, answer.GetCannotHelp())
	require.Empty(t, answer.GetModel(), "no model writes the answer")
	hits := answer.GetHits()
	require.NotEmpty(t, hits)
	top := hits[0]
	require.Equal(t, messagev1.HitKind_HIT_KIND_DOCUMENT, top.GetKind())
	require.Equal(t, doc.GetName(), top.GetName())
	require.Equal(t, "Operations guide", top.GetTitle())
	require.Equal(t, "Sylk operations guide > Install > macOS", top.GetHeading())
	require.EqualValues(t, 16, top.GetLineStart())
	require.EqualValues(t, 18, top.GetLineEnd())
	require.Contains(t, top.GetSnippet(), "«tap»")
	require.Positive(t, top.GetScore())
	for _, h := range hits {
		require.Equal(t, doc.GetName(), h.GetName(), "hits stay within the tenant")
	}

	// A search that finds nothing says so: it is an answer, not cannot_help.
	ev = ask(session, "kubernetes helm")
	require.Empty(t, ev.GetMessageAnswered().GetHits())
	require.False(t, ev.GetMessageAnswered().GetCannotHelp())
	require.Contains(t, ev.GetText(), "No section of the ingested documents matches")

	// The answer is published before the outcome is counted.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues("answered")) == 2
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues("rejected")))
}

// A question holding a NUL character, which the guide lets through, is
// answered like any other rather than failing every delivery.
func TestInboxAnswersAQuestionWithNUL(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.create(t, admin("t1"), &academicv1.Document{Title: "Ops", Content: "# Tap\nThe tap of the house."})
	require.NoError(t, topology.EnsureEvents(context.Background(), f.bus))
	env := &messagev1.Envelope{Id: ids.New(), TenantId: "t1", SessionId: ids.New(),
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: "tap\x00house"}}}
	res, err := f.svc.answer(context.Background(), env)
	require.NoError(t, err)
	require.Len(t, res.Answer.GetHits(), 1)
	require.Equal(t, "tap house", res.Answer.GetQuery())
}

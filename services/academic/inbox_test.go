package academic

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
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
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	stream, err := f.bus.JS.Stream(ctx, f.bus.Stream(topology.StreamEvents))
	require.NoError(t, err)

	ask := func(session, text string) *guidev1.Event {
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
		var ev guidev1.Event
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
	require.Equal(t, EventAnswered, ev.GetType())
	require.Equal(t, topology.AgentAcademic, ev.GetSource())
	require.Contains(t, ev.GetText(), "Operations guide › Sylk operations guide > Install > macOS (lines 16-18)")
	fields := ev.GetData().GetFields()
	require.Equal(t, "academic", fields["agent"].GetStringValue())
	hits := fields["hits"].GetListValue().GetValues()
	require.NotEmpty(t, hits)
	top := hits[0].GetStructValue().GetFields()
	require.Equal(t, doc.GetName(), top["document"].GetStringValue())
	require.Equal(t, "Operations guide", top["document_title"].GetStringValue())
	require.Equal(t, "Sylk operations guide > Install > macOS", top["heading"].GetStringValue())
	require.Equal(t, 16.0, top["line_start"].GetNumberValue())
	require.Equal(t, 18.0, top["line_end"].GetNumberValue())
	require.Contains(t, top["snippet"].GetStringValue(), "«tap»")
	require.Positive(t, top["score"].GetNumberValue())
	for _, h := range hits {
		require.Equal(t, doc.GetName(), h.GetStructValue().GetFields()["document"].GetStringValue(), "hits stay within the tenant")
	}

	ev = ask(session, "kubernetes helm")
	require.Empty(t, ev.GetData().GetFields()["hits"].GetListValue().GetValues())
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
	outcome, err := f.svc.answer(context.Background(), env)
	require.NoError(t, err)
	require.Equal(t, "answered", outcome)
}

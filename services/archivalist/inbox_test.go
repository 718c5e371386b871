package archivalist

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// runInbox runs the service's inbox until the test ends and returns a
// function that publishes an envelope to it.
func runInbox(t *testing.T, f fixture) func(env *messagev1.Envelope) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, topology.EnsureAgents(ctx, f.bus))
	require.NoError(t, topology.EnsureEvents(ctx, f.bus))
	testenv.Start(t, f.svc.Run)
	return func(env *messagev1.Envelope) {
		t.Helper()
		_, err := f.bus.Publish(ctx, topology.InboxSubject(f.bus, topology.AgentArchivalist), env.GetId(), env)
		require.NoError(t, err)
	}
}

// awaitAnswer waits for the answer event correlated with corr on a session.
func awaitAnswer(t *testing.T, f fixture, tenant, session, corr string) *eventv1.Event {
	t.Helper()
	ctx := context.Background()
	stream, err := f.bus.JS.Stream(ctx, f.bus.Stream(topology.StreamEvents))
	require.NoError(t, err)
	var ev eventv1.Event
	require.Eventually(t, func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, topology.EventSubject(f.bus, tenant, session, topology.AgentArchivalist))
		if err != nil {
			return false
		}
		ev.Reset()
		require.NoError(t, proto.Unmarshal(m.Data, &ev))
		return ev.GetCorrelationId() == corr
	}, 10*time.Second, 20*time.Millisecond)
	return &ev
}

func question(tenant, session, text string) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:            ids.New(),
		CorrelationId: ids.New(),
		TenantId:      tenant,
		SessionId:     session,
		UserId:        "u1",
		Source:        topology.AgentGuide,
		Target:        topology.AgentArchivalist,
		Type:          messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		Payload:       &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

func idsOf(hits []*messagev1.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.GetId())
	}
	return out
}

func TestInboxAnswersQuestions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := admin("t1")
	sessA, sessB := ids.New(), ids.New()
	inA := f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Deadlock in migrations", Content: "Two replicas migrated at once.", SessionId: sessA})
	inB := f.create(t, ctx, &archivalistv1.Entry{Category: "decision", Title: "Advisory lock", Content: "Prevents the deadlock.", SessionId: sessB})
	publish := runInbox(t, f)

	tests := []struct {
		name    string
		session string
		text    string
		want    []string
		cross   bool
	}{
		{"session scoped", sessA, "what caused the deadlock?", []string{inA.GetId()}, false},
		{"other session", sessB, "tell me about the deadlock", []string{inB.GetId()}, false},
		{"across sessions", sessB, "What failed with a deadlock across sessions?", []string{inA.GetId(), inB.GetId()}, true},
		{"previous sessions", sessA, "any deadlock in previous sessions", []string{inA.GetId(), inB.GetId()}, true},
		{"no match", sessA, "kubernetes", nil, false},
	}
	for _, tt := range tests {
		// Sequential: cases share sessions, and each reads the session's last event.
		q := question("t1", tt.session, tt.text)
		publish(q)
		ev := awaitAnswer(t, f, "t1", tt.session, q.GetCorrelationId())
		require.Equal(t, eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, ev.GetType(), tt.name)
		require.Equal(t, topology.AgentArchivalist, ev.GetSource(), tt.name)
		require.NotEmpty(t, ev.GetText(), tt.name)
		answer := ev.GetMessageAnswered()
		require.Equal(t, "archivalist", answer.GetAgent(), tt.name)
		require.Equal(t, tt.cross, answer.GetCrossSession(), tt.name)
		require.False(t, answer.GetCannotHelp(), "%s: a search that found nothing is an answer", tt.name)
		require.ElementsMatch(t, tt.want, idsOf(answer.GetHits()), tt.name)
		if len(tt.want) > 0 {
			hit := answer.GetHits()[0]
			require.Equal(t, messagev1.HitKind_HIT_KIND_ENTRY, hit.GetKind(), tt.name)
			require.Equal(t, "entries/"+hit.GetId(), hit.GetName(), tt.name)
			for k, v := range map[string]string{"id": hit.GetId(), "title": hit.GetTitle(), "category": hit.GetCategory(),
				"snippet": hit.GetSnippet(), "session_id": hit.GetSessionId()} {
				require.NotEmpty(t, v, "%s: hit field %s", tt.name, k)
			}
			require.Positive(t, hit.GetScore(), tt.name)
			require.Contains(t, ev.GetText(), "[entries/"+hit.GetId()+"]", tt.name)
			require.True(t, strings.HasSuffix(ev.GetText(), noModelSentence), "%s: no model wrote it, and it says so: %s", tt.name, ev.GetText())
		} else {
			require.Contains(t, ev.GetText(), "No archived entries in this session match", tt.name)
			require.NotEmpty(t, answer.GetRecent(), "the answer lists recent entries")
		}
	}
	// The answer is published before the outcome is counted.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues("answered")) == float64(len(tests))
	}, 10*time.Second, 20*time.Millisecond)
}

func TestInboxStoresRecords(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	publish := runInbox(t, f)
	session := ids.New()

	// A malformed message is dropped without blocking the ones after it.
	publish(&messagev1.Envelope{Id: ids.New(), Type: messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: "no tenant"}}})

	// A store request without its payload is dropped too.
	publish(&messagev1.Envelope{Id: ids.New(), TenantId: "t1", SessionId: session, Type: messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST})

	store := topology.StoreRequest(topology.Record{ID: ids.New(), Tenant: "t1", Session: session, User: "u1",
		Source: "librarian", Category: "consultation",
		Text: "The router lives in services/guide.\nIt reads the route cache first: services/guide/route.go:10-40"})
	publish(store)
	// Delivered again (a new stream message): stored once.
	_, err := f.bus.Publish(context.Background(), topology.InboxSubject(f.bus, topology.AgentArchivalist), "", store)
	require.NoError(t, err)
	// Without a category, title or source of its own, a request is a note
	// titled by its first line and recorded by the envelope's source.
	plain := topology.StoreRequest(topology.Record{ID: ids.New(), Tenant: "t1", Session: session, Text: "All tests passed."})
	plain.Source = "tester"
	publish(plain)

	ctx := admin("t1")
	var entries []*archivalistv1.Entry
	require.Eventually(t, func() bool {
		resp, err := f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{SessionId: session})
		require.NoError(t, err)
		entries = resp.GetEntries()
		return len(entries) == 2
	}, 10*time.Second, 20*time.Millisecond)
	byCategory := map[string]*archivalistv1.Entry{}
	for _, e := range entries {
		byCategory[e.GetCategory()] = e
	}
	consult := byCategory["consultation"]
	require.NotNil(t, consult)
	require.Equal(t, "The router lives in services/guide.", consult.GetTitle())
	require.Contains(t, consult.GetContent(), "services/guide/route.go:10-40")
	require.Equal(t, "librarian", consult.GetSource())
	require.Equal(t, "u1", consult.GetUserId())
	note := byCategory["note"]
	require.NotNil(t, note, "the default category is note")
	require.Equal(t, "tester", note.GetSource())
	require.Equal(t, "All tests passed.", note.GetTitle())

	// Store requests are not answered: the session has no events.
	stream, err := f.bus.JS.Stream(context.Background(), f.bus.Stream(topology.StreamEvents))
	require.NoError(t, err)
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(topology.SessionEvents(f.bus, "t1", session)))
	require.NoError(t, err)
	require.Empty(t, info.State.Subjects)

	require.Eventually(t, func() bool {
		return testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues("rejected")) == 2
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues("stored")) == 2 &&
			testutil.ToFloat64(f.svc.metrics.inbox.WithLabelValues("duplicate")) == 1
	}, 10*time.Second, 20*time.Millisecond)
}

// An answer that finds no match lists the most recent entries: never another
// user's private ones.
func TestInboxRecentEntriesArePrivate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	session := ids.New()
	alice := as("t1", "alice", identity.RoleMember)
	private := f.create(t, alice, &archivalistv1.Entry{Category: "routing_failure", Title: "Routing failure",
		Content: "original_request: alice's secret payroll question", SessionId: session})
	shared := f.create(t, alice, &archivalistv1.Entry{Category: "decision", Title: "Shared decision", SessionId: session})
	publish := runInbox(t, f)

	recentIDs := func(ev *eventv1.Event) []string { return idsOf(ev.GetMessageAnswered().GetRecent()) }
	for _, text := range []string{"kubernetes", "kubernetes across sessions"} {
		q := question("t1", session, text)
		q.UserId = "bob"
		publish(q)
		ev := awaitAnswer(t, f, "t1", session, q.GetCorrelationId())
		require.Equal(t, []string{shared.GetId()}, recentIDs(ev), text)
		require.NotContains(t, ev.GetText(), "Routing failure", text)

		q = question("t1", session, text)
		q.UserId = "alice"
		publish(q)
		ev = awaitAnswer(t, f, "t1", session, q.GetCorrelationId())
		require.ElementsMatch(t, []string{shared.GetId(), private.GetId()}, recentIDs(ev), text)
	}
}

package guide

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

type fixture struct {
	svc *Service
	bus *natsx.Bus
	reg *prometheus.Registry
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	bus := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	var cfg Config
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Redis: testenv.Redis(t), Registerer: reg})
	require.NoError(t, err)
	return fixture{svc: svc, bus: bus, reg: reg}
}

func as(tenant, user string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: identity.RoleMember})
}

// asAdmin is an admin of tenant.
func asAdmin(tenant, user string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: identity.RoleAdmin})
}

func (f fixture) createSession(t *testing.T, ctx context.Context, name string) *guidev1.Session {
	t.Helper()
	resp, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{DisplayName: name}})
	require.NoError(t, err)
	return resp.GetSession()
}

func (f fixture) send(t *testing.T, ctx context.Context, sess *guidev1.Session, text string) *guidev1.SendMessageResponse {
	t.Helper()
	resp, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: sess.GetName(), Text: text})
	require.NoError(t, err)
	return resp
}

func (f fixture) events(t *testing.T, ctx context.Context, sess *guidev1.Session, after uint64) []*eventv1.Event {
	t.Helper()
	resp, err := f.svc.ListEvents(ctx, &guidev1.ListEventsRequest{Parent: sess.GetName(), AfterSequence: after})
	require.NoError(t, err)
	return resp.GetEvents()
}

// eventTypes names the types of evs in short: "message_received".
func eventTypes(evs []*eventv1.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = typeName(e)
	}
	return out
}

func typeName(e *eventv1.Event) string {
	return strings.ToLower(strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_"))
}

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")

	created := f.createSession(t, ctx, "refactor the cache")
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, created.GetState())
	require.True(t, strings.HasPrefix(created.GetName(), "sessions/"))
	require.True(t, ids.Valid(created.GetId()))
	require.Equal(t, "t1", created.GetTenantId())
	require.Equal(t, "u1", created.GetUserId())
	require.NotNil(t, created.GetCreateTime())
	require.NotNil(t, created.GetActivateTime())
	require.NotNil(t, created.GetLastActiveTime())
	require.Nil(t, created.GetSuspendTime())

	got, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: created.GetName()})
	require.NoError(t, err)
	require.True(t, proto.Equal(created, got.GetSession()), "got %v want %v", got.GetSession(), created)

	susp, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: created.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_SUSPENDED, susp.GetSession().GetState())
	require.NotNil(t, susp.GetSession().GetSuspendTime())

	res, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: created.GetName()})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_ACTIVE, res.GetSession().GetState())

	done, err := f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: created.GetName(), Summary: "  cache refactored  "})
	require.NoError(t, err)
	require.Equal(t, guidev1.SessionState_SESSION_STATE_COMPLETED, done.GetSession().GetState())
	require.Equal(t, "cache refactored", done.GetSession().GetSummary())
	require.NotNil(t, done.GetSession().GetCompleteTime())

	evs := f.events(t, ctx, created, 0)
	require.Equal(t, []string{"session_created", "session_suspended", "session_resumed", "session_completed"}, eventTypes(evs))
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.transitions.WithLabelValues("completed")))
}

func TestSessionTransitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")

	// setup brings a fresh session into a state.
	setup := map[string]func(t *testing.T, s *guidev1.Session){
		"active": func(*testing.T, *guidev1.Session) {},
		"suspended": func(t *testing.T, s *guidev1.Session) {
			_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
			require.NoError(t, err)
		},
		"completed": func(t *testing.T, s *guidev1.Session) {
			_, err := f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: s.GetName()})
			require.NoError(t, err)
		},
		"failed": func(t *testing.T, s *guidev1.Session) {
			_, err := f.svc.FailSession(ctx, identity.Identity{TenantID: "t1", UserID: "u1"}, s.GetId(), "worker pool lost")
			require.NoError(t, err)
		},
	}
	do := map[string]func(name string) (*guidev1.Session, error){
		"suspend": func(name string) (*guidev1.Session, error) {
			r, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: name})
			return r.GetSession(), err
		},
		"resume": func(name string) (*guidev1.Session, error) {
			r, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: name})
			return r.GetSession(), err
		},
		"complete": func(name string) (*guidev1.Session, error) {
			r, err := f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: name, Summary: "done"})
			return r.GetSession(), err
		},
	}
	tests := []struct {
		from, verb string
		want       guidev1.SessionState // UNSPECIFIED: FailedPrecondition
	}{
		{"active", "suspend", guidev1.SessionState_SESSION_STATE_SUSPENDED},
		{"active", "resume", 0},
		{"active", "complete", guidev1.SessionState_SESSION_STATE_COMPLETED},
		{"suspended", "suspend", 0},
		{"suspended", "resume", guidev1.SessionState_SESSION_STATE_ACTIVE},
		{"suspended", "complete", guidev1.SessionState_SESSION_STATE_COMPLETED},
		{"completed", "suspend", 0},
		{"completed", "resume", 0},
		{"completed", "complete", 0},
		{"failed", "suspend", 0},
		{"failed", "resume", 0},
		{"failed", "complete", 0},
	}
	for _, tt := range tests {
		t.Run(tt.from+"_"+tt.verb, func(t *testing.T) {
			t.Parallel()
			s := f.createSession(t, ctx, tt.from)
			setup[tt.from](t, s)
			got, err := do[tt.verb](s.GetName())
			if tt.want == 0 {
				testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, fmt.Sprintf("session is %s; cannot %s", tt.from, tt.verb))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.GetState())
		})
	}

	t.Run("fail_terminal", func(t *testing.T) {
		t.Parallel()
		s := f.createSession(t, ctx, "x")
		setup["completed"](t, s)
		_, err := f.svc.FailSession(ctx, identity.Identity{TenantID: "t1", UserID: "u1"}, s.GetId(), "late")
		testenv.RequireReason(t, err, codes.FailedPrecondition, reasonTransitionNotAllowed, "session is completed; cannot fail")
	})
	t.Run("fail_records_time", func(t *testing.T) {
		t.Parallel()
		s := f.createSession(t, ctx, "x")
		failed, err := f.svc.FailSession(ctx, identity.Identity{TenantID: "t1", UserID: "u1"}, s.GetId(), "boom")
		require.NoError(t, err)
		require.Equal(t, guidev1.SessionState_SESSION_STATE_FAILED, failed.GetState())
	})
}

func TestSessionValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	bigMeta := map[string]string{}
	for i := range 33 {
		bigMeta[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name    string
		call    func() error
		code    codes.Code
		reason  string
		message string
	}{
		{"display name too long", func() error {
			_, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{DisplayName: strings.Repeat("é", 201)}})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "session.display_name: 201 characters exceeds the limit of 200"},
		{"too much metadata", func() error {
			_, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{Metadata: bigMeta}})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "session.metadata: 33 entries"},
		{"empty metadata key", func() error {
			_, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{Metadata: map[string]string{"": "x"}}})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "session.metadata"},
		{"bad name", func() error {
			_, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: "sessions/not-a-uuid"})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "name: want sessions/{uuid}"},
		{"missing name", func() error {
			_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "name: required"},
		{"unknown session", func() error {
			_, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: "sessions/" + ids.New()})
			return err
		}, codes.NotFound, "SESSION_NOT_FOUND", "not found"},
		{"no identity", func() error {
			_, err := f.svc.CreateSession(context.Background(), &guidev1.CreateSessionRequest{})
			return err
		}, codes.Unauthenticated, identity.ReasonIdentityMissing, "identity"},
		{"negative page size", func() error {
			_, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{PageSize: -1})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "page_size"},
		{"bad page token", func() error {
			_, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{PageToken: "!!"})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "page_token"},
		{"summary too long", func() error {
			s := f.createSession(t, ctx, "x")
			_, err := f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: s.GetName(), Summary: strings.Repeat("x", DefaultMaxSummaryBytes+1)})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidField, "summary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testenv.RequireReason(t, tt.call(), tt.code, tt.reason, tt.message)
		})
	}

	resp, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{
		DisplayName: strings.Repeat("é", 200), Metadata: map[string]string{"repo": "sylk"},
	}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"repo": "sylk"}, resp.GetSession().GetMetadata())
}

func TestSessionIsolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	owner := as("t1", "u1")
	s := f.createSession(t, owner, "mine")

	others := map[string]context.Context{
		"other user":   as("t1", "u2"),
		"other tenant": as("t2", "u1"),
	}
	for name, ctx := range others {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
			testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "session "+s.GetName()+" not found")
			_, err = f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
			testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
			_, err = f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: s.GetName()})
			testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
			// Every other action on the session reads the same.
			for action, call := range map[string]func() error{
				"resume": func() error {
					_, err := f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
					return err
				},
				"activate": func() error {
					_, err := f.svc.ActivateSession(ctx, &guidev1.ActivateSessionRequest{Name: s.GetName()})
					return err
				},
				"switch": func() error {
					_, err := f.svc.SwitchSession(ctx, &guidev1.SwitchSessionRequest{Name: s.GetName()})
					return err
				},
				"context": func() error {
					_, err := f.svc.GetSessionContext(ctx, &guidev1.GetSessionContextRequest{Name: s.GetName()})
					return err
				},
				"snapshot": func() error {
					_, err := f.svc.GetSessionSnapshot(ctx, &guidev1.GetSessionSnapshotRequest{Name: s.GetName()})
					return err
				},
				"update": func() error {
					_, err := f.svc.UpdateSession(ctx, &guidev1.UpdateSessionRequest{Session: &guidev1.Session{Name: s.GetName(), DisplayName: "theirs"},
						UpdateMask: "display_name"})
					return err
				},
			} {
				require.Equal(t, codes.NotFound, status.Code(call()), action)
			}
			_, err = f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "/help"})
			testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
			_, err = f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: s.GetName()})
			testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
			_, err = f.svc.ListEvents(ctx, &guidev1.ListEventsRequest{Parent: s.GetName()})
			testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", "not found")
			list, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{})
			require.NoError(t, err)
			require.Empty(t, list.GetSessions())
		})
	}
}

func TestListSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	var want []string
	for i := range 5 {
		want = append([]string{f.createSession(t, ctx, fmt.Sprintf("s%d", i)).GetName()}, want...)
	}
	f.createSession(t, as("t1", "u2"), "someone else's")

	var got []string
	token := ""
	for page := 0; ; page++ {
		resp, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{PageSize: 2, PageToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.GetSessions()), 2)
		for _, s := range resp.GetSessions() {
			got = append(got, s.GetName())
		}
		token = resp.GetNextPageToken()
		if token == "" {
			break
		}
		require.Less(t, page, 3, "too many pages")
	}
	require.Equal(t, want, got, "newest first, every session once")

	for _, name := range want[:2] {
		_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: name})
		require.NoError(t, err)
	}
	susp, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{State: guidev1.SessionState_SESSION_STATE_SUSPENDED})
	require.NoError(t, err)
	require.Len(t, susp.GetSessions(), 2)
	all, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{PageSize: 5000})
	require.NoError(t, err)
	require.Len(t, all.GetSessions(), 5)
	require.Empty(t, all.GetNextPageToken())
}

func TestSlashCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "slash")
	other := f.createSession(t, ctx, "other")

	tests := []struct {
		text     string
		contains []string
	}{
		{"/help", []string{"/help", "/status", "/session list"}},
		{"  /status  ", []string{s.GetName(), "is active", "Messages: 3 (2 from you, 1 from the guide"}},
		{"/session list", []string{s.GetName(), other.GetName(), "* " + s.GetName()}},
		{"/nope", []string{"unknown command /nope; try /help"}},
		{"/session delete", []string{"unknown command /session delete; try /help"}},
	}
	// Sequential: /status counts the messages sent before it.
	for _, tt := range tests {
		resp := f.send(t, ctx, s, tt.text)
		for _, c := range tt.contains {
			require.Contains(t, resp.GetReply(), c, tt.text)
		}
		require.Equal(t, "guide", resp.GetRoute().GetTarget())
		require.Equal(t, "slash_command", resp.GetRoute().GetTier())
		require.Equal(t, 1.0, resp.GetRoute().GetConfidence())
		require.Equal(t, strings.TrimSpace(tt.text), resp.GetMessage().GetText())
		require.Equal(t, "user", resp.GetMessage().GetAuthor())
		require.NotEmpty(t, resp.GetCorrelationId())
	}

	evs := f.events(t, ctx, s, 0)
	require.Equal(t, "session_created", typeName(evs[0]))
	for i := 1; i < len(evs); i += 2 {
		require.Equal(t, "message_received", typeName(evs[i]))
		require.Equal(t, "user", evs[i].GetMessageReceived().GetAuthor())
		require.Equal(t, "message_answered", typeName(evs[i+1]))
		require.Equal(t, "guide", evs[i+1].GetMessageAnswered().GetAgent())
		require.Equal(t, evs[i].GetMessageReceived().GetMessage(), evs[i+1].GetMessageAnswered().GetInReplyTo())
		require.Equal(t, "guide", evs[i+1].GetSource())
		require.Equal(t, evs[i].GetCorrelationId(), evs[i+1].GetCorrelationId())
	}
	require.Len(t, evs, 1+2*len(tests))
	require.Equal(t, "/help", evs[1].GetText())
	require.Contains(t, evs[2].GetText(), "/status")

	msgs, err := f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Len(t, msgs.GetMessages(), 2*len(tests))
	require.Equal(t, "/help", msgs.GetMessages()[0].GetText())
	require.Equal(t, "guide", msgs.GetMessages()[1].GetAuthor())

	require.Equal(t, float64(len(tests)), testutil.ToFloat64(f.svc.metrics.messages.WithLabelValues("slash_command", "guide")))
}

// inboxReader reads the envelopes routed to one agent.
func inboxReader(t *testing.T, bus *natsx.Bus, agent string) jetstream.Consumer {
	t.Helper()
	cons, err := bus.JS.CreateOrUpdateConsumer(context.Background(), topology.AgentsStream(bus), jetstream.ConsumerConfig{
		Durable:       "test-" + agent,
		FilterSubject: topology.InboxSubject(bus, agent),
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	return cons
}

func nextEnvelope(t *testing.T, cons jetstream.Consumer) *messagev1.Envelope {
	t.Helper()
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	require.NoError(t, msg.DoubleAck(context.Background()))
	env := &messagev1.Envelope{}
	require.NoError(t, proto.Unmarshal(msg.Data(), env))
	require.Equal(t, env.GetId(), msg.Headers().Get(jetstream.MsgIDHeader))
	return env
}

func TestRouting(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	tests := []struct {
		agent, text, intent, subject string
	}{
		{"librarian", "Where is the function ParseConfig defined?", "EXPLORATORY", "ParseConfig"},
		{"archivalist", "What did we decide last time about cache eviction?", "EXPLORATORY", "cache_eviction"},
		{"academic", "What are the best practices for retry backoff? Point me to the docs.", "EXPLORATORY", "retry_backoff_point"},
		{"architect", "Implement rate limiting for the gateway", "EXPLICIT", "rate_limiting_gateway"},
		{"architect", "please fix the crash in the scheduler", "EXPLICIT", "crash_scheduler"},
	}
	readers := map[string]jetstream.Consumer{}
	for _, tt := range tests {
		if readers[tt.agent] == nil {
			readers[tt.agent] = inboxReader(t, f.bus, tt.agent)
		}
	}
	for _, tt := range tests {
		s := f.createSession(t, ctx, tt.agent)
		resp := f.send(t, ctx, s, tt.text)
		route := resp.GetRoute()
		require.Equal(t, tt.agent, route.GetTarget(), "%s: %s", tt.text, route.GetReason())
		require.Equal(t, "classifier", route.GetTier())
		require.GreaterOrEqual(t, route.GetConfidence(), 0.7)
		require.LessOrEqual(t, route.GetConfidence(), 1.0)
		require.Equal(t, tt.intent, route.GetIntentType())
		require.Empty(t, resp.GetReply())

		env := nextEnvelope(t, readers[tt.agent])
		require.True(t, ids.Valid(env.GetId()))
		require.Equal(t, resp.GetCorrelationId(), env.GetCorrelationId())
		require.Equal(t, "t1", env.GetTenantId())
		require.Equal(t, "u1", env.GetUserId())
		require.Equal(t, s.GetId(), env.GetSessionId())
		require.Equal(t, "guide", env.GetSource())
		require.Equal(t, tt.agent, env.GetTarget())
		require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_USER_INPUT, env.GetType())
		require.Equal(t, messagev1.Priority_PRIORITY_USER, env.GetPriority())
		require.NotNil(t, env.GetCreatedAt())
		require.Equal(t, tt.text, env.GetUserInput().GetText())
		require.Equal(t, tt.text, env.GetStructuredIntent().GetOriginalRequest())
		require.Equal(t, tt.intent, env.GetStructuredIntent().GetIntentType())
		require.Equal(t, tt.subject, env.GetStructuredIntent().GetSubject())
		require.Len(t, env.GetConfidenceChain(), 1)
		require.Equal(t, "guide", env.GetConfidenceChain()[0].GetAgent())
		require.Equal(t, route.GetConfidence(), env.GetConfidenceChain()[0].GetConfidence())
		require.NotEmpty(t, env.GetConfidenceChain()[0].GetReason())

		evs := f.events(t, ctx, s, 0)
		require.Equal(t, []string{"session_created", "message_received", "message_routed"}, eventTypes(evs))
		require.Equal(t, tt.text, evs[1].GetText())
		require.Equal(t, resp.GetMessage().GetName(), evs[1].GetMessageReceived().GetMessage())
		routed := evs[2].GetMessageRouted()
		require.Equal(t, tt.agent, routed.GetTarget())
		require.Equal(t, "classifier", routed.GetTier())
		require.Equal(t, tt.intent, routed.GetIntentType())
		require.Equal(t, route.GetConfidence(), routed.GetConfidence())
		require.Equal(t, resp.GetMessage().GetName(), routed.GetMessage())
		require.Equal(t, resp.GetCorrelationId(), evs[2].GetCorrelationId())
	}
	require.Equal(t, 2.0, testutil.ToFloat64(f.svc.metrics.messages.WithLabelValues("classifier", "architect")))
	require.Equal(t, 1, testutil.CollectAndCount(f.reg, "sylk_guide_routing_duration_seconds"))
}

func TestClarification(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	tests := []struct {
		text    string
		options []string
	}{
		{"the code or the docs", []string{"librarian", "academic"}},
		{"hello there", []string{"librarian", "archivalist", "academic", "architect"}},
	}
	for _, tt := range tests {
		s := f.createSession(t, ctx, "ambiguous")
		resp := f.send(t, ctx, s, tt.text)
		require.Empty(t, resp.GetRoute().GetTarget())
		require.Equal(t, "classifier", resp.GetRoute().GetTier())
		require.Less(t, resp.GetRoute().GetConfidence(), 0.7)
		require.Contains(t, resp.GetReply(), "?")

		evs := f.events(t, ctx, s, 0)
		require.Equal(t, []string{"session_created", "message_received", "clarification_requested"}, eventTypes(evs))
		require.Equal(t, resp.GetReply(), evs[2].GetText())
		require.ElementsMatch(t, tt.options, evs[2].GetClarificationRequested().GetOptions())
		require.Equal(t, "low_confidence", evs[2].GetClarificationRequested().GetReason())
	}
	info, err := f.bus.JS.Stream(context.Background(), topology.AgentsStream(f.bus))
	require.NoError(t, err)
	require.Zero(t, info.CachedInfo().State.Msgs, "nothing is routed when the Guide asks")
	require.Equal(t, 2.0, testutil.ToFloat64(f.svc.metrics.messages.WithLabelValues("classifier", "none")))
}

func TestSendMessageErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	active := f.createSession(t, ctx, "active")
	suspended := f.createSession(t, ctx, "suspended")
	_, err := f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: suspended.GetName()})
	require.NoError(t, err)
	completed := f.createSession(t, ctx, "completed")
	_, err = f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: completed.GetName()})
	require.NoError(t, err)

	tests := []struct {
		name, parent, text string
		code               codes.Code
		message, reason    string
	}{
		{"oversize", active.GetName(), strings.Repeat("x", DefaultMaxMessageBytes+1), codes.InvalidArgument,
			"text: 32769 bytes exceeds the limit of 32768 bytes", apierr.ReasonInvalidField},
		{"empty", active.GetName(), "   \n ", codes.InvalidArgument, "text: required", apierr.ReasonInvalidField},
		{"bad parent", "sessions/abc", "hi", codes.InvalidArgument, "parent: want sessions/{uuid}", apierr.ReasonInvalidField},
		{"unknown session", "sessions/" + ids.New(), "hi", codes.NotFound, "not found", "SESSION_NOT_FOUND"},
		{"suspended", suspended.GetName(), "hi", codes.FailedPrecondition, "session is suspended; resume it first", reasonSessionNotActive},
		{"completed", completed.GetName(), "hi", codes.FailedPrecondition, "session is completed; cannot send messages to it",
			reasonSessionNotActive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: tt.parent, Text: tt.text})
			testenv.RequireReason(t, err, tt.code, tt.reason, tt.message)
		})
	}
}

// A database that cannot be reached is UNAVAILABLE, which a client may
// retry, not an internal error.
func TestStoreDownIsUnavailable(t *testing.T) {
	t.Parallel()
	db, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/sylk?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	defer db.Close()
	svc, err := New(Config{}, app.Deps{Log: logx.Discard(), DB: db, Schema: "guide", Bus: testenv.NATS(t), Redis: testenv.Redis(t),
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx := as("t1", "u1")
	_, err = svc.ListSessions(ctx, &guidev1.ListSessionsRequest{})
	testenv.RequireReason(t, err, codes.Unavailable, apierr.ReasonStoreUnavailable, "database unavailable, retry later")
	_, err = svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: "sessions/" + ids.New(), Text: "where is ParseConfig defined?"})
	testenv.RequireReason(t, err, codes.Unavailable, apierr.ReasonStoreUnavailable, "database unavailable, retry later")
}

// A request whose envelope could not be published is stored; retrying it
// with the same request id publishes the envelope it was routed with, its
// structured intent and routing metadata included.
func TestRetryPublishesStoredEnvelope(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "retry")
	bg := context.Background()
	require.NoError(t, f.bus.JS.DeleteStream(bg, topology.AgentsStream(f.bus)))
	req := &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "Where is the function ParseConfig defined?", RequestId: "lost-1"}
	_, err := f.svc.SendMessage(ctx, req)
	testenv.RequireReason(t, err, codes.Unavailable, apierr.ReasonBusUnavailable, "retry with the same request_id")

	require.NoError(t, topology.EnsureAgents(bg, f.bus))
	reader := inboxReader(t, f.bus, "librarian")
	resp, err := f.svc.SendMessage(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "librarian", resp.GetRoute().GetTarget())
	env := nextEnvelope(t, reader)
	require.Equal(t, resp.GetCorrelationId(), env.GetCorrelationId())
	require.Equal(t, "LOCATE", env.GetMetadata()["routing.knowledge_intent"], "metadata: %v", env.GetMetadata())
	require.Equal(t, "ParseConfig", env.GetStructuredIntent().GetSubject())
	require.Len(t, env.GetConfidenceChain(), 1)

	_, err = f.svc.SendMessage(ctx, req)
	require.NoError(t, err)
	_, err = reader.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
	require.Error(t, err, "a dispatched request's envelope lands once")
}

// A bus that takes a message's envelope but never acknowledges it (as one
// that is down: the client holds the publication until it reconnects) fails
// the request with Unavailable within the publish timeout, the message
// stored, instead of holding it until the caller gives up.
func TestUnacknowledgedPublishIsUnavailable(t *testing.T) {
	t.Parallel()
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	bus := testenv.NATS(t)
	svc, err := New(Config{PublishTimeout: 200 * time.Millisecond}, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus,
		Redis: testenv.Redis(t), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	f := fixture{svc: svc, bus: bus}
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "silent bus")
	bg := context.Background()
	// The inbox subject answered by a subscriber that never acknowledges.
	require.NoError(t, bus.JS.DeleteStream(bg, topology.AgentsStream(bus)))
	sub, err := bus.Conn.Subscribe(topology.InboxSubject(bus, "librarian"), func(*nats.Msg) {})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, bus.Conn.Flush())

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req := &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "Where is the function ParseConfig defined?", RequestId: "silent-1"}
	_, err = svc.SendMessage(cctx, req)
	testenv.RequireReason(t, err, codes.Unavailable, apierr.ReasonBusUnavailable, "is stored; retry with the same request_id")

	require.NoError(t, sub.Unsubscribe())
	require.NoError(t, topology.EnsureAgents(bg, bus))
	reader := inboxReader(t, bus, "librarian")
	resp, err := svc.SendMessage(ctx, req)
	require.NoError(t, err, "the retry publishes the stored message")
	require.Equal(t, resp.GetCorrelationId(), nextEnvelope(t, reader).GetCorrelationId())
}

// storedWhileBusDown stores a message in a new session while the bus
// refuses its envelope (the agents' stream is gone), then brings the stream
// back, and returns the session.
func storedWhileBusDown(t *testing.T, f fixture, ctx context.Context) *guidev1.Session {
	t.Helper()
	s := f.createSession(t, ctx, "bus down")
	bg := context.Background()
	require.NoError(t, f.bus.JS.DeleteStream(bg, topology.AgentsStream(f.bus)))
	_, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "Where is the function ParseConfig defined?"})
	testenv.RequireReason(t, err, codes.Unavailable, apierr.ReasonBusUnavailable, "event bus unavailable")
	require.NoError(t, topology.EnsureAgents(bg, f.bus))
	return s
}

// A message stored while the bus refused its envelope is published by the
// outbox relay once it is older than the grace period, with the envelope it
// was stored with; a relayed message is not relayed again.
func TestOutboxRelaysStoredMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := storedWhileBusDown(t, f, ctx)
	bg := context.Background()
	reader := inboxReader(t, f.bus, "librarian")

	n, err := f.svc.relayOnce(bg)
	require.NoError(t, err)
	require.Zero(t, n, "within the grace period the request may still be publishing it")
	f.svc.now = func() time.Time { return time.Now().Add(f.svc.cfg.OutboxGrace + time.Second) }
	n, err = f.svc.relayOnce(bg)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	env := nextEnvelope(t, reader)
	require.Equal(t, "LOCATE", env.GetMetadata()["routing.knowledge_intent"])
	require.Equal(t, []string{"session_created", "message_received", "message_routed"}, eventTypes(f.events(t, ctx, s, 0)))

	// The outbox row is deleted in the background; once it is, nothing is
	// left to relay.
	require.Eventually(t, func() bool {
		f.svc.marks.flush(bg, f.svc.db, f.svc.log, time.Now())
		n, err := f.svc.relayOnce(bg)
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond)
}

// A message stored while the bus was down for longer than the relay looks
// back is not relayed (its request times out into a dead letter), and the
// reaper deletes its outbox row once the request timeout is past too.
func TestReaperPrunesTheOutbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	storedWhileBusDown(t, f, as("t1", "u1"))
	bg := context.Background()
	rows := func() int {
		var n int
		require.NoError(t, f.svc.db.QueryRow(bg, `SELECT count(*) FROM outbox`).Scan(&n))
		return n
	}
	require.Equal(t, 1, rows())

	f.svc.now = func() time.Time { return time.Now().Add(outboxWindow + time.Second) }
	n, err := f.svc.relayOnce(bg)
	require.NoError(t, err)
	require.Zero(t, n, "past the relay's window")
	st, err := f.svc.reapOnce(bg)
	require.NoError(t, err)
	require.Zero(t, st.pruned, "the request has not timed out yet")
	require.Equal(t, 1, rows())

	f.svc.now = func() time.Time { return time.Now().Add(outboxWindow + f.svc.cfg.RequestTimeout + time.Second) }
	st, err = f.svc.reapOnce(bg)
	require.NoError(t, err)
	require.Equal(t, 1, st.pruned)
	require.Equal(t, 1, st.expired, "its request became a dead letter")
	require.Zero(t, rows())
}

func TestSendMessageIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	reader := inboxReader(t, f.bus, "architect")
	s := f.createSession(t, ctx, "idempotent")
	req := &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "Implement a retry budget", RequestId: "req-1"}

	// Concurrent retries of one request all get the same outcome.
	const n = 5
	resps := make([]*guidev1.SendMessageResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := f.svc.SendMessage(ctx, req)
			if err == nil {
				resps[i] = resp
			}
		})
	}
	wg.Wait()
	again, err := f.svc.SendMessage(ctx, req)
	require.NoError(t, err)
	for _, r := range resps {
		require.NotNil(t, r)
		require.True(t, proto.Equal(again, r), "got %v want %v", r, again)
	}
	require.Equal(t, "architect", again.GetRoute().GetTarget())
	// The id sent with another text is refused, not answered with the
	// first message while the new text is dropped.
	_, err = f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "Something else", RequestId: "req-1"})
	testenv.RequireReason(t, err, codes.AlreadyExists, reasonRequestIDReused, again.GetMessage().GetName())

	env := nextEnvelope(t, reader)
	require.Equal(t, again.GetCorrelationId(), env.GetCorrelationId())
	info, err := f.bus.JS.Stream(context.Background(), topology.AgentsStream(f.bus))
	require.NoError(t, err)
	require.Zero(t, info.CachedInfo().State.Msgs, "the envelope was published once")

	msgs, err := f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: s.GetName()})
	require.NoError(t, err)
	require.Len(t, msgs.GetMessages(), 1)
	require.Equal(t, []string{"session_created", "message_received", "message_routed"}, eventTypes(f.events(t, ctx, s, 0)))
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.messages.WithLabelValues("classifier", "architect")))

	// A suspended session still answers a retry with the stored outcome,
	// while a new request id is refused.
	_, err = f.svc.SuspendSession(ctx, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	retried, err := f.svc.SendMessage(ctx, req)
	require.NoError(t, err)
	require.True(t, proto.Equal(again, retried))
	_, err = f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "/help", RequestId: "req-2"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionNotActive, "resume it first")

	// Slash commands replay their reply.
	_, err = f.svc.ResumeSession(ctx, &guidev1.ResumeSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	first, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "/status", RequestId: "req-3"})
	require.NoError(t, err)
	second, err := f.svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "/status", RequestId: "req-3"})
	require.NoError(t, err)
	require.True(t, proto.Equal(first, second))
	require.Contains(t, second.GetReply(), "is active")
	help := &guidev1.SendMessageRequest{Parent: s.GetName(), Text: "/help", RequestId: "req-4"}
	first, err = f.svc.SendMessage(ctx, help)
	require.NoError(t, err)
	second, err = f.svc.SendMessage(ctx, help)
	require.NoError(t, err)
	require.True(t, proto.Equal(first, second))
	require.Equal(t, helpText(), second.GetReply())

	// A reply that is a message of its own is stored once, as that message.
	rows, err := f.svc.db.Query(context.Background(), `SELECT reply FROM messages WHERE request_id IN ('req-3', 'req-4')`)
	require.NoError(t, err)
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"", ""}, stored)
}

func TestListEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "events")
	noise := f.createSession(t, ctx, "noise")
	for _, text := range []string{"/help", "/status", "/session list"} {
		f.send(t, ctx, s, text)
		f.send(t, ctx, noise, text)
	}

	all := f.events(t, ctx, s, 0)
	require.Equal(t, []string{
		"session_created",
		"message_received", "message_answered",
		"message_received", "message_answered",
		"message_received", "message_answered",
	}, eventTypes(all))
	for i, e := range all {
		require.Equal(t, s.GetId(), e.GetSessionId())
		require.NotNil(t, e.GetCreateTime())
		if i > 0 {
			require.Greater(t, e.GetSequence(), all[i-1].GetSequence())
		}
	}

	rest := f.events(t, ctx, s, all[2].GetSequence())
	require.Len(t, rest, 4)
	for i, e := range rest {
		require.True(t, proto.Equal(all[3+i], e))
	}
	require.Empty(t, f.events(t, ctx, s, all[len(all)-1].GetSequence()))

	page, err := f.svc.ListEvents(ctx, &guidev1.ListEventsRequest{Parent: s.GetName(), AfterSequence: all[0].GetSequence(), PageSize: 2})
	require.NoError(t, err)
	require.Len(t, page.GetEvents(), 2)
	require.Equal(t, all[1].GetSequence(), page.GetEvents()[0].GetSequence())

	_, err = f.svc.ListEvents(ctx, &guidev1.ListEventsRequest{Parent: s.GetName(), PageSize: -5})
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "page_size")
	_, err = f.svc.ListEvents(ctx, &guidev1.ListEventsRequest{Parent: s.GetName(), AfterSequence: math.MaxUint64})
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "after_sequence")

	// Readers remove their ephemeral consumers.
	stream, err := f.bus.JS.Stream(context.Background(), topology.EventsStream(f.bus))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := stream.Info(context.Background())
		return err == nil && info.State.Consumers == 0
	}, 5*time.Second, 20*time.Millisecond)
}

func TestListMessagesPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "paging")
	var want []string
	for _, text := range []string{"/help", "/status", "hello there"} {
		resp := f.send(t, ctx, s, text)
		want = append(want, resp.GetMessage().GetName())
	}
	var got []*guidev1.Message
	token := ""
	for {
		resp, err := f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: s.GetName(), PageSize: 4, PageToken: token})
		require.NoError(t, err)
		got = append(got, resp.GetMessages()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Len(t, got, 6, "three user messages and three guide replies")
	for i := 0; i < len(got); i += 2 {
		require.Equal(t, want[i/2], got[i].GetName())
		require.Equal(t, "user", got[i].GetAuthor())
		require.Equal(t, "guide", got[i+1].GetAuthor())
		require.Equal(t, got[i].GetCorrelationId(), got[i+1].GetCorrelationId())
	}
}

func TestStreamEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	conn := testenv.ServeGRPC(t, f.svc.Register)
	who := identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember}
	ctx := identity.AppendOutgoing(context.Background(), who)
	sessions := guidev1.NewSessionServiceClient(conn)
	guide := guidev1.NewGuideServiceClient(conn)

	created, err := sessions.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{DisplayName: "stream"}})
	require.NoError(t, err)
	sess := created.GetSession()

	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := guide.StreamEvents(streamCtx, &guidev1.StreamEventsRequest{Parent: sess.GetName()})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, "session_created", typeName(first.GetEvent()))

	// Published after the stream started: the stream follows it.
	sent, err := guide.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: sess.GetName(), Text: "/help"})
	require.NoError(t, err)
	var got []*eventv1.Event
	for len(got) < 2 {
		resp, err := stream.Recv()
		require.NoError(t, err)
		got = append(got, resp.GetEvent())
	}
	require.Equal(t, []string{"message_received", "message_answered"}, eventTypes(got))
	require.Equal(t, sent.GetCorrelationId(), got[1].GetCorrelationId())
	require.Greater(t, got[0].GetSequence(), first.GetEvent().GetSequence())
	cancel()
	_, err = stream.Recv()
	require.Equal(t, codes.Canceled, status.Code(err))

	// Resuming after a sequence skips what the client has seen.
	resumeCtx, cancelResume := context.WithCancel(ctx)
	defer cancelResume()
	resumed, err := guide.StreamEvents(resumeCtx, &guidev1.StreamEventsRequest{Parent: sess.GetName(), AfterSequence: got[0].GetSequence()})
	require.NoError(t, err)
	next, err := resumed.Recv()
	require.NoError(t, err)
	require.Equal(t, got[1].GetSequence(), next.GetEvent().GetSequence())

	// Another user cannot stream the session.
	other := identity.AppendOutgoing(context.Background(), identity.Identity{TenantID: "t1", UserID: "u2", Role: identity.RoleMember})
	denied, err := guide.StreamEvents(other, &guidev1.StreamEventsRequest{Parent: sess.GetName()})
	require.NoError(t, err)
	_, err = denied.Recv()
	require.Equal(t, codes.NotFound, status.Code(err))
}

// With the bus down, a session's lifecycle change is still made and a read
// of its events fails with UNAVAILABLE, each within PublishTimeout: neither
// holds the caller until it gives up.
func TestBusDownAnswersInTime(t *testing.T) {
	t.Parallel()
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	ns, url, err := natsx.RunEmbedded(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	bus, err := natsx.Connect(context.Background(), natsx.Config{URL: url, Prefix: "busdown"}, logx.Discard(), t.Name())
	require.NoError(t, err)
	t.Cleanup(bus.Conn.Close)
	require.NoError(t, topology.EnsureEvents(context.Background(), bus))
	svc, err := New(Config{PublishTimeout: 200 * time.Millisecond},
		app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Redis: testenv.Redis(t), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	f := fixture{svc: svc, bus: bus}
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "before")
	require.NotEmpty(t, f.events(t, ctx, s, 0))

	ns.Shutdown()
	ns.WaitForShutdown()
	// The caller's own deadline is far: only the bound can end the waits.
	long, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	_, err = svc.SuspendSession(long, &guidev1.SuspendSessionRequest{Name: s.GetName()})
	require.NoError(t, err, "the change is committed; its event is left to the log")
	_, err = svc.ListEvents(long, &guidev1.ListEventsRequest{Parent: s.GetName()})
	testenv.RequireReason(t, err, codes.Unavailable, apierr.ReasonBusUnavailable, "event stream unavailable")
}

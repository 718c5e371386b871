package gateway

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// fakeGuide is a small in-test Guide: sessions "sessions/s1" (three events,
// then the stream ends), "sessions/all" (an event of every type),
// "sessions/idle" (no events, the stream stays open) "sessions/broken" (one
// event, then an error) and "sessions/flood" (large events as fast as the
// stream takes them) exist. It records the metadata of every call.
type fakeGuide struct {
	guidev1.UnimplementedSessionServiceServer
	guidev1.UnimplementedGuideServiceServer

	mu          sync.Mutex
	calls       map[string][]metadata.MD
	idleStreams int // open streams of sessions/idle
	idleClosed  int // streams of sessions/idle that ended
	floodOpen   int // open streams of sessions/flood
	floodClosed int // streams of sessions/flood that ended
}

func newFakeGuide() *fakeGuide { return &fakeGuide{calls: map[string][]metadata.MD{}} }

func (f *fakeGuide) record(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method] = append(f.calls[method], md.Copy())
}

func (f *fakeGuide) callsOf(method string) []metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metadata.MD(nil), f.calls[method]...)
}

func (f *fakeGuide) idle() (open, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idleStreams, f.idleClosed
}

func (f *fakeGuide) flood() (open, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.floodOpen, f.floodClosed
}

var knownSessions = map[string]bool{"sessions/s1": true, "sessions/all": true, "sessions/idle": true, "sessions/broken": true, "sessions/flood": true}

// errSessionCompleted is the fake's refusal to go on streaming a session.
var errSessionCompleted = apierr.FailedPrecondition("SESSION_COMPLETED", "session was completed")

func (f *fakeGuide) CreateSession(ctx context.Context, req *guidev1.CreateSessionRequest) (*guidev1.CreateSessionResponse, error) {
	f.record(ctx, "CreateSession")
	// Metadata of the service's own, which the client never sees.
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-internal-note", "header"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-internal-trailer", "trailer"))
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	return &guidev1.CreateSessionResponse{Session: &guidev1.Session{
		Name: "sessions/s1", Id: "s1", DisplayName: req.GetSession().GetDisplayName(),
		State: guidev1.SessionState_SESSION_STATE_CREATED, TenantId: id.TenantID, UserId: id.UserID,
	}}, nil
}

func (f *fakeGuide) GetSession(ctx context.Context, req *guidev1.GetSessionRequest) (*guidev1.GetSessionResponse, error) {
	f.record(ctx, "GetSession")
	if !knownSessions[req.GetName()] {
		return nil, apierr.NotFound("session", req.GetName())
	}
	return &guidev1.GetSessionResponse{Session: &guidev1.Session{Name: req.GetName()}}, nil
}

func (f *fakeGuide) ListSessions(ctx context.Context, _ *guidev1.ListSessionsRequest) (*guidev1.ListSessionsResponse, error) {
	f.record(ctx, "ListSessions")
	return &guidev1.ListSessionsResponse{Sessions: []*guidev1.Session{{Name: "sessions/s1"}}}, nil
}

func (f *fakeGuide) SendMessage(ctx context.Context, req *guidev1.SendMessageRequest) (*guidev1.SendMessageResponse, error) {
	f.record(ctx, "SendMessage")
	if !knownSessions[req.GetParent()] {
		return nil, apierr.NotFound("session", req.GetParent())
	}
	if len(req.GetText()) > 16 {
		return nil, apierr.Invalid("text", "at most 16 bytes")
	}
	return &guidev1.SendMessageResponse{Reply: "ok"}, nil
}

var fakeEvents = []*eventv1.Event{
	{Sequence: 1, SessionId: "s1", Type: eventv1.EventType_EVENT_TYPE_MESSAGE_RECEIVED, Source: "guide", Text: "hello\nworld",
		Payload: &eventv1.Event_MessageReceived{MessageReceived: &eventv1.MessageReceived{Message: "sessions/s1/messages/m1", Author: "user"}}},
	{Sequence: 5, SessionId: "s1", Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ROUTED, Source: "guide",
		Payload: &eventv1.Event_MessageRouted{MessageRouted: &eventv1.MessageRouted{Target: "librarian", Tier: "classifier"}}},
	{Sequence: 9, SessionId: "s1", Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, Source: "librarian",
		CreateTime: timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)),
		Payload: &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{Agent: "librarian", Text: "found it",
			Hits: []*messagev1.Hit{{Title: "a.go", Path: "a.go", LineStart: 3, Kind: messagev1.HitKind_HIT_KIND_CODE}}}}},
}

// eventsOf are the events of session parent, in order.
func eventsOf(parent string) []*eventv1.Event {
	if parent == "sessions/all" {
		return everyEvent()
	}
	return fakeEvents
}

func (f *fakeGuide) ListEvents(ctx context.Context, req *guidev1.ListEventsRequest) (*guidev1.ListEventsResponse, error) {
	f.record(ctx, "ListEvents")
	if !knownSessions[req.GetParent()] {
		return nil, apierr.NotFound("session", req.GetParent())
	}
	resp := &guidev1.ListEventsResponse{}
	for _, ev := range eventsOf(req.GetParent()) {
		if ev.GetSequence() > req.GetAfterSequence() {
			resp.Events = append(resp.Events, ev)
		}
	}
	return resp, nil
}

func (f *fakeGuide) StreamEvents(req *guidev1.StreamEventsRequest, stream grpc.ServerStreamingServer[guidev1.StreamEventsResponse]) error {
	ctx := stream.Context()
	f.record(ctx, "StreamEvents")
	if !knownSessions[req.GetParent()] {
		return apierr.NotFound("session", req.GetParent())
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	if req.GetParent() == "sessions/broken" {
		if err := stream.Send(&guidev1.StreamEventsResponse{Event: fakeEvents[0]}); err != nil {
			return err
		}
		return errSessionCompleted
	}
	if req.GetParent() == "sessions/flood" {
		f.mu.Lock()
		f.floodOpen++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.floodClosed++
			f.mu.Unlock()
		}()
		text := strings.Repeat("x", 32<<10)
		for seq := uint64(1); ; seq++ {
			ev := &eventv1.Event{Sequence: seq, SessionId: "flood", Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, Source: "librarian", Text: text,
				Payload: &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{Agent: "librarian", Text: text}}}
			if err := stream.Send(&guidev1.StreamEventsResponse{Event: ev}); err != nil {
				return err
			}
		}
	}
	if req.GetParent() == "sessions/idle" {
		f.mu.Lock()
		f.idleStreams++
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		f.idleClosed++
		f.mu.Unlock()
		return ctx.Err()
	}
	for _, ev := range eventsOf(req.GetParent()) {
		if ev.GetSequence() <= req.GetAfterSequence() {
			continue
		}
		if err := stream.Send(&guidev1.StreamEventsResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

type harness struct {
	db     *pgxpool.Pool
	gw     *Gateway
	reg    *prometheus.Registry
	fake   *fakeGuide
	conn   *grpc.ClientConn
	url    string
	admin  string
	member string
	viewer string
	tenant string
	// auditDB is a pool on the audit log's schema auditSchema.
	auditDB     *pgxpool.Pool
	auditSchema string
}

// startFake serves the fake Guide on a real gRPC server with the mesh's
// interceptors (so calls without identity metadata fail) and returns a
// client connection to it.
func startFake(t *testing.T) (*fakeGuide, *grpc.ClientConn) {
	t.Helper()
	fake := newFakeGuide()
	return fake, testenv.ServeGRPC(t, func(s *grpc.Server) {
		guidev1.RegisterSessionServiceServer(s, fake)
		guidev1.RegisterGuideServiceServer(s, fake)
	})
}

func newHarness(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	db, _ := testenv.Postgres(t, "auth", migrations.FS("auth"))
	auditDB, auditSchema := testenv.Postgres(t, "audit", migrations.FS(audit.Schema))
	log, err := audit.New(auditDB, auditSchema)
	require.NoError(t, err)
	fake, conn := startFake(t)
	cfg := testenv.FromFlags[Config](t)
	cfg.ListenAddress = "127.0.0.1:0"
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	gw, err := New(cfg, logx.Discard(), db, Conns{Guide: conn}, reg, WithAudit(log), WithRedis(testenv.Redis(t)))
	require.NoError(t, err)
	h := &harness{db: db, gw: gw, reg: reg, fake: fake, conn: conn, url: newTestServer(t, gw), tenant: "acme",
		auditDB: auditDB, auditSchema: auditSchema}
	ctx := context.Background()
	h.admin, err = CreateAPIKey(ctx, db, "acme", "alice", identity.RoleAdmin, "test admin")
	require.NoError(t, err)
	h.member, err = CreateAPIKey(ctx, db, "acme", "bob", identity.RoleMember, "test member")
	require.NoError(t, err)
	h.viewer, err = CreateAPIKey(ctx, db, "acme", "carol", identity.RoleViewer, "test viewer")
	require.NoError(t, err)
	return h
}

type response struct {
	code   int
	header http.Header
	body   string
}

// do sends a request; headers are "Name: value" strings.
func (h *harness) do(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, h.url+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, hv := range headers {
		k, v, ok := strings.Cut(hv, ":")
		require.True(t, ok, "header %q", hv)
		req.Header.Add(k, strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

func bearer(key string) string { return "Authorization: Bearer " + key }

// requireError checks a response in the JSON error form and returns its
// body.
func requireError(t *testing.T, r response, httpStatus int, c codes.Code, reason, msgContains string) errorBody {
	t.Helper()
	require.Equal(t, httpStatus, r.code, r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	return requireErrorBody(t, r.body, c, reason, msgContains)
}

// requireErrorBody checks one JSON error body: exactly its seven fields,
// the code and its name, the ErrorInfo's reason and domain, also among the
// details as google.rpc.Status renders them, and the message.
func requireErrorBody(t *testing.T, body string, c codes.Code, reason, msgContains string) errorBody {
	t.Helper()
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &fields), body)
	require.ElementsMatch(t, []string{"code", "status", "message", "reason", "domain", "metadata", "details"}, slices.Collect(maps.Keys(fields)), body)
	var b errorBody
	require.NoError(t, json.Unmarshal([]byte(body), &b))
	require.Equal(t, int(c), b.Code, body)
	require.Equal(t, apierr.CodeName(c), b.Status)
	require.Equal(t, reason, b.Reason, body)
	require.Equal(t, apierr.Domain, b.Domain)
	require.Contains(t, b.Message, msgContains)
	info := errorDetail(t, b, "google.rpc.ErrorInfo")
	require.Equal(t, reason, info["reason"])
	require.Equal(t, apierr.Domain, info["domain"])
	return b
}

// errorDetail is the detail of type name ("google.rpc.ErrorInfo") of b, as
// JSON.
func errorDetail(t *testing.T, b errorBody, name string) map[string]any {
	t.Helper()
	for _, d := range b.Details {
		var m map[string]any
		require.NoError(t, json.Unmarshal(d, &m))
		if m["@type"] == "type.googleapis.com/"+name {
			return m
		}
	}
	t.Fatalf("no %s among the details of %+v", name, b)
	return nil
}

func (h *harness) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

func (h *harness) labelValues(t *testing.T, name, label string) []string {
	t.Helper()
	mfs, err := h.reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out = append(out, lp.GetValue())
				}
			}
		}
	}
	return out
}

// newTestServer serves gw's handler over real HTTP and returns its URL.
func newTestServer(t *testing.T, gw *Gateway) string {
	t.Helper()
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// grpcDialClosedPort returns a client connection to a port nothing listens on.
func grpcDialClosedPort(t *testing.T) (*grpc.ClientConn, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	conn, err := grpcclient.Dial(addr, nil)
	if err == nil {
		t.Cleanup(func() { _ = conn.Close() })
	}
	return conn, err
}

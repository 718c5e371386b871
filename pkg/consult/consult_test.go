package consult

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

func TestMatrix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to string
		want     bool
	}{
		{Designer, Engineer, true},
		{Architect, Academic, true},
		{Guide, Tester, true},
		{Engineer, Librarian, true},
		{Inspector, Academic, false},
		{Tester, Academic, false},
		{Inspector, Librarian, true},
		{Tester, Engineer, true},
		{Librarian, Archivalist, true},
		{Librarian, Engineer, false},
		{Archivalist, Architect, false},
		{Academic, Librarian, true},
		{Academic, Tester, false},
		{Orchestrator, Librarian, false},
		{"stranger", Guide, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, Allowed(tt.from, tt.to), "%s -> %s", tt.from, tt.to)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	short := "where is the retry policy?"
	require.Equal(t, short, Summary(short))
	long := strings.Repeat("é", 150)
	got := Summary(long)
	require.Equal(t, strings.Repeat("é", 100)+"...", got)
}

// recordSink keeps logs for the test.
type recordSink struct {
	mu   sync.Mutex
	logs []Log
}

func (r *recordSink) Log(_ context.Context, l Log) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, l)
}

func (r *recordSink) all() []Log {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Log(nil), r.logs...)
}

type fakeArchive struct {
	archivalistv1.UnimplementedArchivalistServiceServer
}

func (fakeArchive) SearchEntries(context.Context, *archivalistv1.SearchEntriesRequest) (*archivalistv1.SearchEntriesResponse, error) {
	return &archivalistv1.SearchEntriesResponse{}, nil
}

// serve runs a server that plays target behind the real interceptor chain.
func serve(t *testing.T, target string, sink Sink) archivalistv1.ArchivalistServiceClient {
	t.Helper()
	conn := testenv.ServeGRPC(t, func(s *grpc.Server) { archivalistv1.RegisterArchivalistServiceServer(s, fakeArchive{}) }, ServerOption(target, sink))
	return archivalistv1.NewArchivalistServiceClient(conn)
}

func caller(agent string) context.Context {
	ctx := identity.AppendOutgoing(context.Background(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleService})
	if agent != "" {
		ctx = WithCaller(ctx, agent)
	}
	return ctx
}

// Acceptance behaviours 24 and 25.
func TestInterceptor(t *testing.T) {
	t.Parallel()
	sink := &recordSink{}
	engineer := serve(t, Engineer, sink)
	academic := serve(t, Academic, sink)
	session := ids.New()
	question := strings.Repeat("how should the retry loop back off when the provider keeps failing? ", 3)

	_, err := engineer.SearchEntries(caller(Designer), &archivalistv1.SearchEntriesRequest{Query: question, SessionId: session})
	require.NoError(t, err)
	logs := sink.all()
	require.Len(t, logs, 1)
	require.Equal(t, Designer, logs[0].From)
	require.Equal(t, Engineer, logs[0].To)
	require.Equal(t, session, logs[0].SessionID)
	require.Equal(t, "t1", logs[0].TenantID)
	require.Len(t, []rune(logs[0].Summary), SummaryChars+3)
	require.True(t, strings.HasSuffix(logs[0].Summary, "..."))

	_, err = academic.SearchEntries(caller(Inspector), &archivalistv1.SearchEntriesRequest{Query: "x"})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "through the guide")
	require.Equal(t, ReasonConsultationDenied, apierr.Reason(err))
	require.Len(t, sink.all(), 1, "a denied call is not logged")

	// A call that names no agent is not a consultation.
	_, err = academic.SearchEntries(caller(""), &archivalistv1.SearchEntriesRequest{Query: "x"})
	require.NoError(t, err)
	require.Len(t, sink.all(), 1)
}

// The NATS sink delivers a STORE_REQUEST to the Archivalist's inbox.
func TestNATSSink(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	require.NoError(t, topology.EnsureAgents(context.Background(), bus))
	inbox := topology.InboxSubject(bus, topology.AgentArchivalist)
	sink := NewNATSSink(bus, inbox, logx.Discard(), nil, SinkConfig{})
	client := serve(t, Engineer, sink)
	_, err := client.SearchEntries(caller(Designer), &archivalistv1.SearchEntriesRequest{Query: strings.Repeat("q", 120)})
	require.NoError(t, err)
	cons, err := bus.JS.CreateOrUpdateConsumer(context.Background(), bus.Stream(topology.StreamAgents), jetstream.ConsumerConfig{
		Durable: "test-archivalist", FilterSubject: inbox, AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	env := &messagev1.Envelope{}
	require.NoError(t, proto.Unmarshal(msg.Data(), env))
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST, env.GetType())
	require.Equal(t, CategoryConsultation, env.GetStoreRequest().GetCategory())
	require.Equal(t, "designer consulted engineer", env.GetStoreRequest().GetTitle())
	require.Equal(t, "t1", env.GetTenantId())
	require.Equal(t, "designer -> engineer: "+strings.Repeat("q", 100)+"...", env.GetStoreRequest().GetContent())
}

package guide

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

func TestValidateChange(t *testing.T) {
	t.Parallel()
	c := newKeywordClassifier()
	tests := []struct {
		text, check string
	}{
		{"Refactor the scheduler loop", ""},
		{"fix the bug in ParseConfig", ""},
		{"improve the performance", ""}, // OPEN_ENDED: the architect clarifies its scope
		{"fix issue #42 and open a pull request", ""},
		{"refactor everything", checkScope},
		{"update the whole codebase", checkScope},
		{"refactor everything in ParseConfig", ""},
		{"fix it", checkContext},
		{"change this", checkContext},
		{"implement the cache the usual way", checkAssumptions},
		{"add retries as we discussed", checkAssumptions},
		{"where is the auth middleware", ""}, // not a change
	}
	for _, tt := range tests {
		cl, err := c.Classify(context.Background(), tt.text)
		require.NoError(t, err)
		check, question := validateChange(cl, tt.text)
		require.Equal(t, tt.check, check, "%q (%s %s, subject %q)", tt.text, cl.Target, cl.IntentType, cl.Subject)
		require.Equal(t, check == "", question == "")
	}
}

// TestIntentGateSteps drives steps 2 and 3 through SendMessage: a change
// that fails a check becomes a question; the answer adds the detail and the
// request is routed to the architect with the librarian's and the
// archivalist's answers attached.
func TestIntentGateSteps(t *testing.T) {
	t.Parallel()
	lib := &fakeLibrarian{}
	arc := &fakeArchivalist{}
	conn := fakePeers(t, lib, arc)
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	bus := testenv.NATS(t)
	svc, err := New(Config{}, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Redis: testenv.Redis(t),
		Registerer: prometheus.NewRegistry(), Peers: app.Peers{Librarian: conn, Archivalist: conn}})
	require.NoError(t, err)
	f := fixture{svc: svc, bus: bus}
	ctx := as("t1", "u1")
	sess := f.createSession(t, ctx, "gate")
	architect := inboxReader(t, bus, "architect")

	// Step 2: unbounded scope is asked about.
	first := f.send(t, ctx, sess, "refactor everything")
	require.Empty(t, first.GetRoute().GetTarget())
	require.Contains(t, first.GetReply(), "Which part should this cover")
	clar, err := svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: sess.GetName()})
	require.NoError(t, err)
	require.Len(t, clar.GetClarifications(), 1)

	// The answer bounds it; step 3 consults both agents before routing.
	resp, err := svc.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: sess.GetName(), Text: "only the retry loop in ParseConfig",
		InReplyTo: clar.GetClarifications()[0].GetName()})
	require.NoError(t, err)
	require.Equal(t, "architect", resp.GetRoute().GetTarget())
	env := nextEnvelope(t, architect)
	require.Equal(t, "refactor everything only the retry loop in ParseConfig", env.GetStructuredIntent().GetOriginalRequest())
	require.Equal(t, "2 places in the code: config/parse.go:10-40 ParseConfig; config/retry.go:5-9", env.GetPreRoute().GetCodebaseHealth())
	require.Equal(t, "1 similar failures recorded: Retry loop spun forever on EOF", env.GetPreRoute().GetFailurePatterns())
	lib.mu.Lock()
	require.Equal(t, "guide", lib.caller, "the guide consults as itself")
	lib.mu.Unlock()
	arc.mu.Lock()
	require.True(t, arc.cross, "failures are searched across sessions")
	require.Equal(t, "failure", arc.category)
	// A change that passes the checks is routed at once, also enriched; a
	// consultation that fails is attached as unavailable.
	arc.fail = true
	arc.mu.Unlock()
	resp = f.send(t, ctx, sess, "Refactor the scheduler loop")
	require.Equal(t, "architect", resp.GetRoute().GetTarget())
	env = nextEnvelope(t, architect)
	require.Contains(t, env.GetPreRoute().GetFailurePatterns(), "unavailable: ")
	require.NotEmpty(t, env.GetPreRoute().GetCodebaseHealth())
	lib.mu.Lock()
	require.Empty(t, lib.repos, "a session with no repository searches all of the tenant's")
	lib.mu.Unlock()
	// A session's repository is the one searched.
	svc.codebaseHealth(ctx, "retry loop", "repositories/r1")
	lib.mu.Lock()
	require.Equal(t, []string{"repositories/r1"}, lib.repos)
	lib.mu.Unlock()
}

type fakeLibrarian struct {
	librarianv1.UnimplementedLibrarianServiceServer
	mu     sync.Mutex
	caller string
	repos  []string
}

func (f *fakeLibrarian) SearchCode(ctx context.Context, req *librarianv1.SearchCodeRequest) (*librarianv1.SearchCodeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.caller = consult.Caller(ctx)
	f.repos = req.GetRepositories()
	return &librarianv1.SearchCodeResponse{Status: "ok", Hits: []*librarianv1.CodeHit{
		{Path: "config/parse.go", LineStart: 10, LineEnd: 40, Symbol: "ParseConfig"},
		{Path: "config/retry.go", LineStart: 5, LineEnd: 9},
	}}, nil
}

type fakeArchivalist struct {
	archivalistv1.UnimplementedArchivalistServiceServer
	mu       sync.Mutex
	cross    bool
	category string
	fail     bool
}

func (f *fakeArchivalist) SearchEntries(_ context.Context, req *archivalistv1.SearchEntriesRequest) (*archivalistv1.SearchEntriesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, context.DeadlineExceeded
	}
	f.cross, f.category = req.GetCrossSession(), req.GetCategory()
	return &archivalistv1.SearchEntriesResponse{Hits: []*archivalistv1.EntryHit{
		{Entry: &archivalistv1.Entry{Category: "failure", Title: "Retry loop spun forever on EOF"}},
	}}, nil
}

// fakePeers serves the fakes on a loopback gRPC server with the mesh's
// interceptors.
func fakePeers(t *testing.T, lib librarianv1.LibrarianServiceServer, arc archivalistv1.ArchivalistServiceServer) *grpc.ClientConn {
	t.Helper()
	return testenv.ServeGRPC(t, func(s *grpc.Server) {
		librarianv1.RegisterLibrarianServiceServer(s, lib)
		archivalistv1.RegisterArchivalistServiceServer(s, arc)
	})
}

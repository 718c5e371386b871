package architect

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
)

// fakeGuide answers GetSession with the sessions it was given, for their
// owner "u1"; any other session is not found.
type fakeGuide struct {
	guidev1.UnimplementedSessionServiceServer
	mu       sync.Mutex
	sessions map[string]*guidev1.Session
}

func (g *fakeGuide) GetSession(ctx context.Context, req *guidev1.GetSessionRequest) (*guidev1.GetSessionResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	who, _ := identity.FromContext(ctx)
	sess, ok := g.sessions[req.GetName()]
	if !ok || who.UserID != "u1" {
		return nil, status.Errorf(codes.NotFound, "session %s not found", req.GetName())
	}
	return &guidev1.GetSessionResponse{Session: proto.Clone(sess).(*guidev1.Session)}, nil
}

// session adds an active session on repository with config, and returns
// its name.
func (g *fakeGuide) session(repository string, config *guidev1.SessionConfig) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	name := "sessions/" + ids.New()
	g.sessions[name] = &guidev1.Session{Name: name, State: guidev1.SessionState_SESSION_STATE_ACTIVE, Repository: repository, Config: config}
	return name
}

// fakeLibrarian knows one repository and answers every search in it with
// the same hits.
type fakeLibrarian struct {
	librarianv1.UnimplementedLibrarianServiceServer
	repo *librarianv1.Repository
	hits []*librarianv1.CodeHit
	mu   sync.Mutex
	// hang makes GetRepository wait for the caller to give up.
	hang bool
	// searches and callers are what SearchCode was asked, and by whom.
	searches []*librarianv1.SearchCodeRequest
	callers  []string
}

func (l *fakeLibrarian) setHang(hang bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hang = hang
}

func (l *fakeLibrarian) GetRepository(ctx context.Context, req *librarianv1.GetRepositoryRequest) (*librarianv1.GetRepositoryResponse, error) {
	l.mu.Lock()
	hang := l.hang
	l.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if req.GetName() != l.repo.GetName() {
		return nil, status.Errorf(codes.NotFound, "repository %s not found", req.GetName())
	}
	return &librarianv1.GetRepositoryResponse{Repository: l.repo}, nil
}

func (l *fakeLibrarian) SearchCode(ctx context.Context, req *librarianv1.SearchCodeRequest) (*librarianv1.SearchCodeResponse, error) {
	l.mu.Lock()
	l.searches = append(l.searches, proto.Clone(req).(*librarianv1.SearchCodeRequest))
	l.callers = append(l.callers, consult.Caller(ctx))
	l.mu.Unlock()
	return &librarianv1.SearchCodeResponse{Hits: l.hits, Status: "ok"}, nil
}

func (l *fakeLibrarian) asked() ([]*librarianv1.SearchCodeRequest, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*librarianv1.SearchCodeRequest(nil), l.searches...), append([]string(nil), l.callers...)
}

// fakeArchivalist answers a search with the entries of its category, or
// fails with fail.
type fakeArchivalist struct {
	archivalistv1.UnimplementedArchivalistServiceServer
	entries map[string][]string
	mu      sync.Mutex
	fail    error
	asked   []*archivalistv1.SearchEntriesRequest
}

func (a *fakeArchivalist) setFail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = err
}

func (a *fakeArchivalist) SearchEntries(_ context.Context, req *archivalistv1.SearchEntriesRequest) (*archivalistv1.SearchEntriesResponse, error) {
	a.mu.Lock()
	a.asked = append(a.asked, proto.Clone(req).(*archivalistv1.SearchEntriesRequest))
	fail := a.fail
	a.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	out := &archivalistv1.SearchEntriesResponse{}
	for _, title := range a.entries[req.GetCategory()] {
		out.Hits = append(out.Hits, &archivalistv1.EntryHit{Entry: &archivalistv1.Entry{Category: req.GetCategory(), Title: title}})
	}
	return out, nil
}

// The repository the fake Librarian knows, and what it finds there.
var (
	testRepo = &librarianv1.Repository{Name: "repositories/r1", Id: "r1", DisplayName: "calc", Path: "/srv/repos/calc",
		IndexState: librarianv1.IndexState_INDEX_STATE_READY, FileCount: 12, ChunkCount: 40, LastCommit: "0123456789abcdef0123"}
	testHits = []*librarianv1.CodeHit{
		{Repository: "repositories/r1", Path: "pkg/x/x.go", LineStart: 3, LineEnd: 9, Symbol: "Add", Language: "go"},
		{Repository: "repositories/r1", Path: "pkg/x/x_test.go", LineStart: 5, LineEnd: 12, Symbol: "TestAdd", Language: "go"},
		{Repository: "repositories/r1", Path: "pkg/x/x.go", LineStart: 11, LineEnd: 14, Symbol: "Sub", Language: "go"},
	}
)

// peers are the fakes an Architect under test talks to.
type peers struct {
	guide       *fakeGuide
	librarian   *fakeLibrarian
	archivalist *fakeArchivalist
}

// newPeers serves a fake Guide, Librarian and Archivalist, with the mesh's
// interceptors.
func newPeers(t *testing.T) (peers, app.Peers) {
	t.Helper()
	p := peers{
		guide:     &fakeGuide{sessions: map[string]*guidev1.Session{}},
		librarian: &fakeLibrarian{repo: testRepo, hits: testHits},
		archivalist: &fakeArchivalist{entries: map[string][]string{
			consultedFailure: {"go test ./pkg/x timed out on a 2s deadline"},
			consultedChoice:  {"keep pkg/x free of dependencies"},
		}},
	}
	return p, app.Peers{
		Guide:       testenv.ServeGRPC(t, func(g *grpc.Server) { guidev1.RegisterSessionServiceServer(g, p.guide) }),
		Librarian:   testenv.ServeGRPC(t, func(g *grpc.Server) { librarianv1.RegisterLibrarianServiceServer(g, p.librarian) }),
		Archivalist: testenv.ServeGRPC(t, func(g *grpc.Server) { archivalistv1.RegisterArchivalistServiceServer(g, p.archivalist) }),
	}
}

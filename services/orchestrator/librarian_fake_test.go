package orchestrator_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
)

// fakeLibrarian is a registry of repositories by tenant, served over gRPC
// with the mesh's interceptors, so that it sees the caller the Orchestrator
// acts as. A URL it is asked to register is "cloned" to the directory
// clones names for it (a URL it does not know is refused).
type fakeLibrarian struct {
	librarianv1.UnimplementedLibrarianServiceServer
	mu      sync.Mutex
	tenants map[string][]*librarianv1.Repository
	clones  map[string]string
	created []string
}

func newFakeLibrarian() *fakeLibrarian {
	return &fakeLibrarian{tenants: map[string][]*librarianv1.Repository{}, clones: map[string]string{}}
}

// serve serves the fake and returns a connection to it.
func (f *fakeLibrarian) serve(t *testing.T) *grpc.ClientConn {
	t.Helper()
	return testenv.ServeGRPC(t, func(s *grpc.Server) { librarianv1.RegisterLibrarianServiceServer(s, f) })
}

// add registers a repository at path (or cloned from url) for tenant and
// returns its name.
func (f *fakeLibrarian) add(tenant, display, path, url string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := ids.New()
	f.tenants[tenant] = append(f.tenants[tenant], &librarianv1.Repository{Name: "repositories/" + id, Id: id,
		DisplayName: display, Path: path, Url: url})
	return "repositories/" + id
}

// cloneTo makes a registration of url "clone" it at dir.
func (f *fakeLibrarian) cloneTo(url, dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clones[url] = dir
}

// registered lists the repositories CreateRepository registered.
func (f *fakeLibrarian) registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.created...)
}

func (f *fakeLibrarian) repos(ctx context.Context) (string, []*librarianv1.Repository, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return "", nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return who.TenantID, append([]*librarianv1.Repository(nil), f.tenants[who.TenantID]...), nil
}

func (f *fakeLibrarian) GetRepository(ctx context.Context, req *librarianv1.GetRepositoryRequest) (*librarianv1.GetRepositoryResponse, error) {
	_, repos, err := f.repos(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range repos {
		if r.GetName() == req.GetName() {
			return &librarianv1.GetRepositoryResponse{Repository: r}, nil
		}
	}
	return nil, apierr.NotFound("repository", req.GetName())
}

func (f *fakeLibrarian) ListRepositories(ctx context.Context, _ *librarianv1.ListRepositoriesRequest) (*librarianv1.ListRepositoriesResponse, error) {
	_, repos, err := f.repos(ctx)
	return &librarianv1.ListRepositoriesResponse{Repositories: repos}, err
}

func (f *fakeLibrarian) CreateRepository(ctx context.Context, req *librarianv1.CreateRepositoryRequest) (*librarianv1.CreateRepositoryResponse, error) {
	tenant, _, err := f.repos(ctx)
	if err != nil {
		return nil, err
	}
	if !req.GetWait() || req.Index == nil || req.GetIndex() {
		// A run needs the clone at once, and no index.
		return nil, apierr.Invalid("wait", "the orchestrator registers with wait and index=false")
	}
	u := req.GetRepository().GetUrl()
	f.mu.Lock()
	dir, ok := f.clones[u]
	f.mu.Unlock()
	if !ok {
		return nil, apierr.FailedPrecondition("CLONE_FAILED", "repository.url: clone failed")
	}
	name := f.add(tenant, u[strings.LastIndex(u, "/")+1:], dir, u)
	f.mu.Lock()
	f.created = append(f.created, name)
	f.mu.Unlock()
	_, repos, _ := f.repos(ctx)
	return &librarianv1.CreateRepositoryResponse{Repository: repos[len(repos)-1]}, nil
}

// repo registers path with the harness's Librarian for ctx's tenant and
// returns the repository's name, which runs give as their repository.
func (h *harness) repo(t *testing.T, ctx context.Context, path string) string {
	t.Helper()
	require.NotNil(t, h.lib, "the harness has no librarian")
	who, err := identity.Require(ctx)
	require.NoError(t, err)
	return h.lib.add(who.TenantID, "", path, "")
}

package librarian

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
)

// fixture lines: where the fixture's definitions live.
const (
	parseLine   = 52 // func parseHTTPRequest in server/handler.go
	backoffLine = 4  // def compute_backoff_delay in retry/backoff.py
)

// writeFixture builds a small repository: Go, Python and markdown files
// that are indexed, and a binary file, a big file, a credentials file, a
// symlink leading outside, vendor, node_modules and hidden directories that
// are not. It returns the repository root, symlinks resolved.
func writeFixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	var handler strings.Builder
	handler.WriteString("package server\n\nimport \"net/http\"\n")
	for i := 4; i < parseLine-1; i++ {
		fmt.Fprintf(&handler, "// filler line %d keeps the definition in a later window\n", i)
	}
	handler.WriteString("// parseHTTPRequest reads the body of an incoming request.\n")
	handler.WriteString("func parseHTTPRequest(r *http.Request) ([]byte, error) {\n")
	handler.WriteString("\treturn readAll(r.Body)\n}\n")
	for i := parseLine + 3; i <= 70; i++ {
		fmt.Fprintf(&handler, "// trailing line %d\n", i)
	}
	write("server/handler.go", handler.String())
	write("retry/backoff.py", `import random


def compute_backoff_delay(attempt):
    """Exponential backoff with jitter: how long to wait before the next retry."""
    base = 2 ** attempt
    return base + random.random()


def should_retry(status):
    return status >= 500
`)
	write("README.md", "# Widget\n\nThe widget frobnicator turns gears.\nRequests are served by the server package.\n")
	write("docs/big.txt", strings.Repeat("enormousword ", 8000)) // ~100 KB, above the test limit
	write("assets/logo.bin", "PNG\x00\x01\x02binaryblobword")
	write(".env", "SECRET_TOKEN=supersecretvalue\n")
	write("vendor/lib/lib.go", "package lib\n\nfunc vendoredonlyword() {}\n")
	write("node_modules/pkg/index.js", "function vendoredonlyword() {}\n")
	write(".hidden/notes.go", "package hidden // vendoredonlyword\n")
	write(".git/config", "[core] vendoredonlyword\n")
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "leak.go"), []byte("package leak // vendoredonlyword\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "leak.go"), filepath.Join(root, "leak.go")))
	require.NoError(t, os.Symlink(filepath.Join(root, "README.md"), filepath.Join(root, "alias.md")))
	// Links to what the walk leaves out are left out too.
	require.NoError(t, os.Symlink(filepath.Join(root, ".env"), filepath.Join(root, "settings.txt")))
	require.NoError(t, os.Symlink(filepath.Join(root, ".git", "config"), filepath.Join(root, "gitconfig")))
	require.NoError(t, os.Symlink(filepath.Join(root, "server"), filepath.Join(root, "server-link")))
	resolved, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	return resolved
}

type harness struct {
	svc *Service
	reg *prometheus.Registry
	bus *natsx.Bus
}

// newHarness builds the service on a fresh schema (and a fresh NATS prefix
// when withBus is set), with a 64 KiB file limit.
func newHarness(t *testing.T, withBus bool, args ...string) harness {
	t.Helper()
	pool, schema := testenv.Postgres(t, "librarian", migrations.FS("librarian"))
	reg := prometheus.NewRegistry()
	deps := app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Registerer: reg}
	if withBus {
		deps.Bus = testenv.NATS(t)
	}
	cfg := testConfig(t, append([]string{"-librarian.max-file-bytes", "65536"}, args...)...)
	svc, err := New(cfg, deps)
	require.NoError(t, err)
	return harness{svc: svc, reg: reg, bus: deps.Bus}
}

// replicas builds services on one fresh schema, as replicas of one
// deployment (sharing rdb too when it is set), each with its own flags.
func replicas(t *testing.T, rdb *redisx.Client) (func(args ...string) *Service, *pgxpool.Pool) {
	t.Helper()
	pool, schema := testenv.Postgres(t, "librarian", migrations.FS("librarian"))
	return func(args ...string) *Service {
		t.Helper()
		svc, err := New(testConfig(t, args...), app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Redis: rdb, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		return svc
	}, pool
}

func as(t *testing.T, tenant string) context.Context {
	return identity.NewContext(t.Context(), identity.Identity{TenantID: tenant, UserID: "u1", Role: identity.RoleAdmin})
}

func create(t *testing.T, ctx context.Context, svc *Service, path string, index bool) *librarianv1.Repository {
	t.Helper()
	resp, err := svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Path: path}, Index: &index, Wait: true,
	})
	require.NoError(t, err)
	return resp.GetRepository()
}

func search(t *testing.T, ctx context.Context, svc *Service, q string) []*librarianv1.CodeHit {
	t.Helper()
	resp, err := svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: q})
	require.NoError(t, err)
	return resp.GetHits()
}

func TestIndexAndSearch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	root := writeFixture(t)
	ctx := as(t, "t1")

	repo := create(t, ctx, h.svc, root, false)
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_PENDING, repo.GetIndexState())
	require.Equal(t, "repositories/"+repo.GetId(), repo.GetName())
	require.Equal(t, root, repo.GetPath())
	require.Equal(t, filepath.Base(root), repo.GetDisplayName())
	require.Nil(t, repo.GetIndexTime())

	idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	// Indexed: handler.go, backoff.py, README.md, alias.md (a link inside the
	// root), and .env only as a stub (credentials). Skipped: big.txt (too
	// large), logo.bin (binary), and the links leak.go (outside), settings.txt
	// (to .env), gitconfig (into .git) and server-link (a directory).
	require.Equal(t, int64(5), idx.GetFilesIndexed())
	require.Equal(t, int64(6), idx.GetFilesSkipped())
	got := idx.GetRepository()
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_READY, got.GetIndexState())
	require.Equal(t, int64(5), got.GetFileCount())
	// handler.go: its imports and parseHTTPRequest (with the comments around
	// it); backoff.py: its import and two functions; the markdown files one
	// section each; .env one stub.
	require.Equal(t, int64(8), got.GetChunkCount())
	require.NotNil(t, got.GetIndexTime())
	require.Empty(t, got.GetIndexError())

	require.Equal(t, 5.0, testutil.ToFloat64(h.svc.metrics.indexFiles.WithLabelValues(resultIndexed)))
	require.Equal(t, 1.0, testutil.ToFloat64(h.svc.metrics.indexFiles.WithLabelValues(skipBinary)))
	require.Equal(t, 1.0, testutil.ToFloat64(h.svc.metrics.indexFiles.WithLabelValues(skipTooLarge)))
	require.Equal(t, 4.0, testutil.ToFloat64(h.svc.metrics.indexFiles.WithLabelValues(skipSymlink)))

	t.Run("by identifier", func(t *testing.T) {
		hits := search(t, ctx, h.svc, "where is parseHTTPRequest defined?")
		require.NotEmpty(t, hits)
		top := hits[0]
		require.Equal(t, "server/handler.go", top.GetPath())
		require.Equal(t, repo.GetName(), top.GetRepository())
		require.Equal(t, "parseHTTPRequest", top.GetSymbol())
		require.Equal(t, "function", top.GetSymbolKind())
		require.Equal(t, "go", top.GetLanguage())
		require.LessOrEqual(t, top.GetLineStart(), int32(parseLine))
		require.GreaterOrEqual(t, top.GetLineEnd(), int32(parseLine))
		require.Contains(t, top.GetSnippet(), "func parseHTTPRequest(")
		require.LessOrEqual(t, len([]rune(top.GetSnippet())), snippetChars)
		require.Greater(t, top.GetScore(), 1.0, "verbatim identifier boost")
		for _, hit := range hits[1:] {
			require.Less(t, hit.GetScore(), top.GetScore())
		}
	})
	t.Run("by split identifier", func(t *testing.T) {
		hits := search(t, ctx, h.svc, "http request parsing")
		require.NotEmpty(t, hits)
		require.Equal(t, "server/handler.go", hits[0].GetPath())
	})
	t.Run("by words", func(t *testing.T) {
		hits := search(t, ctx, h.svc, "how does the retry backoff work")
		require.NotEmpty(t, hits)
		require.Equal(t, "retry/backoff.py", hits[0].GetPath())
		require.Equal(t, int32(4), hits[0].GetLineStart())
		require.Equal(t, int32(7), hits[0].GetLineEnd())
		require.Equal(t, "compute_backoff_delay", hits[0].GetSymbol())
		require.Contains(t, hits[0].GetSnippet(), "compute_backoff_delay")
	})
	t.Run("snake case identifier", func(t *testing.T) {
		hits := search(t, ctx, h.svc, "compute_backoff_delay")
		require.NotEmpty(t, hits)
		require.Equal(t, "retry/backoff.py", hits[0].GetPath())
		require.True(t, strings.HasPrefix(hits[0].GetSnippet(), "def compute_backoff_delay"), hits[0].GetSnippet())
	})
	t.Run("by file name", func(t *testing.T) {
		hits := search(t, ctx, h.svc, "backoff.py")
		require.NotEmpty(t, hits)
		require.Equal(t, "retry/backoff.py", hits[0].GetPath())
	})
	t.Run("skipped content is not searchable", func(t *testing.T) {
		require.Empty(t, search(t, ctx, h.svc, "vendoredonlyword"))
		require.Empty(t, search(t, ctx, h.svc, "enormousword"))
		require.Empty(t, search(t, ctx, h.svc, "binaryblobword"))
		require.Empty(t, search(t, ctx, h.svc, "supersecretvalue"))
	})
	t.Run("page size", func(t *testing.T) {
		resp, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "line", PageSize: 1})
		require.NoError(t, err)
		require.Len(t, resp.GetHits(), 1)
	})
	t.Run("restricted to repositories", func(t *testing.T) {
		resp, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "frobnicator", Repositories: []string{repo.GetName()}})
		require.NoError(t, err)
		require.NotEmpty(t, resp.GetHits())
	})
	t.Run("reindex is idempotent", func(t *testing.T) {
		before := search(t, ctx, h.svc, "parseHTTPRequest retry widget")
		again, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.NoError(t, err)
		require.Equal(t, idx.GetFilesIndexed(), again.GetFilesIndexed())
		require.Equal(t, idx.GetFilesSkipped(), again.GetFilesSkipped())
		require.Equal(t, got.GetChunkCount(), again.GetRepository().GetChunkCount())
		var rows int
		require.NoError(t, h.svc.store.db.QueryRow(ctx, `SELECT count(*) FROM chunks`).Scan(&rows))
		require.Equal(t, int(got.GetChunkCount()), rows)
		after := search(t, ctx, h.svc, "parseHTTPRequest retry widget")
		require.Equal(t, len(before), len(after))
		for i := range before {
			require.Equal(t, before[i].GetPath(), after[i].GetPath())
			require.Equal(t, before[i].GetLineStart(), after[i].GetLineStart())
			require.InDelta(t, before[i].GetScore(), after[i].GetScore(), 1e-9)
		}
	})
	t.Run("reindex sees changes", func(t *testing.T) {
		require.NoError(t, os.WriteFile(filepath.Join(root, "retry", "jitter.go"), []byte("package retry\n\nfunc addJitter() {}\n"), 0o644))
		require.NoError(t, os.Remove(filepath.Join(root, "README.md")))
		again, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.NoError(t, err)
		// jitter.go added; README.md removed, and alias.md now dangles.
		require.Equal(t, int64(4), again.GetFilesIndexed())
		require.Equal(t, int64(7), again.GetFilesSkipped())
		require.Equal(t, "retry/jitter.go", search(t, ctx, h.svc, "addJitter")[0].GetPath())
		require.Empty(t, search(t, ctx, h.svc, "frobnicator"))
	})
}

func TestCreateWithIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	root := writeFixture(t)
	ctx := as(t, "t1")
	repo := create(t, ctx, h.svc, root, true)
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_READY, repo.GetIndexState())
	require.Equal(t, int64(5), repo.GetFileCount())
	require.NotEmpty(t, search(t, ctx, h.svc, "frobnicator"))

	got, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: repo.GetName()})
	require.NoError(t, err)
	require.Equal(t, repo.GetId(), got.GetRepository().GetId())
	require.Equal(t, int64(8), got.GetRepository().GetChunkCount())
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	root := writeFixture(t)
	a, b := as(t, "tenant-a"), as(t, "tenant-b")
	repo := create(t, a, h.svc, root, true)

	list, err := h.svc.ListRepositories(b, &librarianv1.ListRepositoriesRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetRepositories())
	_, err = h.svc.GetRepository(b, &librarianv1.GetRepositoryRequest{Name: repo.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Equal(t, "REPOSITORY_NOT_FOUND", apierr.Reason(err), "another tenant's repository is reported as missing")
	_, err = h.svc.IndexRepository(b, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Empty(t, search(t, b, h.svc, "parseHTTPRequest"))
	_, err = h.svc.SearchCode(b, &librarianv1.SearchCodeRequest{Query: "parseHTTPRequest", Repositories: []string{repo.GetName()}})
	require.Equal(t, codes.NotFound, status.Code(err))

	// The same directory may be registered by another tenant, separately.
	other := create(t, b, h.svc, root, false)
	require.NotEqual(t, repo.GetId(), other.GetId())
	require.Empty(t, search(t, b, h.svc, "parseHTTPRequest"), "tenant b has not indexed its copy")
	require.NotEmpty(t, search(t, a, h.svc, "parseHTTPRequest"))
}

func TestListRepositoriesPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	var want []string
	for range 5 {
		want = append(want, create(t, ctx, h.svc, t.TempDir(), false).GetName())
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		resp, err := h.svc.ListRepositories(ctx, &librarianv1.ListRepositoriesRequest{PageSize: 2, PageToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.GetRepositories()), 2)
		for _, r := range resp.GetRepositories() {
			got = append(got, r.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Equal(t, want, got)

	_, err := h.svc.ListRepositories(ctx, &librarianv1.ListRepositoriesRequest{PageToken: "not-a-token"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestBadInputs(t *testing.T) {
	t.Parallel()
	allowed := t.TempDir()
	outside := t.TempDir()
	inside := filepath.Join(allowed, "inside")
	require.NoError(t, os.Mkdir(inside, 0o755))
	require.NoError(t, os.Symlink(outside, filepath.Join(allowed, "escape")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(allowed, "etc")))
	file := filepath.Join(allowed, "file.txt")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	h := newHarness(t, false, "-librarian.allowed-roots", allowed)
	ctx := as(t, "t1")
	viewer := identity.NewContext(t.Context(), identity.Identity{TenantID: "t1", UserID: "v1", Role: identity.RoleViewer})

	repo := create(t, ctx, h.svc, inside, false)
	// Within allowed roots, members choose directories too.
	member := identity.NewContext(t.Context(), identity.Identity{TenantID: "t2", UserID: "m1", Role: identity.RoleMember})
	create(t, member, h.svc, inside, false)

	createTests := []struct {
		name string
		ctx  context.Context
		repo *librarianv1.Repository
		code codes.Code
		msg  string
	}{
		{"no repository", ctx, nil, codes.InvalidArgument, "repository: required"},
		{"no path", ctx, &librarianv1.Repository{}, codes.InvalidArgument, "repository.path: required"},
		{"relative path", ctx, &librarianv1.Repository{Path: "some/dir"}, codes.InvalidArgument, "absolute"},
		{"missing directory", ctx, &librarianv1.Repository{Path: filepath.Join(allowed, "missing")}, codes.InvalidArgument, "does not exist"},
		{"a file", ctx, &librarianv1.Repository{Path: file}, codes.InvalidArgument, "not a directory"},
		{"outside the allowed roots", ctx, &librarianv1.Repository{Path: outside}, codes.PermissionDenied, "is not under a directory this deployment allows"},
		{"outside through a symlink", ctx, &librarianv1.Repository{Path: filepath.Join(allowed, "escape")}, codes.PermissionDenied, "is not under a directory this deployment allows"},
		{"/etc", ctx, &librarianv1.Repository{Path: "/etc"}, codes.PermissionDenied, "is not under a directory this deployment allows"},
		{"/etc through a symlink", ctx, &librarianv1.Repository{Path: filepath.Join(allowed, "etc")}, codes.PermissionDenied, "is not under a directory this deployment allows"},
		{"long display name", ctx, &librarianv1.Repository{Path: allowed, DisplayName: strings.Repeat("n", 201)}, codes.InvalidArgument, "display_name"},
		{"duplicate", ctx, &librarianv1.Repository{Path: inside}, codes.AlreadyExists, repo.GetName()},
		{"duplicate through another spelling", ctx, &librarianv1.Repository{Path: inside + "/../inside/"}, codes.AlreadyExists, repo.GetName()},
		{"viewer", viewer, &librarianv1.Repository{Path: allowed}, codes.PermissionDenied, "viewers"},
		{"no identity", t.Context(), &librarianv1.Repository{Path: allowed}, codes.Unauthenticated, ""},
	}
	for _, tt := range createTests {
		t.Run("create "+tt.name, func(t *testing.T) {
			_, err := h.svc.CreateRepository(tt.ctx, &librarianv1.CreateRepositoryRequest{Repository: tt.repo})
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tt.msg)
		})
	}

	nameTests := []struct {
		name string
		code codes.Code
	}{
		{"", codes.InvalidArgument},
		{"repos/" + repo.GetId(), codes.InvalidArgument},
		{"repositories/not-a-uuid", codes.InvalidArgument},
		{"repositories/0190a6c5-0000-7000-8000-000000000000", codes.NotFound},
	}
	for _, tt := range nameTests {
		t.Run("get "+tt.name, func(t *testing.T) {
			_, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: tt.name})
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: tt.name, Wait: true})
			require.Equal(t, tt.code, status.Code(err), "%v", err)
		})
	}

	searchTests := []struct {
		name string
		req  *librarianv1.SearchCodeRequest
		code codes.Code
	}{
		{"empty query", &librarianv1.SearchCodeRequest{Query: "  "}, codes.InvalidArgument},
		{"long query", &librarianv1.SearchCodeRequest{Query: strings.Repeat("q", 1001)}, codes.InvalidArgument},
		{"nothing searchable", &librarianv1.SearchCodeRequest{Query: "?!"}, codes.InvalidArgument},
		{"negative page size", &librarianv1.SearchCodeRequest{Query: "x", PageSize: -1}, codes.InvalidArgument},
		{"bad repository name", &librarianv1.SearchCodeRequest{Query: "x", Repositories: []string{"nope"}}, codes.InvalidArgument},
		{"unknown repository", &librarianv1.SearchCodeRequest{Query: "x", Repositories: []string{"repositories/0190a6c5-0000-7000-8000-000000000000"}}, codes.NotFound},
		{"big page size is capped", &librarianv1.SearchCodeRequest{Query: "x", PageSize: 5000}, codes.OK},
		{"query of stop words", &librarianv1.SearchCodeRequest{Query: "what is this"}, codes.OK},
	}
	for _, tt := range searchTests {
		t.Run("search "+tt.name, func(t *testing.T) {
			_, err := h.svc.SearchCode(ctx, tt.req)
			require.Equal(t, tt.code, status.Code(err), "%v", err)
		})
	}

	t.Run("viewer cannot index", func(t *testing.T) {
		_, err := h.svc.IndexRepository(viewer, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.Equal(t, codes.PermissionDenied, status.Code(err))
	})
}

// Text the database cannot hold (a NUL character) is refused as an
// invalid argument wherever a request carries it, not failed on as an
// internal error.
func TestNULIsInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"a/b.go": "package a\n\nfunc Hello() {}\n"})
	repo := create(t, ctx, h.svc, root, true)
	name := repo.GetName()
	regex := librarianv1.SearchMode_SEARCH_MODE_REGEX
	calls := map[string]func() error{
		"display name": func() error {
			_, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
				Repository: &librarianv1.Repository{Path: filepath.Join(root, "a"), DisplayName: "a\x00"}})
			return err
		},
		"regex query": func() error {
			_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "a\x00", Mode: regex})
			return err
		},
		"path glob": func() error {
			_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hello", PathGlob: "a\x00"})
			return err
		},
		"language": func() error {
			_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hello", Language: "go\x00"})
			return err
		},
		"symbol kind": func() error {
			_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hello", SymbolKind: "function\x00"})
			return err
		},
		"symbol": func() error {
			_, err := h.svc.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: name, Symbol: "Hello\x00"})
			return err
		},
		"file symbols kind": func() error {
			_, err := h.svc.GetFileSymbols(ctx, &librarianv1.GetFileSymbolsRequest{Repository: name, Path: "a/b.go", Kind: "function\x00"})
			return err
		},
		"dependents": func() error {
			_, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: name, Symbol: "Hello\x00"})
			return err
		},
		"similar symbols": func() error {
			_, err := h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: name, Symbol: "Hello\x00"})
			return err
		},
		"history": func() error {
			_, err := h.svc.GetHistory(ctx, &librarianv1.GetHistoryRequest{Repository: name, Symbol: "Hello\x00"})
			return err
		},
	}
	for what, call := range calls {
		err := call()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", what, err)
	}
}

func TestIndexFailures(t *testing.T) {
	t.Parallel()
	t.Run("directory removed", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, false)
		ctx := as(t, "t1")
		dir := filepath.Join(t.TempDir(), "repo")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte("package a\n"), 0o644))
		repo := create(t, ctx, h.svc, dir, true)
		require.NoError(t, os.RemoveAll(dir))

		_, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		got, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: repo.GetName()})
		require.NoError(t, err)
		require.Equal(t, librarianv1.IndexState_INDEX_STATE_FAILED, got.GetRepository().GetIndexState())
		require.Contains(t, got.GetRepository().GetIndexError(), "does not exist")
		// The previous index stays searchable.
		require.Equal(t, int64(1), got.GetRepository().GetFileCount())
		require.NotEmpty(t, search(t, ctx, h.svc, "package"))
	})
	t.Run("too many files", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, false, "-librarian.max-files", "2")
		ctx := as(t, "t1")
		root := writeFixture(t)
		_, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
			Repository: &librarianv1.Repository{Path: root}, Wait: true,
		})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		msg := status.Convert(err).Message()
		require.Contains(t, msg, "librarian.max-files")
		// A failed first index leaves the repository registered and FAILED.
		list, err := h.svc.ListRepositories(ctx, &librarianv1.ListRepositoriesRequest{})
		require.NoError(t, err)
		require.Len(t, list.GetRepositories(), 1)
		repo := list.GetRepositories()[0]
		require.Equal(t, librarianv1.IndexState_INDEX_STATE_FAILED, repo.GetIndexState())
		require.Contains(t, msg, repo.GetName()+" stays registered")

		_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
		got, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: repo.GetName()})
		require.NoError(t, err)
		require.Equal(t, librarianv1.IndexState_INDEX_STATE_FAILED, got.GetRepository().GetIndexState())
		require.Contains(t, got.GetRepository().GetIndexError(), "more than 2")
	})
}

// TestOverGRPC drives the service through a real gRPC server with the
// mesh's interceptors, identity travelling in metadata.
func TestOverGRPC(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	client := librarianv1.NewLibrarianServiceClient(testenv.ServeGRPC(t, h.svc.Register))

	_, err := client.ListRepositories(t.Context(), &librarianv1.ListRepositoriesRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	root := writeFixture(t)
	// Without allowed roots, no directory of the server is anybody's.
	none := librarianv1.NewLibrarianServiceClient(testenv.ServeGRPC(t,
		newHarness(t, false, "-librarian.allowed-roots", "", "-librarian.data-dir", t.TempDir()).svc.Register))
	cctx := identity.AppendOutgoing(t.Context(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleAdmin})
	for _, repo := range []*librarianv1.Repository{{Path: root}, {Url: "file://" + root}} {
		_, err = none.CreateRepository(cctx, &librarianv1.CreateRepositoryRequest{Repository: repo})
		testenv.RequireReason(t, err, codes.PermissionDenied, reasonPathNotAllowed, "registers no directories for your tenant")
	}
	// Within them, members choose directories too.
	cctx = identity.AppendOutgoing(t.Context(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember})
	created, err := client.CreateRepository(cctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Path: root, DisplayName: "fixture"}, Wait: true,
	})
	require.NoError(t, err)
	require.Equal(t, "fixture", created.GetRepository().GetDisplayName())
	resp, err := client.SearchCode(cctx, &librarianv1.SearchCodeRequest{Query: "parseHTTPRequest"})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetHits())
	require.Equal(t, "server/handler.go", resp.GetHits()[0].GetPath())
	_, err = client.CreateRepository(cctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Path: "rel"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

package librarian

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// gitRepo writes files into a fresh git work tree and commits them.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		writeFile(t, root, rel, content)
	}
	git(t, root, "init", "-q")
	commitAll(t, root, "initial")
	resolved, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	return resolved
}

func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.email=t@sylk.dev", "-c", "user.name=t"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

func commitAll(t *testing.T, dir, msg string) {
	t.Helper()
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", msg)
}

const shopGo = `package shop

import "strings"

// NormalizeSKU upper-cases a stock keeping unit code.
func NormalizeSKU(s string) string {
	return strings.ToUpper(trim(s))
}

func trim(s string) string { return strings.TrimSpace(s) }

// Cart holds items.
type Cart struct{ items []string }

// Add puts an item in the cart.
func (c *Cart) Add(s string) { c.items = append(c.items, NormalizeSKU(s)) }
`

func TestDeltaIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t, true, "-librarian.delta-max-files", "2")
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{
		"go.mod":        "module example.com/shop\n",
		"shop/shop.go":  shopGo,
		"shop/other.go": "package shop\n\n// Discount takes a share off.\nfunc Discount(p int) int { return p * 9 / 10 }\n",
		"README.md":     "# Shop\n\nSells things.\n",
		".gitignore":    "*.tmp\n",
		"notes.tmp":     "ignoredbygitignore\n",
	})
	events := indexNotices(t, h, topology.IndexProgressSubject(h.bus, "*"))

	repo := create(t, ctx, h.svc, root, true)
	require.NotEmpty(t, repo.GetLastCommit())
	require.Equal(t, int64(5), repo.GetFileCount(), "go.mod, shop.go, other.go, README.md, .gitignore; not the ignored notes.tmp")
	require.Empty(t, search(t, ctx, h.svc, "ignoredbygitignore"))
	require.Eventually(t, func() bool {
		for {
			select {
			case n := <-events:
				if p := n.GetProgress(); p.GetDone() {
					return p.GetFilesDone() == 5 && p.GetFilesTotal() == 5 && p.GetRepository() == repo.GetName() &&
						n.GetRepository() == repo.GetName() && n.GetTenantId() == "t1"
				}
			default:
				return false
			}
		}
	}, 5*time.Second, 10*time.Millisecond)

	ids := func() map[string]string {
		rows, err := h.svc.store.db.Query(ctx, `SELECT symbol, id FROM chunks WHERE path = 'shop/shop.go'`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var s, id string
			require.NoError(t, rows.Scan(&s, &id))
			out[s] = id
		}
		return out
	}
	before := ids()

	t.Run("unchanged", func(t *testing.T) {
		idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.NoError(t, err)
		require.True(t, idx.GetDelta())
		require.Zero(t, idx.GetFilesChanged())
		require.Zero(t, idx.GetChunksEmbedded())
	})
	t.Run("one function changed", func(t *testing.T) {
		writeFile(t, root, "shop/shop.go", strings.Replace(shopGo, "func trim(s string) string { return strings.TrimSpace(s) }",
			"func trim(s string) string {\n\treturn strings.TrimSpace(strings.Trim(s, \"-\"))\n}", 1))
		commitAll(t, root, "trim dashes")
		require.NoError(t, os.Remove(filepath.Join(root, "README.md")))
		idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.NoError(t, err)
		require.True(t, idx.GetDelta())
		require.Equal(t, int64(1), idx.GetFilesChanged())
		require.Equal(t, int64(1), idx.GetChunksEmbedded(), "only the changed function is embedded again")
		require.Equal(t, int64(4), idx.GetRepository().GetFileCount())
		require.Equal(t, before, ids(), "chunk ids are stable")
		hits := search(t, ctx, h.svc, "Shop Sells things")
		for _, hit := range hits {
			require.NotEqual(t, "README.md", hit.GetPath())
		}
	})
	t.Run("too many changes fall back to a full pass", func(t *testing.T) {
		for i := range 3 {
			writeFile(t, root, fmt.Sprintf("extra/e%d.go", i), fmt.Sprintf("package extra\n\nfunc Extra%d() {}\n", i))
		}
		commitAll(t, root, "extras")
		idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.NoError(t, err)
		require.False(t, idx.GetDelta())
		require.Equal(t, int64(3), idx.GetFilesChanged())
		require.Equal(t, "extra/e1.go", search(t, ctx, h.svc, "Extra1")[0].GetPath())
	})
	t.Run("a held lock blocks a second indexer", func(t *testing.T) {
		tx, err := h.svc.store.db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		var ok bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`,
			"librarian-index:t1:"+repo.GetId()).Scan(&ok))
		require.True(t, ok)
		_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Full: true, Wait: true})
		require.Equal(t, codes.Aborted, status.Code(err))
		require.Equal(t, reasonIndexRunning, apierr.Reason(err))
	})

	t.Run("symbols and edges", func(t *testing.T) {
		sym, err := h.svc.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: repo.GetName(),
			Symbol: "example.com/shop/shop.NormalizeSKU", IncludeSource: true})
		require.NoError(t, err)
		require.Equal(t, "function", sym.GetSymbol().GetKind())
		require.Equal(t, "shop/shop.go", sym.GetSymbol().GetPath())
		require.Equal(t, "func NormalizeSKU(s string) string", sym.GetSymbol().GetSignature())
		require.Equal(t, "NormalizeSKU upper-cases a stock keeping unit code.", sym.GetSymbol().GetDoc())
		require.True(t, strings.HasPrefix(sym.GetSymbol().GetSource(), "// NormalizeSKU"), sym.GetSymbol().GetSource())
		require.True(t, strings.HasSuffix(sym.GetSymbol().GetSource(), "}"))
		byName, err := h.svc.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: repo.GetName(), Symbol: "Discount"})
		require.NoError(t, err)
		require.Equal(t, "example.com/shop/shop.Discount", byName.GetSymbol().GetId())

		file, err := h.svc.GetFileSymbols(ctx, &librarianv1.GetFileSymbolsRequest{Repository: repo.GetName(), Path: "shop/shop.go"})
		require.NoError(t, err)
		var names []string
		for _, s := range file.GetSymbols() {
			names = append(names, s.GetKind()+" "+s.GetId())
		}
		require.Equal(t, []string{"function example.com/shop/shop.NormalizeSKU", "function example.com/shop/shop.trim",
			"type example.com/shop/shop.Cart", "method example.com/shop/shop.Cart.Add"}, names)
		for _, bad := range []string{"../../etc/passwd", "/etc/passwd", "shop/../shop/shop.go"} {
			_, err := h.svc.GetFileSymbols(ctx, &librarianv1.GetFileSymbolsRequest{Repository: repo.GetName(), Path: bad})
			require.Equal(t, codes.InvalidArgument, status.Code(err), bad)
		}

		deps, err := h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(),
			Symbol: "example.com/shop/shop.NormalizeSKU", EdgeKind: "calls"})
		require.NoError(t, err)
		var targets []string
		for _, e := range deps.GetEdges() {
			targets = append(targets, e.GetTarget())
		}
		require.ElementsMatch(t, []string{"strings.ToUpper", "example.com/shop/shop.trim"}, targets)

		users, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(),
			Symbol: "example.com/shop/shop.NormalizeSKU", EdgeKind: "calls"})
		require.NoError(t, err)
		require.Len(t, users.GetEdges(), 1)
		require.Equal(t, "example.com/shop/shop.Cart.Add", users.GetEdges()[0].GetSource())

		importers, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(),
			Symbol: "strings", EdgeKind: "imports"})
		require.NoError(t, err)
		require.Len(t, importers.GetEdges(), 1)
		require.Equal(t, "file:shop/shop.go", importers.GetEdges()[0].GetSource())

		_, err = h.svc.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: repo.GetName(), Symbol: "Nope"})
		require.Equal(t, codes.NotFound, status.Code(err))
		_, err = h.svc.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: repo.GetName()})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		_, err = h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: "x", EdgeKind: "bogus"})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		_, err = h.svc.GetSymbol(as(t, "other"), &librarianv1.GetSymbolRequest{Repository: repo.GetName(), Symbol: "Discount"})
		require.Equal(t, codes.NotFound, status.Code(err), "other tenants see nothing")
	})
}

func TestSearchModesAndFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := writeFixture(t)
	writeFile(t, root, "server/auth.go", "package server\n\n// checkToken validates a bearer credential.\nfunc checkToken(tok string) bool {\n\tapiKey := \"q7Zp2Lk9Xw4Rt8Vn3Bm6Hs1Jd5Fg0Ca\"\n\treturn tok == apiKey\n}\n")
	create(t, ctx, h.svc, root, true)
	run := func(req *librarianv1.SearchCodeRequest) *librarianv1.SearchCodeResponse {
		t.Helper()
		resp, err := h.svc.SearchCode(ctx, req)
		require.NoError(t, err)
		return resp
	}
	t.Run("semantic", func(t *testing.T) {
		resp := run(&librarianv1.SearchCodeRequest{Query: "exponential backoff jitter before the next retry", Mode: librarianv1.SearchMode_SEARCH_MODE_SEMANTIC})
		require.NotEmpty(t, resp.GetHits())
		require.Equal(t, "compute_backoff_delay", resp.GetHits()[0].GetSymbol())
		require.Equal(t, "ok", resp.GetStatus())
	})
	t.Run("lexical", func(t *testing.T) {
		resp := run(&librarianv1.SearchCodeRequest{Query: "frobnicator", Mode: librarianv1.SearchMode_SEARCH_MODE_LEXICAL})
		require.NotEmpty(t, resp.GetHits())
		require.Equal(t, "README.md", resp.GetHits()[0].GetPath())
	})
	t.Run("regex", func(t *testing.T) {
		resp := run(&librarianv1.SearchCodeRequest{Query: `def \w+_delay\(`, Mode: librarianv1.SearchMode_SEARCH_MODE_REGEX})
		require.Len(t, resp.GetHits(), 1)
		require.Equal(t, "retry/backoff.py", resp.GetHits()[0].GetPath())
		require.Contains(t, resp.GetHits()[0].GetSnippet(), "def compute_backoff_delay(attempt):")
		_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: `(`, Mode: librarianv1.SearchMode_SEARCH_MODE_REGEX})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
	})
	t.Run("filters", func(t *testing.T) {
		resp := run(&librarianv1.SearchCodeRequest{Query: "retry", Language: "go"})
		for _, hit := range resp.GetHits() {
			require.Equal(t, "go", hit.GetLanguage())
		}
		resp = run(&librarianv1.SearchCodeRequest{Query: "backoff retry", PathGlob: "retry/*.py", SymbolKind: "function"})
		require.NotEmpty(t, resp.GetHits())
		for _, hit := range resp.GetHits() {
			require.Equal(t, "retry/backoff.py", hit.GetPath())
			require.Equal(t, "function", hit.GetSymbolKind())
		}
		resp = run(&librarianv1.SearchCodeRequest{Query: "backoff", PathGlob: "server/**"})
		require.Equal(t, "no_matches", resp.GetStatus())
		require.Contains(t, resp.GetHint(), "Consider searching history or academic")
		require.Contains(t, resp.GetHint(), "filters")
	})
	t.Run("no matches", func(t *testing.T) {
		resp := run(&librarianv1.SearchCodeRequest{Query: "zzyzx quuxfoo"})
		require.Empty(t, resp.GetHits())
		require.Equal(t, "no_matches", resp.GetStatus())
		require.Equal(t, noMatchesHint, resp.GetHint())
	})
	t.Run("token budget", func(t *testing.T) {
		full := run(&librarianv1.SearchCodeRequest{Query: "server", PageSize: 20})
		require.Greater(t, len(full.GetHits()), 1)
		first := (len(full.GetHits()[0].GetSnippet()) + 3) / 4
		cut := run(&librarianv1.SearchCodeRequest{Query: "server", PageSize: 20, TokenBudget: int32(first)})
		require.Len(t, cut.GetHits(), 1)
		require.True(t, cut.GetTruncated())
		require.LessOrEqual(t, cut.GetTokens(), int32(first))
		_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "x", TokenBudget: -1})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
	})
	t.Run("secrets are redacted and sensitive files are stubs", func(t *testing.T) {
		resp := run(&librarianv1.SearchCodeRequest{Query: "checkToken"})
		require.NotEmpty(t, resp.GetHits())
		var content string
		require.NoError(t, h.svc.store.db.QueryRow(ctx, `SELECT string_agg(content, '') FROM chunks WHERE path = 'server/auth.go'`).Scan(&content))
		require.NotContains(t, content, "q7Zp2Lk9Xw4Rt8Vn3Bm6Hs1Jd5Fg0Ca")
		require.Contains(t, content, secrets.Redacted)
		var stub string
		require.NoError(t, h.svc.store.db.QueryRow(ctx, `SELECT content FROM chunks WHERE path = '.env'`).Scan(&stub))
		require.Equal(t, "# .env\n(contents not indexed for security)\n\nFile type: env", stub)
	})
}

func TestSearchCacheAndReplicas(t *testing.T) {
	t.Parallel()
	pool, schema := testenv.Postgres(t, "librarian", migrations.FS("librarian"))
	bus := testenv.NATS(t)
	rdb := testenv.Redis(t)
	newReplica := func() (*Service, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		svc, err := New(testConfig(t), app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Bus: bus, Redis: rdb, Registerer: reg})
		require.NoError(t, err)
		return svc, reg
	}
	a, regA := newReplica()
	b, _ := newReplica()
	ctx := as(t, "t1")
	defer testenv.Start(t, b.Run)()
	// Replica b follows change events once it has subscribed.
	require.Eventually(t, func() bool { return bus.Conn.NumSubscriptions() > 0 }, 5*time.Second, 10*time.Millisecond)

	root := gitRepo(t, map[string]string{"calc/calc.go": "package calc\n\n// Hypotenuse returns the length of the long side of a right triangle.\nfunc Hypotenuse(a, b float64) float64 { return a*a + b*b }\n"})
	repo := create(t, ctx, a, root, true)
	semantic := &librarianv1.SearchCodeRequest{Query: "length of the long side of a right triangle", Mode: librarianv1.SearchMode_SEARCH_MODE_SEMANTIC}
	resp, err := a.SearchCode(ctx, semantic)
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetHits())
	require.Equal(t, "Hypotenuse", resp.GetHits()[0].GetSymbol())
	require.Eventually(t, func() bool {
		resp, err := b.SearchCode(ctx, semantic)
		return err == nil && len(resp.GetHits()) > 0 && resp.GetHits()[0].GetSymbol() == "Hypotenuse"
	}, 10*time.Second, 20*time.Millisecond, "replica b loads the new vectors from the change event")

	first, err := a.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hypotenuse"})
	require.NoError(t, err)
	second, err := a.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hypotenuse"})
	require.NoError(t, err)
	require.Equal(t, first.GetHits()[0].GetSnippet(), second.GetHits()[0].GetSnippet())
	require.Equal(t, 1.0, testutil.ToFloat64(a.metrics.cache.WithLabelValues("hit")))

	// A reindex that changes the code bumps the generation: no stale answer.
	writeFile(t, root, "calc/calc.go", "package calc\n\n// Hypotenuse returns the long side.\nfunc Hypotenuse(a, b float64) float64 { return sqrt(a*a + b*b) }\n")
	commitAll(t, root, "fix")
	_, err = a.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	third, err := a.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hypotenuse"})
	require.NoError(t, err)
	require.Contains(t, third.GetHits()[0].GetSnippet(), "sqrt")
	require.Equal(t, 1.0, testutil.ToFloat64(a.metrics.cache.WithLabelValues("hit")))
	_ = regA
}

func TestDiscoverToolsCache(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"pyproject.toml": "[project]\nname = 'x'\n", "app/main.py": "print(1)\n"})
	repo := create(t, ctx, h.svc, root, false)
	first, err := h.svc.DiscoverTools(ctx, &librarianv1.DiscoverToolsRequest{Repository: repo.GetName()})
	require.NoError(t, err)
	require.False(t, first.GetCached())
	require.Equal(t, "unittest", first.GetTestFrameworks()[0].GetId())
	again, err := h.svc.DiscoverTools(ctx, &librarianv1.DiscoverToolsRequest{Repository: repo.GetName()})
	require.NoError(t, err)
	require.True(t, again.GetCached())
	refreshed, err := h.svc.DiscoverTools(ctx, &librarianv1.DiscoverToolsRequest{Repository: repo.GetName(), Refresh: true})
	require.NoError(t, err)
	require.False(t, refreshed.GetCached())

	// A configuration change invalidates the cached answer.
	writeFile(t, root, "pyproject.toml", "[project]\nname = 'x'\n[tool.pytest.ini_options]\n")
	changed, err := h.svc.DiscoverTools(ctx, &librarianv1.DiscoverToolsRequest{Repository: repo.GetName()})
	require.NoError(t, err)
	require.False(t, changed.GetCached())
	require.Equal(t, "pytest", changed.GetTestFrameworks()[0].GetId())

	_, err = h.svc.DiscoverTools(as(t, "other"), &librarianv1.DiscoverToolsRequest{Repository: repo.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err))
}

func TestRegisterByURL(t *testing.T) {
	t.Parallel()
	src := gitRepo(t, map[string]string{"lib/lib.go": "package lib\n\n// Greet says hello.\nfunc Greet() string { return \"hi\" }\n"})
	data := t.TempDir()
	h := newHarness(t, false, "-librarian.data-dir", data, "-librarian.allowed-roots", filepath.Dir(src))
	ctx := as(t, "t1")
	resp, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Url: "file://" + src}, Wait: true})
	require.NoError(t, err)
	repo := resp.GetRepository()
	require.Equal(t, "file://"+src, repo.GetUrl())
	require.True(t, strings.HasPrefix(repo.GetPath(), data) || strings.Contains(repo.GetPath(), filepath.Base(data)), repo.GetPath())
	require.Equal(t, filepath.Base(src), repo.GetDisplayName())
	require.Equal(t, "Greet", search(t, ctx, h.svc, "Greet")[0].GetSymbol())

	// A new commit upstream is fetched and indexed as a delta.
	writeFile(t, src, "lib/bye.go", "package lib\n\n// Farewell says goodbye.\nfunc Farewell() string { return \"bye\" }\n")
	commitAll(t, src, "bye")
	idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	require.True(t, idx.GetDelta())
	require.Equal(t, int64(1), idx.GetFilesChanged())
	require.Equal(t, "Farewell", search(t, ctx, h.svc, "Farewell")[0].GetSymbol())

	// The clone is a cache of the remote: gone (a data directory that did
	// not survive a restart), it is cloned again at the same place.
	require.NoError(t, os.RemoveAll(repo.GetPath()))
	writeFile(t, src, "lib/again.go", "package lib\n\n// Again greets once more.\nfunc Again() string { return \"again\" }\n")
	commitAll(t, src, "again")
	_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	require.DirExists(t, filepath.Join(repo.GetPath(), ".git"))
	require.Equal(t, "Again", search(t, ctx, h.svc, "Again")[0].GetSymbol())

	for _, bad := range []string{"ftp://x/y", "-oops", "https://"} {
		_, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: bad}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), bad)
	}
	_, err = h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: "file:///etc"}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a file URL outside the roots")
	_, err = h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: "file://" + src, Path: src}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	missing := filepath.Join(filepath.Dir(src), "missing")
	require.NoError(t, os.MkdirAll(missing, 0o755))
	_, err = h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: "file://" + missing}, Wait: true})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "not a git repository")

	noData := newHarness(t, false)
	_, err = noData.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: "file://" + src}})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
}

// A tenant reaches only its own clones in the data directory, whether or
// the allowed roots include the data directory: another tenant's clone,
// or the data directory itself, registered as a path would expose that
// tenant's code.
func TestClonesStayWithTheirTenant(t *testing.T) {
	t.Parallel()
	src := gitRepo(t, map[string]string{"lib/secret.go": "package lib\n\n// Confidential is tenant one's.\nfunc Confidential() {}\n"})
	for name, args := range map[string][]string{
		"roots around the data directory": nil,
		"roots apart from it":             {"-librarian.allowed-roots", filepath.Dir(src)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			h := newHarness(t, false, append([]string{"-librarian.data-dir", data}, args...)...)
			one, other := as(t, "t1"), as(t, "t2")
			resp, err := h.svc.CreateRepository(one, &librarianv1.CreateRepositoryRequest{
				Repository: &librarianv1.Repository{Url: "file://" + src}, Wait: true})
			require.NoError(t, err)
			clone := resp.GetRepository().GetPath()
			resolvedData, err := filepath.EvalSymlinks(data)
			require.NoError(t, err)
			for _, path := range []string{clone, filepath.Dir(clone), resolvedData, filepath.Join(clone, "lib")} {
				_, err := h.svc.CreateRepository(other, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Path: path}})
				require.Equal(t, codes.PermissionDenied, status.Code(err), path)
				require.Contains(t, status.Convert(err).Message(), "data directory")
				_, err = h.svc.CreateRepository(other, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: "file://" + path}})
				require.Equal(t, codes.PermissionDenied, status.Code(err), path)
			}
			require.Empty(t, search(t, other, h.svc, "Confidential"))
			// The data directory as a whole is nobody's repository.
			_, err = h.svc.CreateRepository(one, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Path: resolvedData}})
			require.Equal(t, codes.PermissionDenied, status.Code(err))
			// The clone itself stays indexable by its tenant.
			_, err = h.svc.IndexRepository(one, &librarianv1.IndexRepositoryRequest{Name: resp.GetRepository().GetName(), Wait: true})
			require.NoError(t, err)
		})
	}
}

func TestRegexTheIndexRejects(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	create(t, ctx, h.svc, gitRepo(t, map[string]string{"a.go": "package a\n"}), true)
	// Valid in Go, but not in the database's dialect.
	_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: `\Qa.b\E`, Mode: librarianv1.SearchMode_SEARCH_MODE_REGEX})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

// A path glob is bounded, and one that repeats its wildcards costs the
// database no more than one that says them once.
func TestPathGlobBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	create(t, ctx, h.svc, gitRepo(t, map[string]string{"a/b/c.go": "package b\n\n// Hello greets.\nfunc Hello() {}\n"}), true)
	for _, bad := range []string{strings.Repeat("a", maxPathLen+1), "a/\xff.go"} {
		_, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hello", PathGlob: bad})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := h.svc.SearchCode(c, &librarianv1.SearchCodeRequest{Query: "Hello", PathGlob: strings.Repeat("**/", 1300) + "*.go"})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetHits())
	require.Equal(t, "a/b/c.go", resp.GetHits()[0].GetPath())
}

// A member registers only remotes on public addresses (no password in the
// URL); an admin, or every member with librarian.members-private-remotes,
// may name an internal one. A remote that stops answering is given up on
// with the request, its git helpers and all.
func TestMembersCloneOnlyPublicRemotes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false, "-librarian.data-dir", t.TempDir())
	member := identity.NewContext(t.Context(), identity.Identity{TenantID: "t1", UserID: "m1", Role: identity.RoleMember})
	register := func(ctx context.Context, url string) error {
		_, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: url}, Wait: true})
		return err
	}
	for _, url := range []string{"http://127.0.0.1:1/x.git", "https://localhost/x.git", "git://10.1.2.3/x",
		"ssh://git@192.168.1.1/x", "http://169.254.169.254/latest", "https://[::1]/x", "http://100.64.0.1/x"} {
		err := register(member, url)
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", url, err)
		require.ErrorContains(t, err, "only admins")
	}
	require.Equal(t, codes.InvalidArgument, status.Code(register(member, "https://u:secret@10.1.2.3/x.git")))

	// An admin may: the clone then fails on its own (nothing listens).
	err := register(as(t, "t1"), "http://127.0.0.1:1/x.git")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)

	// A member's remote whose name resolves to an internal address by the
	// time of a later fetch is not fetched.
	var rebound repository
	require.NoError(t, pgx.BeginFunc(t.Context(), h.svc.store.db, func(tx pgx.Tx) error {
		rebound, err = insertRepo(t.Context(), tx, "t1", repository{ID: ids.New(), DisplayName: "rebound",
			Path: filepath.Join(t.TempDir(), "clone"), URL: "http://127.0.0.1:1/x.git", PublicRemote: true})
		return err
	}))
	_, err = h.svc.IndexRepository(member, &librarianv1.IndexRepositoryRequest{Name: "repositories/" + rebound.ID, Wait: true})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "address of the librarian's own networks")

	// A remote that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	// The clone runs in the registration's operation, which no request
	// bounds: a cancel gives up on it.
	ctx := as(t, "t1")
	url := "http://" + ln.Addr().String() + "/x.git"
	resp, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Url: url}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		out, _ := exec.Command("pgrep", "-f", ln.Addr().String()).Output()
		return len(strings.TrimSpace(string(out))) > 0
	}, 30*time.Second, 20*time.Millisecond, "git clones")
	_, err = h.svc.CancelOperation(ctx, &librarianv1.CancelOperationRequest{Name: resp.GetOperation()})
	require.NoError(t, err)
	op := waitOperation(t, h.svc, ctx, resp.GetOperation())
	require.EqualValues(t, codes.Canceled, op.GetError().GetCode())
	got, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: resp.GetRepository().GetName()})
	require.NoError(t, err)
	require.Contains(t, got.GetRepository().GetIndexError(), "cancelled on request")
	require.Eventually(t, func() bool {
		out, _ := exec.Command("pgrep", "-f", ln.Addr().String()).Output()
		return len(strings.TrimSpace(string(out))) == 0
	}, 30*time.Second, 20*time.Millisecond, "git helpers left running")
}

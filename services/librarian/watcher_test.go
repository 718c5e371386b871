package librarian

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// findsSymbol reports whether a lexical search for name has a hit defining
// it in path.
func findsSymbol(t *testing.T, ctx context.Context, svc *Service, name, path string) bool {
	t.Helper()
	resp, err := svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: name, Mode: librarianv1.SearchMode_SEARCH_MODE_LEXICAL})
	require.NoError(t, err)
	for _, h := range resp.GetHits() {
		if h.GetPath() == path && h.GetSymbol() == name {
			return true
		}
	}
	return false
}

func indexedPaths(t *testing.T, ctx context.Context, svc *Service, repoID string) map[string]bool {
	t.Helper()
	rows, err := svc.store.db.Query(ctx, `SELECT path FROM files WHERE tenant_id = 't1' AND repository_id = $1`, uuidParam(repoID))
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		out[p] = true
	}
	require.NoError(t, rows.Err())
	return out
}

// chunkSymbol is the symbol of the first chunk of a file.
func chunkSymbol(t *testing.T, svc *Service, path string) string {
	t.Helper()
	var sym string
	require.NoError(t, svc.store.db.QueryRow(t.Context(), `SELECT symbol FROM chunks WHERE tenant_id = 't1' AND path = $1 ORDER BY line_start LIMIT 1`, path).Scan(&sym))
	return sym
}

func TestWatcherIndexesChanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, true, "-librarian.watch=true", "-librarian.watch.debounce=20ms")
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{
		"shop/shop.go": shopGo,
		".gitignore":   "*.log\nbuild/\n",
	})
	// A change made after the index but before the watch began is caught up
	// through git when the watch starts.
	repo := create(t, ctx, h.svc, root, true)
	writeFile(t, root, "shop/early.go", "package shop\n\n// EarlyBird was written before the watch.\nfunc EarlyBird() {}\n")

	events := indexNotices(t, h, topology.IndexProgressSubject(h.bus, repo.GetId()))

	stop := testenv.Start(t, h.svc.Run)
	require.Eventually(t, func() bool { return h.svc.watching.Load() == 1 }, 10*time.Second, 10*time.Millisecond)

	poll := func(msg string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 20*time.Second, 20*time.Millisecond, msg)
	}
	poll("caught up", func() bool { return findsSymbol(t, ctx, h.svc, "EarlyBird", "shop/early.go") })

	t.Run("new file", func(t *testing.T) {
		writeFile(t, root, "shop/discount.go", "package shop\n\n// ApplyDiscount takes a percentage off a price.\nfunc ApplyDiscount(p, pct float64) float64 { return p * (1 - pct/100) }\n")
		poll("new symbol found", func() bool { return findsSymbol(t, ctx, h.svc, "ApplyDiscount", "shop/discount.go") })
		select {
		case n := <-events:
			require.Equal(t, "repositories/"+repo.GetId(), n.GetProgress().GetRepository())
		case <-time.After(10 * time.Second):
			t.Fatal("no progress event for a watched change")
		}
	})
	t.Run("changed file", func(t *testing.T) {
		writeFile(t, root, "shop/discount.go", "package shop\n\n// ApplyCoupon takes a fixed amount off a price.\nfunc ApplyCoupon(p, amount float64) float64 { return p - amount }\n")
		poll("renamed symbol found", func() bool { return findsSymbol(t, ctx, h.svc, "ApplyCoupon", "shop/discount.go") })
		require.False(t, findsSymbol(t, ctx, h.svc, "ApplyDiscount", "shop/discount.go"))
	})
	t.Run("new directory", func(t *testing.T) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, "tax", "eu"), 0o755))
		writeFile(t, root, "tax/eu/vat.go", "package eu\n\n// VATRate is the standard rate.\nfunc VATRate() float64 { return 0.2 }\n")
		poll("file in a new directory found", func() bool { return findsSymbol(t, ctx, h.svc, "VATRate", "tax/eu/vat.go") })
		// The new directory is watched too.
		writeFile(t, root, "tax/eu/reduced.go", "package eu\n\n// ReducedVATRate is the reduced rate.\nfunc ReducedVATRate() float64 { return 0.05 }\n")
		poll("later file in the new directory found", func() bool { return findsSymbol(t, ctx, h.svc, "ReducedVATRate", "tax/eu/reduced.go") })
	})
	t.Run("ignored files stay out", func(t *testing.T) {
		writeFile(t, root, "debug.log", "IgnoredMarker\n")
		writeFile(t, root, "build/out.go", "package build\n\nfunc IgnoredMarker() {}\n")
		writeFile(t, root, "node_modules/x/index.js", "function IgnoredMarker() {}\n")
		writeFile(t, root, "shop/marker.go", "package shop\n\n// AfterIgnored is written after the ignored files.\nfunc AfterIgnored() {}\n")
		poll("marker found", func() bool { return findsSymbol(t, ctx, h.svc, "AfterIgnored", "shop/marker.go") })
		paths := indexedPaths(t, ctx, h.svc, repo.GetId())
		require.False(t, paths["debug.log"])
		require.False(t, paths["build/out.go"])
		require.False(t, paths["node_modules/x/index.js"])
	})
	t.Run("removed file and directory", func(t *testing.T) {
		require.NoError(t, os.Remove(filepath.Join(root, "shop", "marker.go")))
		require.NoError(t, os.RemoveAll(filepath.Join(root, "tax")))
		poll("removed files leave the index", func() bool {
			paths := indexedPaths(t, ctx, h.svc, repo.GetId())
			return !paths["shop/marker.go"] && !paths["tax/eu/vat.go"] && !paths["tax/eu/reduced.go"]
		})
		require.True(t, indexedPaths(t, ctx, h.svc, repo.GetId())["shop/shop.go"])
	})
	t.Run("renamed directory", func(t *testing.T) {
		writeFile(t, root, "old/x.go", "package old\n\n// MovedFunc moves with its directory.\nfunc MovedFunc() {}\n")
		poll("file found", func() bool { return findsSymbol(t, ctx, h.svc, "MovedFunc", "old/x.go") })
		require.NoError(t, os.Rename(filepath.Join(root, "old"), filepath.Join(root, "moved")))
		poll("file found under the new name", func() bool { return findsSymbol(t, ctx, h.svc, "MovedFunc", "moved/x.go") })
		require.False(t, indexedPaths(t, ctx, h.svc, repo.GetId())["old/x.go"])
		writeFile(t, root, "moved/y.go", "package old\n\n// AfterMove is written after the rename.\nfunc AfterMove() {}\n")
		poll("new file under the new name found", func() bool { return findsSymbol(t, ctx, h.svc, "AfterMove", "moved/y.go") })
	})
	require.Positive(t, testutil.ToFloat64(h.svc.metrics.watchIndexes))

	// With the watcher stopped: indexing a file whose content is unchanged
	// changes nothing.
	stop()
	// A watched run stopped with the watcher may have left chunks for the
	// semantic phase (full-text search found them already): a first run
	// embeds them.
	require.NoError(t, h.svc.indexChanges(ctx, "t1", repo.GetId(), root, []string{"shop/shop.go"}, false, false))
	r, err := h.svc.store.getRepo(ctx, "t1", repo.GetId())
	require.NoError(t, err)
	require.NoError(t, h.svc.indexChanges(ctx, "t1", repo.GetId(), root, []string{"shop/shop.go"}, false, false))
	again, err := h.svc.store.getRepo(ctx, "t1", repo.GetId())
	require.NoError(t, err)
	require.Equal(t, r.Generation, again.Generation, "an unchanged file does not bump the generation")
	require.Equal(t, r.LastCommit, again.LastCommit, "a watched change keeps the last indexed commit")
}

// TestIndexPaths checks the watcher's index run: only the given paths are
// re-read, the last indexed commit is kept, and a batch larger than
// librarian.delta-max-files becomes a full pass.
func TestIndexPaths(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false, "-librarian.delta-max-files", "2")
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"shop/shop.go": shopGo, "a.py": "def a():\n    pass\n", "b.py": "def b():\n    pass\n"})
	repo := create(t, ctx, h.svc, root, true)
	r, err := h.svc.store.getRepo(ctx, "t1", repo.GetId())
	require.NoError(t, err)
	require.NotEmpty(t, r.LastCommit)

	writeFile(t, root, "a.py", "def alpha_changed():\n    pass\n")
	writeFile(t, root, "b.py", "def beta_changed():\n    pass\n")
	require.NoError(t, os.Remove(filepath.Join(root, "shop", "shop.go")))
	res, err := h.svc.runIndexWith(ctx, "t1", r, root, indexOptions{paths: []string{"a.py", "shop/shop.go"}})
	require.NoError(t, err)
	require.True(t, res.delta)
	require.Equal(t, int64(1), res.filesChanged, "only a.py is re-read; b.py was not named")
	require.Equal(t, int64(1), res.filesDeleted)
	require.Equal(t, r.LastCommit, res.repo.LastCommit)
	paths := indexedPaths(t, ctx, h.svc, repo.GetId())
	require.Equal(t, map[string]bool{"a.py": true, "b.py": true}, paths)
	require.Equal(t, "alpha_changed", chunkSymbol(t, h.svc, "a.py"))
	require.Equal(t, "b", chunkSymbol(t, h.svc, "b.py"))

	res, err = h.svc.runIndexWith(ctx, "t1", res.repo, root, indexOptions{paths: []string{"a.py", "b.py", "c.py"}})
	require.NoError(t, err)
	require.False(t, res.delta, "more changes than librarian.delta-max-files make a full pass")
	require.Equal(t, int64(1), res.filesChanged)
	require.Equal(t, "beta_changed", chunkSymbol(t, h.svc, "b.py"))
}

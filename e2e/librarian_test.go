package e2e

import (
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// librarianRepo is a small git repository with Go and Python code.
func librarianRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	write("go.mod", "module example.com/ledger\n")
	write("ledger/ledger.go", `package ledger

import "fmt"

// Balance sums the posted amounts of an account, in cents.
func Balance(amounts []int64) int64 {
	var total int64
	for _, a := range amounts {
		total += a
	}
	return total
}

// Report formats an account's balance for a statement.
func Report(name string, amounts []int64) string {
	return fmt.Sprintf("%s: %d", name, Balance(amounts))
}
`)
	write("tools/retry.py", `import random


def backoff_delay(attempt):
    """Exponential backoff with jitter before the next retry."""
    return 2 ** attempt + random.random()
`)
	write(".env", "DATABASE_PASSWORD=hunter2hunter2\n")
	gitCmd(t, dir, "init", "-q")
	gitCmd(t, dir, "add", "-A")
	gitCmd(t, dir, "commit", "-q", "-m", "initial")
	resolved, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	return resolved
}

func gitCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.email=e2e@sylk.dev", "-c", "user.name=e2e"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

func firstHit(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	hits, ok := resp["hits"].([]any)
	require.True(t, ok && len(hits) > 0, "no hits: %v", resp)
	return hits[0].(map[string]any)
}

func TestLibrarianEndToEnd(t *testing.T) {
	c := startMesh(t)
	dir := librarianRepo(t)
	// With wait, registering answers once the index is done.
	repo := c.ok("POST", "/v1/repositories?wait=true", map[string]any{"path": dir})["repository"].(map[string]any)
	require.Equal(t, "INDEX_STATE_READY", repo["indexState"])
	require.NotEmpty(t, repo["lastCommit"])
	name := repo["name"].(string)

	t.Run("K-01 modes and K-02 hit schema", func(t *testing.T) {
		hit := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "Balance"}))
		require.Equal(t, "ledger/ledger.go", hit["path"])
		require.Equal(t, "Balance", hit["symbol"])
		require.Equal(t, "function", hit["symbolKind"])
		require.Equal(t, "go", hit["language"])
		require.EqualValues(t, 5, hit["lineStart"])
		require.EqualValues(t, 12, hit["lineEnd"])
		require.Contains(t, hit["snippet"], "func Balance(")
		require.Greater(t, hit["score"].(float64), 1.0)

		sem := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "exponential backoff jitter before the next retry", "mode": "SEARCH_MODE_SEMANTIC"}))
		require.Equal(t, "backoff_delay", sem["symbol"])
		lex := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "statement balance", "mode": "SEARCH_MODE_LEXICAL"}))
		require.Equal(t, "Report", lex["symbol"])
		re := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": `total \+= a`, "mode": "SEARCH_MODE_REGEX"}))
		require.Equal(t, "ledger/ledger.go", re["path"])
		require.Contains(t, re["snippet"], "total += a")
	})
	t.Run("filters, token budget and no_matches", func(t *testing.T) {
		py := c.ok("POST", "/v1/code:search", map[string]any{"query": "retry backoff balance", "language": "python"})
		for _, h := range py["hits"].([]any) {
			require.Equal(t, "python", h.(map[string]any)["language"])
		}
		glob := c.ok("POST", "/v1/code:search", map[string]any{"query": "Balance", "pathGlob": "tools/**"})
		require.Equal(t, "no_matches", glob["status"])
		budget := c.ok("POST", "/v1/code:search", map[string]any{"query": "balance amounts account", "tokenBudget": 5})
		require.Empty(t, budget["hits"])
		require.Equal(t, true, budget["truncated"])
		none := c.ok("POST", "/v1/code:search", map[string]any{"query": "zzyzx quuxfoo"})
		require.Equal(t, "no_matches", none["status"])
		require.Contains(t, none["hint"], "Consider searching history or academic")
	})
	t.Run("K-16 bad input", func(t *testing.T) {
		for _, body := range []map[string]any{
			{"query": ""},
			{"query": "(", "mode": "SEARCH_MODE_REGEX"},
			{"query": "x", "tokenBudget": -1},
			{"query": "x", "pageSize": -1},
		} {
			r := c.do("POST", "/v1/code:search", body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", body, r.Raw)
		}
	})
	t.Run("sensitive files are stubs", func(t *testing.T) {
		r := c.ok("POST", "/v1/code:search", map[string]any{"query": "hunter2hunter2"})
		require.Equal(t, "no_matches", r["status"])
		stub := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "contents not indexed for security"}))
		require.Equal(t, ".env", stub["path"])
	})
	t.Run("G-16 symbols and edges", func(t *testing.T) {
		sym := c.ok("GET", "/v1/"+name+"/symbol?symbol=example.com/ledger/ledger.Balance&includeSource=true", nil)["symbol"].(map[string]any)
		require.Equal(t, "func Balance(amounts []int64) int64", sym["signature"])
		require.True(t, strings.HasPrefix(sym["source"].(string), "// Balance sums"))
		file := c.ok("GET", "/v1/"+name+"/fileSymbols?path=ledger/ledger.go", nil)["symbols"].([]any)
		require.Len(t, file, 2)
		deps := c.ok("GET", "/v1/"+name+"/dependencies?symbol=example.com/ledger/ledger.Report&edgeKind=calls", nil)["edges"].([]any)
		var targets []string
		for _, e := range deps {
			targets = append(targets, e.(map[string]any)["target"].(string))
		}
		require.ElementsMatch(t, []string{"fmt.Sprintf", "example.com/ledger/ledger.Balance"}, targets)
		users := c.ok("GET", "/v1/"+name+"/dependents?symbol="+url.QueryEscape("example.com/ledger/ledger.Balance")+"&edgeKind=calls", nil)["edges"].([]any)
		require.Len(t, users, 1)
		require.Equal(t, "example.com/ledger/ledger.Report", users[0].(map[string]any)["source"])
		// Unfiltered, the file that defines it is a dependent too (G-01 DefinedIn).
		all := c.ok("GET", "/v1/"+name+"/dependents?symbol="+url.QueryEscape("example.com/ledger/ledger.Balance"), nil)["edges"].([]any)
		var kinds []string
		for _, e := range all {
			kinds = append(kinds, e.(map[string]any)["kind"].(string))
		}
		require.ElementsMatch(t, []string{"calls", "defines"}, kinds)
		r := c.do("GET", "/v1/"+name+"/symbol?symbol=Nope", nil)
		require.Equal(t, http.StatusNotFound, r.Status)
	})
	t.Run("G-16 edges beyond Go", func(t *testing.T) {
		deps := c.ok("GET", "/v1/"+name+"/dependencies?symbol="+url.QueryEscape("file:tools/retry.py")+"&edgeKind=imports", nil)["edges"].([]any)
		require.Len(t, deps, 1)
		require.Equal(t, "random", deps[0].(map[string]any)["target"])
		sym := c.ok("GET", "/v1/"+name+"/symbol?symbol=tools.retry.backoff_delay", nil)["symbol"].(map[string]any)
		require.Equal(t, "function", sym["kind"])
		require.Equal(t, "Exponential backoff with jitter before the next retry.", sym["doc"])
	})
	t.Run("G-16 find similar symbols", func(t *testing.T) {
		sim := c.ok("GET", "/v1/"+name+"/similarSymbols?symbol="+url.QueryEscape("example.com/ledger/ledger.Balance")+"&pageSize=3", nil)
		require.Equal(t, "Balance", sim["source"].(map[string]any)["symbol"])
		for _, s := range sim["symbols"].([]any) {
			require.NotEqual(t, "Balance", s.(map[string]any)["symbol"])
		}
		r := c.do("GET", "/v1/"+name+"/similarSymbols?symbol=Nope", nil)
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
	})
	t.Run("history for code", func(t *testing.T) {
		h := c.ok("GET", "/v1/"+name+"/history?symbol="+url.QueryEscape("example.com/ledger/ledger.Balance"), nil)
		require.Equal(t, "ledger/ledger.go", h["path"])
		require.EqualValues(t, 5, h["lineStart"])
		commits := h["commits"].([]any)
		require.Len(t, commits, 1)
		require.Equal(t, "initial", commits[0].(map[string]any)["subject"])
		require.Equal(t, "e2e", commits[0].(map[string]any)["author"])
		r := c.do("GET", "/v1/"+name+"/history?path="+url.QueryEscape("../etc/passwd"), nil)
		require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	})
	t.Run("E-19 tool discovery", func(t *testing.T) {
		tools := c.ok("GET", "/v1/"+name+"/tools", nil)
		ids := map[string]bool{}
		for _, list := range []string{"formatters", "linters", "languageServers", "testFrameworks"} {
			for _, tool := range tools[list].([]any) {
				ids[tool.(map[string]any)["id"].(string)] = true
			}
		}
		for _, want := range []string{"goimports", "go-vet", "gopls", "go-test", "black", "pyright", "unittest"} {
			require.True(t, ids[want], "%s in %v", want, ids)
		}
		again := c.ok("GET", "/v1/"+name+"/tools", nil)
		require.Equal(t, true, again["cached"])
	})
	t.Run("F-25 file watcher", func(t *testing.T) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ledger", "audit.go"),
			[]byte("package ledger\n\n// AuditTrail lists the postings of an account.\nfunc AuditTrail() []int64 { return nil }\n"), 0o644))
		require.Eventually(t, func() bool {
			r := c.ok("POST", "/v1/code:search", map[string]any{"query": "AuditTrail", "mode": "SEARCH_MODE_LEXICAL"})
			hits, _ := r["hits"].([]any)
			return len(hits) > 0 && hits[0].(map[string]any)["path"] == "ledger/audit.go"
		}, 30*time.Second, 50*time.Millisecond, "the watcher indexes a new file")
	})
	t.Run("K-05 delta reindex and F-24 fresh answers", func(t *testing.T) {
		before := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "Balance"}))
		p := filepath.Join(dir, "ledger", "ledger.go")
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(src), "total += a", "total += a // posted", 1)), 0o644))
		gitCmd(t, dir, "commit", "-q", "-am", "annotate")
		// The watcher re-indexes the file; the cached answer is not served.
		require.Eventually(t, func() bool {
			after := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "Balance"}))
			return strings.Contains(after["snippet"].(string), "// posted")
		}, 30*time.Second, 50*time.Millisecond)
		require.NotEqual(t, before["snippet"], firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "Balance"}))["snippet"])
		// An explicit index is a delta from the last indexed commit that
		// finds nothing left to rewrite (counts with real rewrites are
		// covered by the service's tests, which run without the watcher).
		var idx map[string]any
		require.Eventually(t, func() bool {
			r := c.do("POST", "/v1/"+name+":index", map[string]any{"wait": true})
			if r.Status != http.StatusOK {
				return false // the watcher's run holds the lock
			}
			idx = r.Body
			return true
		}, 30*time.Second, 50*time.Millisecond)
		require.Equal(t, true, idx["delta"])
		require.Contains(t, []any{nil, "0"}, idx["filesChanged"], "no file left to rewrite: %v", idx)
	})
}

package librarian

import (
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

func TestLexStem(t *testing.T) {
	t.Parallel()
	for _, group := range [][]string{
		{"parse", "parses", "parsed", "parsing"},
		{"config", "configs", "configure", "configured", "configures", "configuring", "configuration", "configurations"},
		{"cache", "caches", "cached", "caching"},
		{"entry", "entries"},
		{"conn", "connection", "connections"},
		{"class", "classes"},
	} {
		for _, w := range group[1:] {
			require.Equal(t, lexStem(group[0]), lexStem(w), "%s and %s", group[0], w)
		}
	}
	for _, w := range []string{"uint8", "sha256", "is", "use", "status", "bus", "string_"} {
		require.Equal(t, w, lexStem(w), "%s is kept", w)
	}
	require.NotEqual(t, lexStem("pool"), lexStem("poll"))
	require.Equal(t, "parse pars http request req parsehttprequest", tokenText("parseHTTPRequest"),
		"identifier parts carry their stems")
	require.Equal(t, "(configured | config) & pool", groupQuery(termGroups([]string{"configured", "pool"}), true))
}

func TestIsAncillaryPath(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"pool.go": false, "pool_test.go": true, "pkg/testdata/x.go": true, "examples/chat/main.go": true,
		"vendor/x/y.go": true, "src/test_pool.py": true, "web/app.spec.ts": true, "src/PoolTest.java": true,
		"latest.go": false, "contest/x.go": false, "internal/testing.go": false,
	} {
		require.Equal(t, want, isAncillaryPath(p), p)
	}
	require.True(t, parseQuery("tests for the pool").aboutTests())
	require.True(t, parseQuery("TestPoolAcquire").aboutTests())
	require.False(t, parseQuery("where is the pool configured").aboutTests())
}

// cand is a fusion input.
func cand(id, path string, content string, match matchKind, score float64, names ...string) candidate {
	return candidate{repoID: "r", id: id, path: path, content: content, match: match, score: score, names: names}
}

func pathsOf(cs []candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.path
	}
	return out
}

func TestFuseOrdering(t *testing.T) {
	t.Parallel()
	s := &Service{}
	long := "type Config struct { MaxConns int32; MinConns int32; HealthCheckPeriod time.Duration; MaxConnLifetime time.Duration; ConnConfig *ConnConfig; BeforeAcquire func() bool }"
	pq := parseQuery("where is the connection pool configured?")

	// A strong lexical first hit (it alone holds every term) stays first
	// although another chunk is second in both lists.
	lex := []candidate{
		cand("z", "pool.go", long, matchAll, 0.9),
		cand("a", "conn.go", long, matchSome, 0.2),
	}
	sem := []candidate{cand("b", "other.go", long, matchNone, 0.8), cand("a", "conn.go", long, matchNone, 0.7)}
	require.Equal(t, []string{"pool.go", "conn.go", "other.go"}, pathsOf(s.fuse(pq, lex, sem)))

	// A very short chunk first in the semantic list cannot pass a
	// definition first in the lexical one.
	lex = []candidate{cand("z", "pool.go", long, matchSome, 0.5), cand("y", "x.go", long, matchSome, 0.4)}
	sem = []candidate{cand("a", "uint.go", "_uint8 uint8", matchNone, 0.9), cand("y", "x.go", long, matchNone, 0.5)}
	got := pathsOf(s.fuse(pq, lex, sem))
	require.Less(t, indexOf(got, "pool.go"), indexOf(got, "uint.go"), got)

	// Equal scores: the better lexical rank wins, never the chunk id.
	tie := s.fuse(pq, []candidate{cand("z", "b.go", long, matchSome, 0.5), cand("a", "a.go", long, matchSome, 0.5)}, nil)
	require.Equal(t, []string{"b.go", "a.go"}, pathsOf(tie), "lexical order kept on equal scores")
	tie = s.fuse(pq, []candidate{cand("z", "b.go", long, matchSome, 0.5)}, []candidate{cand("a", "a.go", long, matchNone, 0.5)})
	require.Equal(t, []string{"b.go", "a.go"}, pathsOf(tie), "the lexical list weighs more")

	// Test files rank below the code they exercise, unless the query is
	// about tests.
	lex = []candidate{cand("a", "pool_test.go", long, matchAll, 0.9), cand("b", "pool.go", long, matchAll, 0.3)}
	require.Equal(t, []string{"pool.go", "pool_test.go"}, pathsOf(s.fuse(pq, lex, nil)))
	require.Equal(t, []string{"pool_test.go", "pool.go"}, pathsOf(s.fuse(parseQuery("tests of the connection pool"), lex, nil)))
}

// End to end over a real index: stemming lets "configured" find Config,
// and the test file that uses it ranks below it.
func TestRankingSearch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{
		"pool/pool.go":      "package pool\n\n// Config holds the settings of a pool of database connections.\ntype Config struct {\n\tMaxConns int\n\tIdleTimeout int\n}\n",
		"pool/pool_test.go": "package pool\n\nimport \"testing\"\n\nfunc TestPoolConfig(t *testing.T) {\n\t// the pool is configured with two connections\n\tc := Config{MaxConns: 2}\n\t_ = c\n\t_ = c\n}\n",
		"wire/parse.go":     "package wire\n\n// ParseMessage reads one frame.\nfunc ParseMessage(b []byte) int { return len(b) }\n",
	})
	create(t, ctx, h.svc, root, true)
	h.svc.WaitVectors()
	for _, mode := range []librarianv1.SearchMode{librarianv1.SearchMode_SEARCH_MODE_LEXICAL, librarianv1.SearchMode_SEARCH_MODE_HYBRID} {
		resp, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "where is the connection pool configured?", Mode: mode})
		require.NoError(t, err)
		require.NotEmpty(t, resp.GetHits(), mode.String())
		require.Equal(t, "pool/pool.go", resp.GetHits()[0].GetPath(), mode.String())

		resp, err = h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "which function parses messages", Mode: mode})
		require.NoError(t, err)
		require.NotEmpty(t, resp.GetHits(), mode.String())
		require.Equal(t, "wire/parse.go", resp.GetHits()[0].GetPath(), "parses matches Parse: %s", mode)

		resp, err = h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "tests of the pool config", Mode: mode})
		require.NoError(t, err)
		require.Equal(t, "pool/pool_test.go", resp.GetHits()[0].GetPath(), "a question about tests: %s", mode)
	}
}

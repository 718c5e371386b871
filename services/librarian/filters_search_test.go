package librarian

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

func TestTermFilters(t *testing.T) {
	t.Parallel()
	f := newTermFilters()
	require.Equal(t, verdictUnknown, f.probe("t1", "r1", []string{"anything"}), "no filter yet")
	var vocab []string
	for i := range 5000 {
		vocab = append(vocab, fmt.Sprintf("word%dx", i))
	}
	vocab = append(vocab, "net/http", "connections", "1.5")
	require.NoError(t, f.set("t1", "r1", vocab))
	for _, w := range vocab {
		require.Equal(t, verdictAll, f.probe("t1", "r1", []string{w}), "a filter never misses a member: %s", w)
	}
	// Parts and stems of members are members.
	require.Equal(t, verdictAll, f.probe("t1", "r1", []string{"http", "connection", "1"}))
	// A filter's false positive (about 0.4% per key) could make one absent
	// word look present; three cannot all do so but once in ten million.
	require.Equal(t, verdictSome, f.probe("t1", "r1", []string{"word7x", "absentquux", "missingzork", "nowherexyzzy"}))
	falsePositives := 0
	for i := range 2000 {
		if f.probe("t1", "r1", []string{fmt.Sprintf("absent%dq", i)}) != verdictNone {
			falsePositives++
		}
	}
	require.Less(t, falsePositives, 60, "about 0.4%% false positives per key")
	require.Equal(t, verdictUnknown, f.probe("t2", "r1", []string{"word1x"}), "filters are per tenant")

	// Changed chunks' terms are pending until the next rebuild.
	require.False(t, f.addPending("t1", "r1", []string{"zebraquux"}))
	require.Equal(t, verdictAll, f.probe("t1", "r1", []string{"zebraquux"}))
	f.markStale("t1", "r1")
	require.Equal(t, verdictUnknown, f.probe("t1", "r1", []string{"absentzz"}), "a stale filter rules nothing out")
	require.True(t, f.addPending("t1", "r1", []string{"x"}), "a stale filter asks for a rebuild")
	require.NoError(t, f.set("t1", "r1", nil))
	require.Equal(t, verdictNone, f.probe("t1", "r1", []string{"word1x"}), "an empty repository holds nothing")
	f.drop("t1", "r1")
	require.Equal(t, verdictUnknown, f.probe("t1", "r1", []string{"word1x"}))
}

func TestNoMatchesAndAlsoExistsIn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	rootA := gitRepo(t, map[string]string{"widget/widget.go": "package widget\n\n// FrobnicateWidget turns the widget's gears.\nfunc FrobnicateWidget() int { return 1 }\n"})
	rootB := gitRepo(t, map[string]string{"sprocket/sprocket.go": "package sprocket\n\n// CalibrateSprocket aligns the sprocket teeth.\nfunc CalibrateSprocket() int { return 2 }\n"})
	a := create(t, ctx, h.svc, rootA, true)
	b := create(t, ctx, h.svc, rootB, true)
	other := as(t, "t2")
	create(t, other, h.svc, gitRepo(t, map[string]string{"x/x.go": "package x\n\nfunc OnlyInOtherTenant() {}\n"}), true)
	// Until a repository's filter is built it rules nothing out; wait for
	// the builds the indexes started.
	h.svc.WaitVectors()

	for _, mode := range []librarianv1.SearchMode{librarianv1.SearchMode_SEARCH_MODE_LEXICAL, librarianv1.SearchMode_SEARCH_MODE_HYBRID, librarianv1.SearchMode_SEARCH_MODE_SEMANTIC} {
		// No repository can hold the words: nothing is searched.
		require.Empty(t, h.svc.filterRepos("t1", []string{repoIDOf(a), repoIDOf(b)}, parseQuery("zyxwvut qqqplugh"), mode), mode.String())
		resp, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "zyxwvut qqqplugh", Mode: mode})
		require.NoError(t, err)
		require.Equal(t, "no_matches", resp.GetStatus())
		require.Empty(t, resp.GetHits())
		require.Contains(t, resp.GetHint(), "history or academic")
	}
	require.Len(t, h.svc.filterRepos("t1", []string{repoIDOf(a), repoIDOf(b)}, parseQuery("zyxwvut"), librarianv1.SearchMode_SEARCH_MODE_REGEX), 2,
		"regular expressions are never ruled out")

	// Searching A for B's function: no match, but B is named.
	resp, err := h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "CalibrateSprocket", Repositories: []string{a.GetName()},
		Mode: librarianv1.SearchMode_SEARCH_MODE_LEXICAL})
	require.NoError(t, err)
	require.Equal(t, "no_matches", resp.GetStatus())
	require.Equal(t, []string{b.GetName()}, resp.GetAlsoExistsIn())
	require.Equal(t, []string{"Related content in: " + b.GetName()}, resp.GetSuggestions())
	require.Contains(t, resp.GetHint(), b.GetName())
	// Another tenant's repository is never named.
	resp, err = h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "OnlyInOtherTenant", Repositories: []string{a.GetName()}})
	require.NoError(t, err)
	require.Empty(t, resp.GetAlsoExistsIn())
	// A search that finds something still names other holders.
	resp, err = h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "FrobnicateWidget", Repositories: []string{a.GetName()}})
	require.NoError(t, err)
	require.Equal(t, "ok", resp.GetStatus())
	require.Empty(t, resp.GetAlsoExistsIn())

	// A delta index adds words: they are found at once (no false miss).
	writeFile(t, rootA, "widget/zebra.go", "package widget\n\n// ZebraQuuxCounter counts stripes.\nfunc ZebraQuuxCounter() int { return 3 }\n")
	commitAll(t, rootA, "zebra")
	idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: a.GetName(), Wait: true})
	require.NoError(t, err)
	require.True(t, idx.GetDelta())
	for _, mode := range []librarianv1.SearchMode{librarianv1.SearchMode_SEARCH_MODE_LEXICAL, librarianv1.SearchMode_SEARCH_MODE_HYBRID} {
		resp, err = h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "ZebraQuuxCounter", Mode: mode})
		require.NoError(t, err)
		require.Equal(t, "ok", resp.GetStatus(), mode.String())
		require.Equal(t, "widget/zebra.go", resp.GetHits()[0].GetPath())
	}
	resp, err = h.svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "stripes counter", Repositories: []string{b.GetName()}})
	require.NoError(t, err)
	require.Equal(t, []string{a.GetName()}, resp.GetAlsoExistsIn(), "new words reach also_exists_in too")

	// A full re-index rebuilds the filter from the stored chunks.
	_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: a.GetName(), Full: true, Wait: true})
	require.NoError(t, err)
	h.svc.WaitVectors()
	require.NoError(t, h.svc.vectors.rebuildFilter(ctx, "t1", repoIDOf(a)))
	require.Equal(t, verdictAll, h.svc.vectors.filters.probe("t1", repoIDOf(a), []string{"zebra", "frobnicate", "widget"}))
}

func repoIDOf(r *librarianv1.Repository) string {
	return strings.TrimPrefix(r.GetName(), repositoryPrefix)
}

func TestClassifyIntent(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]intent{
		"parseHTTPRequest":                                          intentLocate,
		"where is NormalizeSKU defined":                             intentLocate,
		"examples of retry with backoff":                            intentPattern,
		"error handling conventions":                                intentPattern,
		"explain how the scheduler picks a worker":                  intentExplain,
		"why does the cache drop entries":                           intentExplain,
		"read the body of an incoming request and return its bytes": intentGeneral,
	} {
		require.Equal(t, want, classifyIntent(q), q)
	}
}

func TestIntentCacheTTLs(t *testing.T) {
	t.Parallel()
	pool, schema := testenv.Postgres(t, "librarian", migrations.FS("librarian"))
	rdb := testenv.Redis(t)
	svc, err := New(testConfig(t), app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Redis: rdb, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"calc/calc.go": "package calc\n\n// Hypotenuse returns the length of the long side of a right triangle.\nfunc Hypotenuse(a, b float64) float64 { return a*a + b*b }\n"})
	repo := create(t, ctx, svc, root, true)

	ttlOf := func(req *librarianv1.SearchCodeRequest) time.Duration {
		t.Helper()
		before, err := rdb.Keys(ctx, rdb.Key("librarian", "search", "*")).Result()
		require.NoError(t, err)
		_, err = svc.SearchCode(ctx, req)
		require.NoError(t, err)
		after, err := rdb.Keys(ctx, rdb.Key("librarian", "search", "*")).Result()
		require.NoError(t, err)
		old := map[string]bool{}
		for _, k := range before {
			old[k] = true
		}
		for _, k := range after {
			if !old[k] {
				ttl, err := rdb.TTL(ctx, k).Result()
				require.NoError(t, err)
				return ttl
			}
		}
		all, _ := rdb.Keys(ctx, "*").Result()
		t.Fatalf("search %q stored no answer: %v / %v", req.GetQuery(), after, all)
		return 0
	}
	require.InDelta(t, (24 * time.Hour).Seconds(), ttlOf(&librarianv1.SearchCodeRequest{Query: "Hypotenuse"}).Seconds(), 5,
		"locate answers live until a re-index, capped at a day")
	require.InDelta(t, (30 * time.Minute).Seconds(), ttlOf(&librarianv1.SearchCodeRequest{Query: "explain how the long side is computed"}).Seconds(), 5)
	require.InDelta(t, (60 * time.Minute).Seconds(), ttlOf(&librarianv1.SearchCodeRequest{Query: "examples of triangle maths"}).Seconds(), 5)
	require.InDelta(t, (15 * time.Minute).Seconds(), ttlOf(&librarianv1.SearchCodeRequest{Query: "length of the long side of a right triangle"}).Seconds(), 5)
	require.InDelta(t, (60 * time.Minute).Seconds(), ttlOf(&librarianv1.SearchCodeRequest{Query: "Hypotenuse length", Intent: "PATTERN"}).Seconds(), 5,
		"the caller's intent wins")
	_, err = svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "Hypotenuse", Intent: "gossip"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// A re-index that changes the repository deletes its answers.
	keys, err := rdb.Keys(ctx, rdb.Key("librarian", "search", "*")).Result()
	require.NoError(t, err)
	require.Len(t, keys, 5)
	writeFile(t, root, "calc/calc.go", "package calc\n\n// Hypotenuse returns the long side.\nfunc Hypotenuse(a, b float64) float64 { return sqrt(a*a + b*b) }\n")
	commitAll(t, root, "fix")
	_, err = svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	n, err := rdb.Exists(ctx, keys...).Result()
	require.NoError(t, err)
	require.Zero(t, n, "answers about the old index are gone")
	n, err = rdb.Exists(ctx, svc.cacheIndexKey("t1", repoIDOf(repo))).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestFindSimilarSymbols(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{
		"config/config.go": `package config

// ParseConfigFile reads the configuration file at path and parses its settings.
func ParseConfigFile(path string) (Settings, error) { return parseSettings(readFile(path)) }

// ParseConfigString parses configuration settings from a string.
func ParseConfigString(s string) (Settings, error) { return parseSettings(s) }

// Settings holds parsed configuration settings.
type Settings struct{ Values map[string]string }
`,
		"mathx/checksum.go": `package mathx

// ComputeChecksum sums the bytes of a buffer modulo a prime.
func ComputeChecksum(buf []byte) uint32 { var s uint32; for _, b := range buf { s = (s + uint32(b)) % 65521 }; return s }
`,
	})
	repo := create(t, ctx, h.svc, root, true)
	other := create(t, ctx, h.svc, gitRepo(t, map[string]string{"load/load.go": `package load

// LoadConfigFile reads a configuration file and parses its settings.
func LoadConfigFile(path string) (map[string]string, error) { return parseSettingsFile(path) }
`}), true)

	resp, err := h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName(), Symbol: "ParseConfigFile"})
	require.NoError(t, err)
	require.Equal(t, "ParseConfigFile", resp.GetSource().GetSymbol())
	require.Equal(t, "config/config.go", resp.GetSource().GetPath())
	var names []string
	for _, s := range resp.GetSymbols() {
		require.NotEqual(t, "ParseConfigFile", s.GetSymbol(), "the symbol itself is left out")
		require.Greater(t, s.GetScore(), 0.0)
		names = append(names, s.GetSymbol())
	}
	require.Contains(t, names, "ParseConfigString")
	require.Contains(t, names, "LoadConfigFile", "other repositories of the tenant are searched")
	require.Less(t, indexOf(names, "LoadConfigFile"), max(indexOf(names, "ComputeChecksum"), len(names)), "related before unrelated")
	for i := 1; i < len(resp.GetSymbols()); i++ {
		require.GreaterOrEqual(t, resp.GetSymbols()[i-1].GetScore(), resp.GetSymbols()[i].GetScore())
	}
	for _, s := range resp.GetSymbols() {
		if s.GetSymbol() == "LoadConfigFile" {
			require.Equal(t, other.GetName(), s.GetRepository())
		}
	}

	// A qualified id works too; same_kind_only keeps functions.
	resp, err = h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName(),
		Symbol: "config.ParseConfigFile", SameKindOnly: true, PageSize: 2})
	if status.Code(err) == codes.NotFound {
		// The symbol id carries the module path when there is one.
		resp, err = h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName(),
			Symbol: "ParseConfigFile", SameKindOnly: true, PageSize: 2})
	}
	require.NoError(t, err)
	require.LessOrEqual(t, len(resp.GetSymbols()), 2)
	for _, s := range resp.GetSymbols() {
		require.Equal(t, "function", s.GetSymbolKind())
	}

	_, err = h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName(), Symbol: "NoSuchThing"})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName()})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = h.svc.FindSimilarSymbols(ctx, &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName(), Symbol: "ParseConfigFile", PageSize: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	// Another tenant cannot see the repository.
	_, err = h.svc.FindSimilarSymbols(as(t, "t2"), &librarianv1.FindSimilarSymbolsRequest{Repository: repo.GetName(), Symbol: "ParseConfigFile"})
	require.Equal(t, codes.NotFound, status.Code(err))
}

func indexOf(a []string, s string) int {
	for i, x := range a {
		if x == s {
			return i
		}
	}
	return len(a) + 1
}

// TestTermFiltersOnReplica checks that another replica builds its filters
// from change events and answers no_matches and also_exists_in the same.
func TestTermFiltersOnReplica(t *testing.T) {
	t.Parallel()
	pool, schema := testenv.Postgres(t, "librarian", migrations.FS("librarian"))
	bus := testenv.NATS(t)
	newReplica := func() *Service {
		svc, err := New(testConfig(t), app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Bus: bus, Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		return svc
	}
	a, b := newReplica(), newReplica()
	ctx := as(t, "t1")
	defer testenv.Start(t, b.Run)()
	require.Eventually(t, func() bool { return bus.Conn.NumSubscriptions() > 0 }, 5*time.Second, 10*time.Millisecond)

	one := create(t, ctx, a, gitRepo(t, map[string]string{"a/a.go": "package a\n\nfunc FrobnicateWidget() {}\n"}), true)
	two := create(t, ctx, a, gitRepo(t, map[string]string{"b/b.go": "package b\n\nfunc CalibrateSprocket() {}\n"}), true)
	require.Eventually(t, func() bool {
		return b.vectors.filters.ready("t1", repoIDOf(one)) && b.vectors.filters.ready("t1", repoIDOf(two))
	}, 10*time.Second, 20*time.Millisecond, "replica b builds the filters from change events")
	resp, err := b.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "CalibrateSprocket", Repositories: []string{one.GetName()}})
	require.NoError(t, err)
	require.Equal(t, "no_matches", resp.GetStatus())
	require.Equal(t, []string{two.GetName()}, resp.GetAlsoExistsIn())
}

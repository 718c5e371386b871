package librarian

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

func TestChunkLines(t *testing.T) {
	t.Parallel()
	lines := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "line"
		}
		return out
	}
	type span struct{ start, end int }
	tests := []struct {
		name          string
		n, size, over int
		want          []span
	}{
		{"empty", 0, 40, 5, nil},
		{"shorter than a window", 3, 40, 5, []span{{1, 3}}},
		{"exact window", 40, 40, 5, []span{{1, 40}}},
		{"overlapping windows", 90, 40, 5, []span{{1, 40}, {36, 75}, {71, 90}}},
		{"no overlap", 5, 2, 0, []span{{1, 2}, {3, 4}, {5, 5}}},
		{"tail inside overlap still ends", 41, 40, 5, []span{{1, 40}, {36, 41}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []span
			for _, c := range chunkLines(lines(tt.n), tt.size, tt.over, "") {
				got = append(got, span{c.lineStart, c.lineEnd})
				require.Equal(t, c.lineEnd-c.lineStart+1, len(strings.Split(c.content, "\n")))
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestChunkContentAndTokens(t *testing.T) {
	t.Parallel()
	chunks := chunkLines(splitLines("func fooBar() {\r\n\treturn\r\n}\n"), 2, 1, pathTokens("pkg/http_util.go"))
	require.Len(t, chunks, 2)
	require.Equal(t, "func fooBar() {\n\treturn", chunks[0].content)
	require.Equal(t, "pkg http util httputil func foo bar foobar return", chunks[0].tokens)
	require.Equal(t, "\treturn\n}", chunks[1].content)
}

func TestSplitLines(t *testing.T) {
	t.Parallel()
	require.Nil(t, splitLines(""))
	require.Equal(t, []string{""}, splitLines("\n"))
	require.Equal(t, []string{"a", "b"}, splitLines("a\nb"))
	require.Equal(t, []string{"a", "b"}, splitLines("a\r\nb\r\n"))
	require.Equal(t, []string{"a", "", "b"}, splitLines("a\n\nb\n"))
}

func TestCleanText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb", cleanText([]byte("a\xffb")))
	require.Equal(t, "ab", cleanText([]byte("a\x00b")))
}

func TestWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		root, target string
		want         bool
	}{
		{"/srv/repos", "/srv/repos", true},
		{"/srv/repos", "/srv/repos/a/b", true},
		{"/srv/repos", "/srv/repos-evil", false},
		{"/srv/repos", "/srv", false},
		{"/srv/repos", "/srv/repos/..foo", true},
		{"/", "/anything", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, within(tt.root, tt.target), "%s in %s", tt.target, tt.root)
	}
}

func TestDetectLanguage(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]string{
		"a/b.go": "go", "x.PY": "python", "Makefile": "make", "docs/README.md": "markdown",
		"build/Dockerfile": "dockerfile", "LICENSE": "text", "x.unknown": "text",
	} {
		require.Equal(t, want, detectLanguage(p), p)
	}
}

func TestSensitive(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		".env": true, ".env.local": true, "server.key": true, "cert.PEM": true, "id_rsa": true, "id_ed25519.pub": true,
		"env.go": false, "keys.go": false, "README.md": false,
	} {
		require.Equal(t, want, sensitive(name), name)
	}
}

func TestBestSnippet(t *testing.T) {
	t.Parallel()
	content := strings.Join([]string{
		"package x", "", "import \"fmt\"", "", "// nothing here", "",
		"// retryBackoff waits before the next retry.", "func retryBackoff(n int) {", "\tfmt.Println(n)", "}", "", "// tail",
	}, "\n")
	snip, from, to := bestSnippet(content, 10, parseQuery("retryBackoff"))
	require.Equal(t, 16, from)
	require.Equal(t, 19, to)
	require.True(t, strings.HasPrefix(snip, "// retryBackoff waits"))

	long := strings.Repeat("word ", 200) + "needle"
	snip, from, to = bestSnippet(long, 1, parseQuery("needle"))
	require.Equal(t, 1, from)
	require.Equal(t, 1, to)
	require.LessOrEqual(t, len([]rune(snip)), snippetChars)
}

// testConfig is the configuration args set. Tests that run the service
// watch files only when they ask to, and register their directories under
// the temporary directory unless they set other roots.
func testConfig(t *testing.T, args ...string) Config {
	t.Helper()
	return testenv.FromFlags[Config](t, append([]string{"-librarian.watch=false", "-librarian.allowed-roots", os.TempDir()}, args...)...)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := testConfig(t, "-librarian.allowed-roots", " /srv/a , /srv/b/ ,acme=/srv/acme:/srv/x/../acme2, beta = /srv/beta")
	require.NoError(t, c.Validate())
	require.Equal(t, []string{"/srv/a", "/srv/b"}, c.AllowedRoots.All)
	require.Equal(t, []string{"/srv/a", "/srv/b", "/srv/acme", "/srv/acme2"}, c.AllowedRoots.For("acme"))
	require.Equal(t, []string{"/srv/a", "/srv/b", "/srv/beta"}, c.AllowedRoots.For("beta"))
	require.Equal(t, []string{"/srv/a", "/srv/b"}, c.AllowedRoots.For("other"))
	require.Equal(t, "/srv/a,/srv/b,acme=/srv/acme:/srv/acme2,beta=/srv/beta", c.AllowedRoots.String())
	require.True(t, testConfig(t, "-librarian.allowed-roots", "").AllowedRoots.Empty(), "no paths at all")
	require.True(t, testenv.FromFlags[Config](t).AllowedRoots.Empty(), "the default allows no paths")
	for _, bad := range []string{"=/srv/a", "acme=", "acme=:"} {
		var r Roots
		require.Error(t, r.Set(bad), bad)
	}
	require.ErrorContains(t, testConfig(t, "-librarian.allowed-roots", "acme=rel").Validate(), `"rel" is not an absolute path`)
	require.Equal(t, int64(1<<20), c.MaxFileBytes)
	require.Equal(t, 40, c.ChunkLines)

	bad := testConfig(t, "-librarian.allowed-roots", "rel/path", "-librarian.chunk-lines", "5",
		"-librarian.chunk-overlap", "5", "-librarian.max-file-bytes", "0", "-librarian.default-page-size", "500")
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{"allowed-roots", "chunk-overlap", "max-file-bytes", "default-page-size"} {
		require.ErrorContains(t, err, want)
	}
}

func TestExcluded(t *testing.T) {
	t.Parallel()
	for rel, want := range map[string]bool{
		"a/b.go": false, ".git/config": true, "x/vendor/y.go": true, "node_modules/p/i.js": true,
		"a/.hidden/b": true, ".env": true, "conf/.env.prod": true, ".gitignore": false, "vendor.go": false,
	} {
		require.Equal(t, want, excluded(rel), rel)
	}
}

package textsearch

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/ids"
)

func TestPageTokens(t *testing.T) {
	t.Parallel()
	c := Cursor{Created: time.UnixMicro(1_700_000_000_123_456).UTC(), ID: ids.New()}
	got, err := ParseToken(c.Token())
	require.NoError(t, err)
	require.Equal(t, c, *got)
	got, err = ParseToken("")
	require.NoError(t, err)
	require.Nil(t, got)
	for _, bad := range []string{"!!", "bm9zbGFzaA", Cursor{Created: time.Now(), ID: "x"}.Token()} {
		_, err := ParseToken(bad)
		require.ErrorIs(t, err, ErrBadToken, bad)
	}
}

func TestQueriesAndSnippets(t *testing.T) {
	t.Parallel()
	require.Empty(t, OrQuery("redis"))
	require.Equal(t, "redis | cache | ttl", OrQuery(`"redis" & cache -> (ttl)!`))
	require.Equal(t, "a b", CleanSnippet("  a\n\t b ", 300))
	long := CleanSnippet(strings.Repeat("word ", 200), 300)
	require.Len(t, []rune(long), 300)
	require.True(t, strings.HasSuffix(long, "…"))
	require.Equal(t, "h", Truncate("hé", 2))
	require.Equal(t, 10, PageSize(0, 10, 100))
	require.Equal(t, 100, PageSize(500, 10, 100))
	require.Equal(t, 7, PageSize(7, 10, 100))
}

func TestQueryProblem(t *testing.T) {
	t.Parallel()
	for query, want := range map[string]string{
		"":           "required",
		"deadlock":   "",
		"0123456789": "at most 8 bytes",
		"a\x00b":     "must be valid UTF-8 without NUL characters",
		"a\xffb":     "must be valid UTF-8 without NUL characters",
	} {
		require.Equal(t, want, QueryProblem(query, 8), "%q", query)
	}
}

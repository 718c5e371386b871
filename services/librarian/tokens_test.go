package librarian

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"camel with acronym", "parseHTTPRequest", "parse pars http request req parsehttprequest"},
		{"pascal", "IndexRepository", "index repository repo indexrepository"},
		{"snake", "compute_backoff_delay", "compute comput backoff delay computebackoffdelay"},
		{"screaming snake", "MAX_FILE_BYTES", "max file bytes byte maxfilebytes"},
		{"digits", "sha256Sum", "sha 256 sum sha256sum"},
		{"plain word", "Search", "search"},
		{"single letters stand alone", "x := a.b", "x a b"},
		{"single-letter fragments dropped", "aBc", "bc abc"},
		{"punctuation separates", "foo.Bar(baz_qux)", "foo bar baz qux bazqux"},
		{"non-ascii separates", "café_au", "caf au"},
		{"long token dropped", strings.Repeat("ab", 40), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tokenText(tt.in))
		})
	}
}

func TestTokenTextIsBounded(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("someIdentifier ", maxTokenTextBytes/10)
	out := tokenText(in)
	require.LessOrEqual(t, len(out), maxTokenTextBytes)
	require.True(t, strings.HasPrefix(out, "some identifier someidentifier"))
}

func TestParseQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		in          string
		terms       []string
		identifiers []string
	}{
		{"stop words dropped", "Where is parseHTTPRequest defined?", []string{"parse", "http", "request", "parsehttprequest", "defined"}, []string{"parseHTTPRequest"}},
		{"words", "how does the retry backoff work", []string{"retry", "backoff", "work"}, nil},
		{"only stop words kept", "what is this", []string{"what", "is", "this"}, nil},
		{"duplicates removed", "retry Retry RETRY", []string{"retry"}, []string{"RETRY"}},
		{"snake identifier", "compute_backoff_delay", []string{"compute", "backoff", "delay", "computebackoffdelay"}, []string{"compute_backoff_delay"}},
		{"nothing searchable", "?? !!", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pq := parseQuery(tt.in)
			require.Equal(t, tt.terms, pq.terms)
			require.Equal(t, tt.identifiers, pq.identifiers)
		})
	}
}

func TestTSQuery(t *testing.T) {
	t.Parallel()
	require.Equal(t, "parse | http | a_b", tsQuery([]string{"parse", "http", "a_b"}))
	// Operators and quotes never reach the query text.
	require.Equal(t, "ab | cd", tsQuery([]string{"a'b", "c&|!d", "():*"}))
	require.Equal(t, "", tsQuery(nil))
}

func TestIsCodeLike(t *testing.T) {
	t.Parallel()
	for w, want := range map[string]bool{
		"parseHTTPRequest": true, "snake_case": true, "utf8": true, "HTTP": true,
		"Search": false, "word": false, "ab": false, "1234": false,
	} {
		require.Equal(t, want, isCodeLike(w), w)
	}
}

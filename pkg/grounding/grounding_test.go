package grounding

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want Ref
		ok   bool
	}{
		{"app:server/handler.go:12", Ref{Kind: Code, Repo: "app", Path: "server/handler.go", Start: 12, End: 12}, true},
		{"app:server/handler.go:4-70", Ref{Kind: Code, Repo: "app", Path: "server/handler.go", Start: 4, End: 70}, true},
		{"my repo:./a.go:3 – 5", Ref{Kind: Code, Repo: "my repo", Path: "a.go", Start: 3, End: 5}, true},
		{"entries/01HZX", Ref{Kind: Entry, ID: "01HZX"}, true},
		{"documents/abc-1#Rate limits", Ref{Kind: Section, ID: "abc-1", Heading: "Rate limits"}, true},
		{"documents/abc-1", Ref{Kind: Section, ID: "abc-1"}, true},
		{"app:a.go:9-3", Ref{}, false},
		{"app:a.go:0", Ref{}, false},
		{"INFERENCE", Ref{}, false},
		{"i", Ref{}, false},
		{"entries/", Ref{}, false},
		{"a.go:3", Ref{}, false},
		{"app:a b.go:3", Ref{}, false},
	} {
		got, ok := ParseRef(tt.in)
		require.Equal(t, tt.ok, ok, tt.in)
		if ok {
			tt.want.Raw = tt.in
			require.Equal(t, tt.want, got, tt.in)
		}
	}
}

func TestParseClaims(t *testing.T) {
	t.Parallel()
	text := "The handler is `parseHTTPRequest` [app:server/handler.go:4-70]. It calls `readHeader` and `split` " +
		"[app:server/header.go:10; app:server/split.go:3]. See [the docs](https://example.invalid) and `m[i]`.\n" +
		"[INFERENCE] It is probably fast. The decision was \"use PostgreSQL\" [entries/e1] and the limit is " +
		"`100` [documents/d1#Limits].\n```\nx := a[app:b.go:1]\n```"
	claims := Parse(text)
	require.Len(t, claims, 5)
	require.Equal(t, "server/handler.go", claims[0].Ref.Path)
	require.Equal(t, []string{"parseHTTPRequest"}, claims[0].Identifiers)
	require.Equal(t, []string{"readHeader", "split"}, claims[1].Identifiers, "the claim starts after the previous citation")
	require.Equal(t, claims[1].Group, claims[2].Group)
	require.Equal(t, "server/split.go", claims[2].Ref.Path)
	require.Equal(t, Entry, claims[3].Ref.Kind)
	require.Equal(t, []string{"use PostgreSQL"}, claims[3].Quotes)
	require.Empty(t, claims[3].Identifiers, "identifiers of an earlier sentence are not this claim's")
	require.Equal(t, Section, claims[4].Ref.Kind)
	require.Equal(t, "Limits", claims[4].Ref.Heading)
	require.Equal(t, []string{"100"}, claims[4].Identifiers)
}

// files is a verifier over an in-memory repository "app".
type files map[string][]string

func (f files) Resolve(_ context.Context, r Ref) (string, string, error) {
	if r.Kind != Code || r.Repo != "app" {
		return "", fmt.Sprintf("repository %q was not searched", r.Repo), nil
	}
	lines, ok := f[r.Path]
	if !ok {
		return "", "no file " + r.Path, nil
	}
	if r.End > len(lines) {
		return "", "past the end", nil
	}
	return strings.Join(lines[r.Start-1:r.End], "\n"), "", nil
}

var repo = files{
	"a.go": {"package a", "", "func Add(x, y int) int {", "\treturn x + y", "}"},
	"b.go": {"package a", "", "// Sub subtracts.", "func (c *Calc) Sub(x, y int) int { return x - y }"},
}

func TestCheckAllHold(t *testing.T) {
	t.Parallel()
	text := "`Add` sums its arguments [app:a.go:3-5]; `Calc.Sub(x, y)` subtracts [app:b.go:4], as \"Sub subtracts\" says [app:b.go:3]."
	res, err := Check(t.Context(), text, repo)
	require.NoError(t, err)
	require.Equal(t, 3, res.Total)
	require.Equal(t, 3, res.Verified)
	require.Equal(t, 1.0, res.Ratio)
	require.False(t, res.Ungrounded)
	require.Equal(t, text, res.Text)
	require.Empty(t, res.Failed())
}

func TestCheckDropsFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, text, want, problem string
	}{
		{"wrong line", "`Add` sums [app:a.go:1]. `Sub` subtracts [app:b.go:4].", "`Add` sums. `Sub` subtracts [app:b.go:4].", "`Add`"},
		{"no such file", "`Add` sums [app:c.go:3].", "`Add` sums.", "no file c.go"},
		{"past the end", "`Add` sums [app:a.go:3-50].", "`Add` sums.", "past the end"},
		{"other repository", "`Add` sums [lib:a.go:3].", "`Add` sums.", "not searched"},
		{"wrong quote", "It says \"adds numbers\" [app:b.go:3].", "It says \"adds numbers\".", "adds numbers"},
		{"group member", "`Add` and `Sub` [app:a.go:3; app:a.go:1].", "`Add` and `Sub` [app:a.go:3].", "`Add`, `Sub`"},
	} {
		res, err := Check(t.Context(), tt.text, repo)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, res.Text, tt.name)
		require.True(t, res.Ungrounded, tt.name)
		require.Less(t, res.Ratio, Threshold, tt.name)
		require.Len(t, res.Failed(), 1, tt.name)
		require.Contains(t, res.Failed()[0].Problem, tt.problem, tt.name)
	}
}

func TestCheckRatio(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for range 19 {
		b.WriteString("`Add` sums [app:a.go:3]. ")
	}
	b.WriteString("`Mul` multiplies [app:a.go:3].")
	res, err := Check(t.Context(), b.String(), repo)
	require.NoError(t, err)
	require.Equal(t, 20, res.Total)
	require.Equal(t, 19, res.Verified)
	require.InDelta(t, 0.95, res.Ratio, 1e-9)
	require.False(t, res.Ungrounded, "95% is the threshold")
	require.NotContains(t, res.Text, "multiplies [", "a failed citation is dropped even when the answer stands")

	none, err := Check(t.Context(), "Add sums numbers.", repo)
	require.NoError(t, err)
	require.Zero(t, none.Total)
	require.Zero(t, none.Ratio)
	require.True(t, none.Ungrounded, "an answer that cites nothing is not grounded")
}

func TestCheckSkipsPathsAndNoTerms(t *testing.T) {
	t.Parallel()
	res, err := Check(t.Context(), "The sum is in `a.go` and `pkg/a/a.go` [app:a.go:3]. The file begins the package [app:a.go:1].", repo)
	require.NoError(t, err)
	require.Equal(t, 1.0, res.Ratio)
}

type failing struct{}

func (failing) Resolve(context.Context, Ref) (string, string, error) {
	return "", "", errors.New("database down")
}

func TestCheckLookupFailureIsAnError(t *testing.T) {
	t.Parallel()
	_, err := Check(t.Context(), "`Add` [app:a.go:3]", failing{})
	require.ErrorContains(t, err, "database down")
}

func TestHolds(t *testing.T) {
	t.Parallel()
	require.True(t, Holds("func  Add(x,\n y int)", "Add(x, y int)", false))
	require.True(t, Holds("func (c *Calc) Sub()", "Calc.Sub", false))
	require.True(t, Holds("func Add()", "Add()", false))
	require.False(t, Holds("func add()", "Add", false))
	require.True(t, Holds("Use PostgreSQL for history", "use postgresql", true))
}

func TestParseGroupsAndHeadings(t *testing.T) {
	t.Parallel()
	claims := Parse("`Add` [app:a.go:3, app:b.go:4] and \"limits\" [documents/d1#Rate limits, quotas].")
	require.Len(t, claims, 3)
	require.Equal(t, "b.go", claims[1].Ref.Path)
	require.Equal(t, "Rate limits, quotas", claims[2].Ref.Heading)
}

func TestSentence(t *testing.T) {
	t.Parallel()
	require.Empty(t, Sentence(Result{Total: 2, Verified: 2, Ratio: 1}, "the code"))
	require.Equal(t, "The model cited nothing of the code, so nothing in this answer is verified.",
		Sentence(Result{Ungrounded: true}, "the code"))
	require.Equal(t, "Only 1 of 2 citations held when checked against the history; the 1 that failed was removed, so what it backed is unverified.",
		Sentence(Result{Total: 2, Verified: 1, Ratio: 0.5, Ungrounded: true}, "the history"))
	require.Equal(t, "1 of 20 citations failed the check against the code and was removed.",
		Sentence(Result{Total: 20, Verified: 19, Ratio: 0.95}, "the code"))
}

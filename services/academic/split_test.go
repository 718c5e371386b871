package academic

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestSplitMarkdown(t *testing.T) {
	t.Parallel()
	doc := strings.Join([]string{
		"Intro text before any heading.",     // 1
		"",                                   // 2
		"# Install",                          // 3
		"Get the binary.",                    // 4
		"",                                   // 5
		"## Linux",                           // 6
		"Use the package.",                   // 7
		"```sh",                              // 8
		"# not a heading: a shell comment",   // 9
		"apt-get install sylk",               // 10
		"```",                                // 11
		"",                                   // 12
		"### Debian ###",                     // 13
		"Works on 12.",                       // 14
		"## macOS",                           // 15
		"~~~~",                               // 16
		"## still code",                      // 17
		"~~~",                                // 18
		"~~~~",                               // 19
		"Use the tap.",                       // 20
		"# Usage",                            // 21
		"    # indented code, not a heading", // 22
		"#hashtag is not a heading",          // 23
		"",                                   // 24
	}, "\r\n")
	got := splitMarkdown(doc, 32<<10, 1000)
	type want struct {
		heading    string
		start, end int
		body       string
	}
	wants := []want{
		{"", 1, 1, "Intro text before any heading."},
		{"Install", 3, 4, "Get the binary."},
		{"Install > Linux", 6, 11, "Use the package.\n```sh\n# not a heading: a shell comment\napt-get install sylk\n```"},
		{"Install > Linux > Debian", 13, 14, "Works on 12."},
		{"Install > macOS", 15, 20, "~~~~\n## still code\n~~~\n~~~~\nUse the tap."},
		{"Usage", 21, 23, "    # indented code, not a heading\n#hashtag is not a heading"},
	}
	require.Len(t, got, len(wants))
	for i, w := range wants {
		require.Equal(t, w.heading, got[i].Heading, "section %d", i)
		require.Equal(t, w.start, got[i].LineStart, "section %d", i)
		require.Equal(t, w.end, got[i].LineEnd, "section %d", i)
		require.Equal(t, w.body, got[i].Body, "section %d", i)
	}
}

func TestSplitMarkdownCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		doc      string
		headings []string
		lines    [][2]int
	}{
		{"no headings", "just\ntext\n", []string{""}, [][2]int{{1, 2}}},
		{"headings only", "# A\n## B\n", []string{"A", "A > B"}, [][2]int{{1, 1}, {2, 2}}},
		{"empty parent skipped", "# A\n## B\nbody\n", []string{"A > B"}, [][2]int{{2, 3}}},
		{"sibling resets depth", "# A\n### C\nc\n## B\nb\n", []string{"A > C", "A > B"}, [][2]int{{2, 3}, {4, 5}}},
		{"shallower heading pops", "## A\na\n# B\nb\n", []string{"A", "B"}, [][2]int{{1, 2}, {3, 4}}},
		{"seven hashes is text", "# A\n####### x\n", []string{"A"}, [][2]int{{1, 2}}},
		{"unclosed fence runs to end", "# A\n```\n# B\n", []string{"A"}, [][2]int{{1, 3}}},
		{"empty heading text", "#\nx\n", []string{""}, [][2]int{{1, 2}}},
		{"closing hashes need a space", "# C#\nx\n", []string{"C#"}, [][2]int{{1, 2}}},
		{"backtick fence with backtick info is text", "# A\n``` a`b\n# B\nb\n", []string{"A", "B"}, [][2]int{{1, 2}, {3, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := splitMarkdown(tt.doc, 32<<10, 1000)
			var headings []string
			var lines [][2]int
			for _, s := range got {
				headings = append(headings, s.Heading)
				lines = append(lines, [2]int{s.LineStart, s.LineEnd})
			}
			require.Equal(t, tt.headings, headings)
			require.Equal(t, tt.lines, lines)
		})
	}
}

func TestSplitMarkdownCutsLargeSections(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("# Big\n")
	for i := range 100 {
		fmt.Fprintf(&b, "line %03d of the big section\n", i) // 28 bytes with the newline
	}
	got := splitMarkdown(b.String(), 280, 1000)
	require.Len(t, got, 10)
	require.Equal(t, 1, got[0].LineStart, "the first part starts at the heading")
	require.Equal(t, 11, got[0].LineEnd)
	for i, s := range got {
		require.Equal(t, "Big", s.Heading)
		require.LessOrEqual(t, len(s.Body), 280)
		if i > 0 {
			require.Equal(t, got[i-1].LineEnd+1, s.LineStart)
		}
	}
	require.Equal(t, 101, got[len(got)-1].LineEnd)
}

func TestSplitText(t *testing.T) {
	t.Parallel()
	para := func(n int, word string) string {
		ls := make([]string, n)
		for i := range ls {
			ls[i] = fmt.Sprintf("%s %d", word, i)
		}
		return strings.Join(ls, "\n")
	}
	tests := []struct {
		name  string
		doc   string
		lines [][2]int
	}{
		{"one paragraph", "a\nb\n", [][2]int{{1, 2}}},
		{"grouped", "a\n\nb\n\n\nc", [][2]int{{1, 6}}},
		{"leading blank lines", "\n\n a\n", [][2]int{{3, 3}}},
		{"group limit", para(30, "x") + "\n\n" + para(15, "y"), [][2]int{{1, 30}, {32, 46}}},
		{"long paragraph cut", para(90, "z"), [][2]int{{1, 40}, {41, 80}, {81, 90}}},
		{"long paragraph between", "a\n\n" + para(45, "z") + "\n\nb", [][2]int{{1, 1}, {3, 42}, {43, 47}, {49, 49}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := splitText(tt.doc, 40, 32<<10, 1000)
			var lines [][2]int
			for _, s := range got {
				require.Empty(t, s.Heading)
				lines = append(lines, [2]int{s.LineStart, s.LineEnd})
			}
			require.Equal(t, tt.lines, lines)
		})
	}
	got := splitText("alpha\n\nbeta\n", 40, 32<<10, 1000)
	require.Equal(t, "alpha\n\nbeta", got[0].Body)
}

// A document's size bounds what splitting it holds: a long heading is cut
// rather than repeated in every section below it, and no more sections
// than the limit are built.
func TestSplitMarkdownIsBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 20000)
	doc := "# " + long + "\n" + strings.Repeat("## b\nx\n", 5000)
	got := splitMarkdown(doc, 32<<10, 10000)
	require.Len(t, got, 5000)
	for _, s := range got {
		require.LessOrEqual(t, utf8.RuneCountInString(s.Heading), MaxHeadingChars+len(headingSeparator)+1)
	}
	require.True(t, strings.HasPrefix(got[0].Heading, strings.Repeat("é", MaxHeadingChars)+" > b"), got[0].Heading[:20])
	require.Len(t, splitMarkdown(doc, 32<<10, 100), 100)
	require.Len(t, splitMarkdown(strings.Repeat("# h\n", 5000), 32<<10, 100), 100, "heading-only sections too")
	require.Len(t, splitText(strings.Repeat("p\n\n", 5000), 1, 32<<10, 100), 100)
}

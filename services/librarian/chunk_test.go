package librarian

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const goSample = `// Package shop sells things.
package shop

import (
	"fmt"
	str "strings"
)

// Price is an amount in cents.
type Price int

type (
	// Item is one thing for sale.
	Item struct{ Name string }
	Cart []Item
)

const Tax, Fee = 20, 1

// Total adds up the cart.
func (c Cart) Total() Price {
	return sum(c)
}

// a free comment that belongs to sum

func sum(c Cart) Price {
	fmt.Println(str.ToUpper("x"))
	c.Total()
	return Price(len(c))
}
`

func TestGoUnits(t *testing.T) {
	t.Parallel()
	lines := splitLines(goSample)
	u, ok := goUnits("shop/shop.go", goSample, len(lines), "example.com/m/shop")
	require.True(t, ok)
	type got struct {
		start, end   int
		symbol, kind string
	}
	var spans []got
	for _, sp := range trimSpans(lines, u.spans) {
		spans = append(spans, got{sp.start, sp.end, sp.symbol, sp.kind})
	}
	require.Equal(t, []got{
		{1, 7, "shop", kindImports},
		{9, 10, "Price", kindType},
		{12, 14, "Item", kindType}, // with the group's opening line
		{15, 15, "Cart", kindType},
		{16, 18, "Tax", kindConst}, // with the group's closing line
		{20, 23, "Cart.Total", kindMethod},
		{25, 31, "sum", kindFunction},
	}, spans)

	ids := map[string]symbolRow{}
	for _, s := range u.symbols {
		ids[s.id] = s
	}
	require.Contains(t, ids, "example.com/m/shop.Price")
	require.Contains(t, ids, "example.com/m/shop.Fee")
	total := ids["example.com/m/shop.Cart.Total"]
	require.Equal(t, kindMethod, total.kind)
	require.Equal(t, "func (c Cart) Total() Price", total.signature)
	require.Equal(t, "Total adds up the cart.", total.doc)
	require.Equal(t, 20, total.lineStart)

	var edges []string
	for _, e := range u.edges {
		if e.kind == edgeCalls || e.kind == edgeImports { // type edges: goedges_test.go
			edges = append(edges, e.kind+" "+e.source+" -> "+e.target)
		}
	}
	require.ElementsMatch(t, []string{
		"imports file:shop/shop.go -> fmt",
		"imports file:shop/shop.go -> strings",
		"calls example.com/m/shop.Cart.Total -> example.com/m/shop.sum",
		"calls example.com/m/shop.sum -> fmt.Println",
		"calls example.com/m/shop.sum -> strings.ToUpper",
		"calls example.com/m/shop.sum -> *.Total",
		"calls example.com/m/shop.sum -> example.com/m/shop.Price",
	}, edges)

	_, ok = goUnits("bad.go", "package x\nfunc {", 2, "x")
	require.False(t, ok)
}

func TestChunkIDsAreStable(t *testing.T) {
	t.Parallel()
	build := func(src string) map[string]string {
		lines := splitLines(src)
		u, ok := goUnits("a.go", src, len(lines), "a")
		require.True(t, ok)
		out := map[string]string{}
		for _, c := range buildChunks("a.go", lines, trimSpans(lines, u.spans), 150, 40, 5) {
			out[c.symbol] = c.id
		}
		return out
	}
	before := build("package a\n\nfunc A() {}\n\nfunc B() {}\n")
	after := build("package a\n\n// A grew.\nfunc A() {\n\tprintln()\n}\n\nfunc C() {}\n\nfunc B() {}\n")
	require.Equal(t, before["A"], after["A"])
	require.Equal(t, before["B"], after["B"])
	require.NotEqual(t, before["A"], before["B"])
}

func TestLongUnitsAreWindowed(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("package a\n\nfunc Long() {\n")
	for i := 0; i < 100; i++ {
		b.WriteString("\tprintln()\n")
	}
	b.WriteString("}\n")
	lines := splitLines(b.String())
	u, ok := goUnits("a.go", b.String(), len(lines), "a")
	require.True(t, ok)
	chunks := buildChunks("a.go", lines, trimSpans(lines, u.spans), 50, 40, 5)
	var spans [][2]int
	for _, c := range chunks[1:] {
		require.Equal(t, "Long", c.symbol)
		spans = append(spans, [2]int{c.lineStart, c.lineEnd})
	}
	require.Equal(t, [][2]int{{3, 42}, {38, 77}, {73, 104}}, spans)
}

func TestHeuristicUnits(t *testing.T) {
	t.Parallel()
	type got struct {
		start, end   int
		symbol, kind string
	}
	tests := []struct {
		name, lang, src string
		want            []got
	}{
		{"python", "python", "import os\n\n# Loads it.\n@cache\ndef load(p):\n    return p\n\nclass Store:\n    def get(self):\n        pass\n",
			[]got{{1, 1, "", kindBlock}, {3, 6, "load", kindFunction}, {8, 8, "Store", kindClass}, {9, 10, "get", kindFunction}}},
		{"typescript", "typescript", "import x from 'y';\n\n/** Adds. */\nexport function add(a: number) {\n  return a;\n}\nexport const mul = (a) => a;\nexport interface Shape {}\n",
			[]got{{1, 1, "", kindBlock}, {3, 6, "add", kindFunction}, {7, 7, "mul", kindFunction}, {8, 8, "Shape", kindType}}},
		{"rust", "rust", "use std::io;\n\n/// Reads.\n#[inline]\npub fn read() {}\n\npub struct Buf;\nimpl Buf {\n    fn len(&self) {}\n}\n",
			[]got{{1, 1, "", kindBlock}, {3, 5, "read", kindFunction}, {7, 7, "Buf", kindType}, {8, 8, "Buf", kindClass}, {9, 10, "len", kindFunction}}},
		{"c", "c", "#include <stdio.h>\n\n/* Entry. */\nint main(int argc, char **argv)\n{\n  if (argc) {\n  }\n}\n",
			[]got{{1, 1, "", kindBlock}, {3, 8, "main", kindFunction}}},
		{"markdown", "markdown", "# Title\n\nIntro.\n\n## Usage\n\n```sh\n# not a heading\n```\n",
			[]got{{1, 3, "Title", kindSection}, {5, 9, "Usage", kindSection}}},
		{"text", "text", "a\nb\n", []got{{1, 2, "", kindBlock}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lines := splitLines(tt.src)
			var spans []got
			for _, sp := range trimSpans(lines, heuristicUnits(tt.lang, lines)) {
				spans = append(spans, got{sp.start, sp.end, sp.symbol, sp.kind})
			}
			require.Equal(t, tt.want, spans)
		})
	}
}

func TestIgnoreRules(t *testing.T) {
	t.Parallel()
	var r ignoreRules
	for _, p := range []string{"*.log", "build/", "/docs/gen", "a/**/z.txt", "!keep.log", "# comment"} {
		r.add(p)
	}
	tests := []struct {
		path  string
		dir   bool
		match bool
	}{
		{"x.log", false, true},
		{"deep/x.log", false, true},
		{"keep.log", false, false},
		{"build", true, true},
		{"build", false, false},
		{"src/build", true, true},
		{"docs/gen", false, true},
		{"x/docs/gen", false, false},
		{"a/z.txt", false, true},
		{"a/b/c/z.txt", false, true},
		{"main.go", false, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.match, r.match(tt.path, tt.dir), tt.path)
	}
}

func TestGlobRegex(t *testing.T) {
	t.Parallel()
	tests := []struct {
		glob, path string
		match      bool
	}{
		{"*.go", "a/b/c.go", true},
		{"*.go", "c.py", false},
		{"server/*.go", "server/h.go", true},
		{"server/*.go", "server/x/h.go", false},
		{"server/**/*.go", "server/x/y/h.go", true},
		{"server/**/*.go", "server/h.go", true},
		{"**/handler.go", "a/handler.go", true},
		{"café/*.md", "café/menu.md", true},
		{"*.md", "docs/größe.md", true},
		{"日本/?.go", "日本/a.go", true},
		{"?.go", "é.go", true},
	}
	for _, tt := range tests {
		re := regexpMust(t, globRegex(tt.glob))
		require.Equal(t, tt.match, re.MatchString(tt.path), tt.glob+" "+tt.path)
	}
	// Wildcards that repeat one another are written once.
	require.Equal(t, `^(.*/)?[^/]*\.go$`, globRegex(strings.Repeat("**/", 1000)+"*.go"))
	require.Equal(t, `^(.*/)?.*$`, globRegex(strings.Repeat("*", 1001)))
	require.Equal(t, `^a/.*/b$`, globRegex("a/***/b"))
	require.Equal(t, `^a/(.*/)?.*$`, globRegex("a/**/**/****"))
}

func regexpMust(t *testing.T, expr string) interface{ MatchString(string) bool } {
	t.Helper()
	re, err := regexp.Compile(expr)
	require.NoError(t, err)
	return re
}

package librarian

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Ignore rules follow .gitignore: nested files, negation, anchoring, and
// the built-in build/ entry applies to the root's build directory only.
func TestIgnoreGitignoreSemantics(t *testing.T) {
	t.Parallel()
	root := gitRepo(t, map[string]string{
		".gitignore":            "*.log\n!keep.log\n/out/\n",
		"svc/.gitignore":        "gen/\n!important.log\n/local.txt\n",
		"svc/deep/.gitignore":   "*.tmp\n",
		"svc/main.go":           "package svc\n",
		"svc/build/build.go":    "package build\n",
		"svc/important.log":     "x\n",
		"svc/gen/x.go":          "package gen\n",
		"svc/local.txt":         "x\n",
		"svc/deep/local.txt":    "x\n",
		"svc/deep/a.tmp":        "x\n",
		"other/a.tmp":           "x\n",
		"out/x.go":              "package out\n",
		"pkg/out/x.go":          "package out\n",
		"node_modules/m/i.js":   "x\n",
		"web/node_modules/i.js": "x\n",
		"build/out.go":          "package build\n",
	})
	var r ignoreRules
	for _, p := range defaultIgnore {
		r.add(p)
	}
	r.loadGitignore(root)
	for p, want := range map[string]bool{
		"a.log": true, "keep.log": false, "svc/x.log": true, "svc/important.log": false,
		"svc/gen/x.go": true, "gen/x.go": false, "svc/local.txt": true, "svc/deep/local.txt": false,
		"svc/deep/a.tmp": true, "other/a.tmp": false, "out/x.go": true, "pkg/out/x.go": false,
		"svc/build/build.go": false, "build/out.go": true, "node_modules/m/i.js": true, "web/node_modules/i.js": true,
		"svc/main.go": false,
	} {
		require.Equal(t, want, r.match(p, false) || ignoredDir(r, p), p)
	}
	require.True(t, r.match("svc/gen", true), "a nested directory-only pattern")
	require.False(t, r.match("svc/gen", false), "a directory-only pattern leaves a file of that name")
	require.False(t, r.match("svc/build", true), "a deep package named build is source")
	require.True(t, r.match("build", true), "the root build directory is output")

	// The index follows the same rules: the deep build package is found.
	h := newHarness(t, false)
	ctx := as(t, "t1")
	create(t, ctx, h.svc, root, true)
	hits := search(t, ctx, h.svc, "package build")
	var paths []string
	for _, hh := range hits {
		paths = append(paths, filepath.ToSlash(hh.GetPath()))
	}
	require.Contains(t, paths, "svc/build/build.go")
	require.NotContains(t, paths, "build/out.go")
}

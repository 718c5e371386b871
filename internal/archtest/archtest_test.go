package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportRules checks the whole module.
func TestImportRules(t *testing.T) {
	root := filepath.Join("..", "..")
	module, err := Module(root)
	require.NoError(t, err)
	pkgs, err := List(t.Context(), root, "./...")
	require.NoError(t, err)
	for _, e := range Errors(pkgs) {
		t.Errorf("cannot load %s", e)
	}
	for _, v := range Check(module, pkgs) {
		t.Error(v)
	}
}

// The rules on a graph of packages: what each forbids, through other
// packages and in tests only, and what they allow.
func TestCheckGraph(t *testing.T) {
	t.Parallel()
	const m = "example.dev/app"
	pkg := func(path, forTest string, imports []string, deps ...string) Package {
		return Package{ImportPath: m + "/" + path, ForTest: forTest, Imports: prefixed(m, imports), Deps: prefixed(m, append(imports, deps...))}
	}
	pkgs := []Package{
		pkg("pkg/a", "", []string{"services/x"}),
		pkg("pkg/b", "", []string{"pkg/c"}, "gateway"),
		pkg("pkg/c", "", []string{"gateway"}),
		pkg("pkg/d", "", []string{"gen/go/v1"}),
		pkg("services/x", "", []string{"gen/go/v1", "pkg/d", "services/x/internal/store"}),
		pkg("services/x/internal/store", "", nil),
		pkg("services/y", "", []string{"pkg/d"}),
		pkg("services/y [example.dev/app/services/y.test]", m+"/services/y", []string{"pkg/d", "services/x"}, "gen/go/v1"),
		pkg("services/y_test [example.dev/app/services/y.test]", m+"/services/y", []string{"services/y"}),
		pkg("services/y.test", "", []string{"services/y", "services/y_test"}, "services/x"),
		pkg("gen/go/v1", "", []string{"gen/go/v2"}),
		pkg("gen/go/v2", "", []string{"pkg/d"}),
		pkg("internal/mesh", "", []string{"services/x", "services/y", "gateway"}),
		pkg("e2e", "", []string{"internal/mesh"}, "services/x", "services/y", "gateway"),
		{ImportPath: "other.dev/lib", Deps: []string{m + "/services/x"}},
	}
	require.Equal(t, []string{
		"gen/go/v2 imports pkg/d: " + RuleGen,
		"pkg/a imports services/x: " + RulePkg,
		"pkg/b imports gateway through pkg/c: " + RulePkg,
		"pkg/c imports gateway: " + RulePkg,
		"services/y (its tests) imports services/x: " + RuleService,
	}, violations(m, pkgs))
}

// violations are Check's, as text.
func violations(module string, pkgs []Package) []string {
	var out []string
	for _, v := range Check(module, pkgs) {
		out = append(out, v.String())
	}
	return out
}

func prefixed(m string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = m + "/" + p
	}
	return out
}

// A module with a planted violation of each rule fails the check, found
// by go list as on the real module.
func TestPlantedViolations(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("go not on PATH")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                        "module example.dev/app\n\ngo 1.22\n",
		"gateway/gateway.go":            "package gateway\n",
		"services/x/x.go":               "package x\n\nimport _ \"example.dev/app/gen/go/v1\"\n",
		"services/y/y.go":               "package y\n",
		"services/y/y_test.go":          "package y\n\nimport _ \"example.dev/app/services/x\"\n",
		"services/z/z.go":               "package z\n\nimport _ \"example.dev/app/pkg/b\"\n",
		"pkg/a/a.go":                    "package a\n\nimport _ \"example.dev/app/services/x\"\n",
		"pkg/b/b.go":                    "package b\n\nimport _ \"example.dev/app/gateway\"\n",
		"pkg/c/c.go":                    "package c\n",
		"gen/go/v1/v1.go":               "package v1\n\nimport _ \"example.dev/app/pkg/c\"\n",
		"internal/mesh/mesh.go":         "package mesh\n\nimport (\n\t_ \"example.dev/app/gateway\"\n\t_ \"example.dev/app/services/x\"\n)\n",
		"internal/mesh/mesh_test.go":    "package mesh\n\nimport _ \"example.dev/app/services/z\"\n",
		"services/x/internal/db/db.go":  "package db\n",
		"services/x/internal/db/use.go": "package db\n\nimport _ \"example.dev/app/pkg/c\"\n",
	}
	for name, src := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	}
	module, err := Module(dir)
	require.NoError(t, err)
	pkgs, err := List(t.Context(), dir, "./...")
	require.NoError(t, err)
	require.Empty(t, Errors(pkgs))
	require.Equal(t, []string{
		"gen/go/v1 imports pkg/c: " + RuleGen,
		"pkg/a imports services/x: " + RulePkg,
		"pkg/b imports gateway: " + RulePkg,
		"services/y (its tests) imports services/x: " + RuleService,
		"services/z imports gateway through pkg/b: " + RuleServiceGateway,
	}, violations(module, pkgs))
}

package tooldetect_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/tooldetect"
)

func ids(ts []tooldetect.Tool) []string {
	var out []string
	for _, x := range ts {
		out = append(out, x.ID)
	}
	return out
}

func TestDiscoverPriorities(t *testing.T) {
	t.Parallel()
	installed := func(p string) bool { return p == "gofmt" || p == "go" }
	tests := []struct {
		name                       string
		files                      map[string]string
		langs                      []string
		fmt, lint, lsp, test, alts []string
	}{
		{"go module", map[string]string{"go.mod": "module x"}, []string{"go"},
			[]string{"goimports"}, []string{"go-vet"}, []string{"gopls"}, []string{"go-test"}, []string{"gofmt"}},
		{"go with golangci", map[string]string{"go.mod": "module x", ".golangci.yml": ""}, []string{"go"},
			[]string{"goimports"}, []string{"golangci-lint"}, []string{"gopls"}, []string{"go-test"}, []string{"gofmt", "go-vet"}},
		{"biome beats prettier, vitest beats jest", map[string]string{"package.json": `{"devDependencies":{"prettier":"3","jest":"29","vitest":"1"}}`, "biome.json": "{}"}, []string{"typescript"},
			[]string{"biome"}, []string{"biome-lint"}, []string{"typescript-language-server"}, []string{"vitest"}, []string{"prettier", "jest", "node-test"}},
		{"ruff beats black, pytest beats unittest", map[string]string{"pyproject.toml": "[tool.ruff]\n[tool.pytest.ini_options]\n"}, []string{"python"},
			[]string{"ruff-format"}, []string{"ruff"}, []string{"pyright"}, []string{"pytest"}, []string{"black", "autopep8", "pylsp", "unittest"}},
		{"plain python", nil, []string{"python"},
			[]string{"black"}, []string{"ruff"}, []string{"pyright"}, []string{"unittest"}, []string{"autopep8", "pylsp"}},
		{"ruby with standard and rspec", map[string]string{"Gemfile": "gem 'standard'\ngem 'rspec'\n"}, []string{"ruby"},
			[]string{"standardrb"}, []string{"rubocop"}, []string{"ruby-lsp"}, []string{"rspec"}, []string{"rubocop-format", "solargraph", "minitest"}},
		{"go files without a module: no go vet", nil, []string{"go"},
			[]string{"goimports"}, nil, []string{"gopls"}, nil, []string{"gofmt"}},
		{"gradle beats maven", map[string]string{"build.gradle": "", "pom.xml": ""}, []string{"java"},
			nil, nil, []string{"jdtls"}, []string{"gradle"}, []string{"maven"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := tooldetect.Discover(tooldetect.NewFacts(tt.files, tt.langs...), installed)
			require.Equal(t, tt.fmt, ids(res.Formatters), "formatters")
			require.Equal(t, tt.lint, ids(res.Linters), "linters")
			require.Equal(t, tt.lsp, ids(res.LanguageServers), "language servers")
			require.Equal(t, tt.test, ids(res.TestFrameworks), "test frameworks")
			require.ElementsMatch(t, tt.alts, ids(res.Alternatives), "alternatives")
		})
	}
}

// Runnable picks, per language, the first installed tool with a
// project-wide check, falling back from the choice to the alternatives.
func TestRunnable(t *testing.T) {
	t.Parallel()
	res := tooldetect.Discover(tooldetect.NewFacts(map[string]string{"go.mod": "module x", ".flake8": "[flake8]\n"}, "python", "go"),
		func(p string) bool { return p == "flake8" || p == "gofmt" || p == "go" })
	require.Equal(t, []string{"gofmt"}, ids(res.Runnable(tooldetect.Formatter)), "goimports is not installed; black neither")
	require.ElementsMatch(t, []string{"go-vet", "flake8"}, ids(res.Runnable(tooldetect.Linter)), "ruff is not installed; flake8 is configured")
	require.Empty(t, res.Runnable(tooldetect.LanguageServer), "language servers have no check")
}

func TestReadFacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("pyproject.toml", "[tool.ruff]\n")
	write("pkg/a.py", "x = 1\n")
	write("node_modules/m/index.js", "")
	f, fp := tooldetect.ReadFacts(dir)
	res := tooldetect.Discover(f, func(string) bool { return false })
	require.Equal(t, []string{"python", "toml"}, res.Languages, "node_modules is not looked into")
	require.Equal(t, []string{"ruff"}, ids(res.Linters))
	write("pyproject.toml", "[tool.black]\n")
	_, fp2 := tooldetect.ReadFacts(dir)
	require.NotEqual(t, fp, fp2, "a configuration change changes the fingerprint")
	require.Equal(t, "go", tooldetect.Language("a/b.go"))
	require.Equal(t, "make", tooldetect.Language("Makefile"))
	require.Equal(t, "text", tooldetect.Language("notes"))
}

// A tree whose configuration files a task made into a link out of it, a
// pipe or a device is read without following, waiting on or draining them.
func TestReadFactsSkipsWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(root, "package.json")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "go.mod"), 0o600))
	outside := filepath.Join(t.TempDir(), "pyproject.toml")
	require.NoError(t, os.WriteFile(outside, []byte("[tool.ruff]\n"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "pyproject.toml")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "Cargo.toml"), []byte("[package]\n"), 0o644))
	facts, _ := tooldetect.ReadFacts(root)
	res := tooldetect.Discover(facts, func(string) bool { return false })
	require.Contains(t, res.Languages, "rust", "Cargo.toml was read")
	for _, l := range []string{"javascript", "go", "python"} {
		require.NotContains(t, res.Languages, l, "package.json, go.mod and pyproject.toml were not read")
	}
	require.NotContains(t, ids(res.Linters), "ruff", "a link out of the tree is not followed")
}

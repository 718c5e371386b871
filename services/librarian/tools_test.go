package librarian

import (
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

func TestDiscoverPriorities(t *testing.T) {
	t.Parallel()
	ids := func(ts []*librarianv1.Tool) []string {
		var out []string
		for _, x := range ts {
			out = append(out, x.GetId())
		}
		return out
	}
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
		{"gradle beats maven", map[string]string{"build.gradle": "", "pom.xml": ""}, []string{"java"},
			nil, nil, []string{"jdtls"}, []string{"gradle"}, []string{"maven"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := projectFacts{files: map[string]string{}, languages: map[string]bool{}}
			for k, v := range tt.files {
				f.files[k] = v
			}
			for _, l := range tt.langs {
				f.languages[l] = true
			}
			resp := discover(f, installed)
			require.Equal(t, tt.fmt, ids(resp.GetFormatters()), "formatters")
			require.Equal(t, tt.lint, ids(resp.GetLinters()), "linters")
			require.Equal(t, tt.lsp, ids(resp.GetLanguageServers()), "language servers")
			require.Equal(t, tt.test, ids(resp.GetTestFrameworks()), "test frameworks")
			require.ElementsMatch(t, tt.alts, ids(resp.GetAlternatives()), "alternatives")
		})
	}
	resp := discover(projectFacts{files: map[string]string{"go.mod": ""}, languages: map[string]bool{}}, installed)
	require.True(t, resp.GetTestFrameworks()[0].GetInstalled())
	require.Contains(t, resp.GetWarnings(), "goimports (goimports) is not installed on the librarian's PATH")
}

package librarian

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/identity"
)

// configFiles are the files whose presence or content decides which tools
// apply; a change to any of them invalidates a repository's cached answer.
var configFiles = []string{
	"go.mod", ".golangci.yml", ".golangci.yaml", ".golangci.toml",
	"package.json", "biome.json", "biome.jsonc", ".prettierrc", ".prettierrc.json", ".prettierrc.yml", ".prettierrc.js", "prettier.config.js",
	".eslintrc", ".eslintrc.json", ".eslintrc.js", ".eslintrc.yml", "eslint.config.js", "eslint.config.mjs",
	"vitest.config.ts", "vitest.config.js", "jest.config.js", "jest.config.ts", ".mocharc.yml", ".mocharc.json", "bunfig.toml", "bun.lockb", "tsconfig.json",
	"pyproject.toml", "ruff.toml", ".ruff.toml", "setup.cfg", "pytest.ini", "conftest.py", "tox.ini", ".flake8", "requirements.txt", "setup.py",
	"Gemfile", ".rubocop.yml", ".standard.yml", ".rspec",
	"Cargo.toml", "rustfmt.toml", ".rustfmt.toml",
	"pom.xml", "build.gradle", "build.gradle.kts",
	".clang-format", "CMakeLists.txt", "compile_commands.json",
}

// maxConfigRead bounds how much of a configuration file is read.
const maxConfigRead = 256 << 10

// projectFacts is what tool detection looks at.
type projectFacts struct {
	files     map[string]string // config file name -> content (bounded)
	languages map[string]bool   // languages with files in the tree
	dirs      map[string]bool   // top-level directories
}

func (p projectFacts) has(name string) bool { _, ok := p.files[name]; return ok }

func (p projectFacts) contains(name, needle string) bool {
	return strings.Contains(p.files[name], needle)
}

// readFacts reads the root's configuration files and samples the
// languages of the tree (a bounded walk).
func readFacts(root string) (projectFacts, string) {
	f := projectFacts{files: map[string]string{}, languages: map[string]bool{}, dirs: map[string]bool{}}
	h := sha256.New()
	for _, name := range configFiles {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue
		}
		if len(data) > maxConfigRead {
			data = data[:maxConfigRead]
		}
		f.files[name] = string(data)
		h.Write([]byte(name + "\x00"))
		h.Write(data)
		h.Write([]byte{0})
	}
	seen := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || seen > 20000 {
			return fs.SkipDir
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || skippedDirs[d.Name()]) {
				return fs.SkipDir
			}
			if filepath.Dir(p) == root {
				f.dirs[d.Name()] = true
			}
			return nil
		}
		seen++
		if l := detectLanguage(d.Name()); l != "text" {
			f.languages[l] = true
		}
		return nil
	})
	langs := make([]string, 0, len(f.languages))
	for l := range f.languages {
		langs = append(langs, l)
	}
	sort.Strings(langs)
	h.Write([]byte(strings.Join(langs, ",")))
	return f, hex.EncodeToString(h.Sum(nil)[:16])
}

// toolRule is one candidate tool: it applies when when() holds; rules of a
// language and category are listed in the spec's priority order.
type toolRule struct {
	id, name, language string
	program            string
	command            []string
	when               func(projectFacts) (bool, float64, string)
}

func always(reason string, conf float64) func(projectFacts) (bool, float64, string) {
	return func(projectFacts) (bool, float64, string) { return true, conf, reason }
}

func ifFile(name string, conf float64) func(projectFacts) (bool, float64, string) {
	return func(p projectFacts) (bool, float64, string) { return p.has(name), conf, name + " present" }
}

func ifAnyFile(conf float64, names ...string) func(projectFacts) (bool, float64, string) {
	return func(p projectFacts) (bool, float64, string) {
		for _, n := range names {
			if p.has(n) {
				return true, conf, n + " present"
			}
		}
		return false, 0, ""
	}
}

func ifContains(file, needle string, conf float64) func(projectFacts) (bool, float64, string) {
	return func(p projectFacts) (bool, float64, string) {
		return p.contains(file, needle), conf, file + " mentions " + strings.Trim(needle, `"[]`)
	}
}

func anyOf(fns ...func(projectFacts) (bool, float64, string)) func(projectFacts) (bool, float64, string) {
	return func(p projectFacts) (bool, float64, string) {
		for _, fn := range fns {
			if ok, c, r := fn(p); ok {
				return ok, c, r
			}
		}
		return false, 0, ""
	}
}

var (
	formatterRules = []toolRule{
		{"goimports", "goimports", "go", "goimports", []string{"goimports", "-w", "$FILE"}, always("Go files present; goimports also fixes imports", 0.9)},
		{"gofmt", "gofmt", "go", "gofmt", []string{"gofmt", "-w", "$FILE"}, always("Go files present", 0.8)},
		{"biome", "Biome", "javascript", "biome", []string{"biome", "format", "--write", "$FILE"}, ifAnyFile(0.95, "biome.json", "biome.jsonc")},
		{"prettier", "Prettier", "javascript", "prettier", []string{"prettier", "--write", "$FILE"},
			anyOf(ifAnyFile(0.9, ".prettierrc", ".prettierrc.json", ".prettierrc.yml", ".prettierrc.js", "prettier.config.js"), ifContains("package.json", `"prettier"`, 0.85), always("JavaScript or TypeScript files present", 0.5))},
		{"ruff-format", "Ruff", "python", "ruff", []string{"ruff", "format", "$FILE"},
			anyOf(ifAnyFile(0.95, "ruff.toml", ".ruff.toml"), ifContains("pyproject.toml", "[tool.ruff", 0.95))},
		{"black", "Black", "python", "black", []string{"black", "$FILE"},
			anyOf(ifContains("pyproject.toml", "[tool.black", 0.9), always("Python files present", 0.6))},
		{"autopep8", "autopep8", "python", "autopep8", []string{"autopep8", "--in-place", "$FILE"}, always("Python files present", 0.4)},
		{"standardrb", "Standard Ruby", "ruby", "standardrb", []string{"standardrb", "--fix", "$FILE"},
			anyOf(ifFile(".standard.yml", 0.9), ifContains("Gemfile", "standard", 0.85))},
		{"rubocop-format", "RuboCop", "ruby", "rubocop", []string{"rubocop", "-a", "$FILE"}, anyOf(ifFile(".rubocop.yml", 0.85), always("Ruby files present", 0.5))},
		{"rustfmt", "rustfmt", "rust", "rustfmt", []string{"rustfmt", "$FILE"}, always("Rust files present", 0.9)},
		{"clang-format", "clang-format", "c", "clang-format", []string{"clang-format", "-i", "$FILE"}, anyOf(ifFile(".clang-format", 0.9), always("C or C++ files present", 0.5))},
	}
	linterRules = []toolRule{
		{"golangci-lint", "golangci-lint", "go", "golangci-lint", []string{"golangci-lint", "run", "./..."}, ifAnyFile(0.95, ".golangci.yml", ".golangci.yaml", ".golangci.toml")},
		{"go-vet", "go vet", "go", "go", []string{"go", "vet", "./..."}, always("Go module present", 0.85)},
		{"biome-lint", "Biome", "javascript", "biome", []string{"biome", "lint", "$FILE"}, ifAnyFile(0.95, "biome.json", "biome.jsonc")},
		{"eslint", "ESLint", "javascript", "eslint", []string{"eslint", "$FILE"},
			anyOf(ifAnyFile(0.9, ".eslintrc", ".eslintrc.json", ".eslintrc.js", ".eslintrc.yml", "eslint.config.js", "eslint.config.mjs"), ifContains("package.json", `"eslint"`, 0.8))},
		{"ruff", "Ruff", "python", "ruff", []string{"ruff", "check", "$FILE"},
			anyOf(ifAnyFile(0.95, "ruff.toml", ".ruff.toml"), ifContains("pyproject.toml", "[tool.ruff", 0.95), always("Python files present", 0.6))},
		{"flake8", "Flake8", "python", "flake8", []string{"flake8", "$FILE"}, anyOf(ifFile(".flake8", 0.9), ifContains("setup.cfg", "[flake8", 0.9))},
		{"rubocop", "RuboCop", "ruby", "rubocop", []string{"rubocop", "$FILE"}, anyOf(ifFile(".rubocop.yml", 0.9), always("Ruby files present", 0.5))},
		{"clippy", "Clippy", "rust", "cargo", []string{"cargo", "clippy"}, ifFile("Cargo.toml", 0.9)},
	}
	lspRules = []toolRule{
		{"gopls", "gopls", "go", "gopls", []string{"gopls"}, always("Go files present", 0.95)},
		{"typescript-language-server", "TypeScript language server", "javascript", "typescript-language-server", []string{"typescript-language-server", "--stdio"}, always("JavaScript or TypeScript files present", 0.9)},
		{"pyright", "Pyright", "python", "pyright-langserver", []string{"pyright-langserver", "--stdio"}, always("Python files present", 0.85)},
		{"pylsp", "Python LSP server", "python", "pylsp", []string{"pylsp"}, always("Python files present", 0.7)},
		{"rust-analyzer", "rust-analyzer", "rust", "rust-analyzer", []string{"rust-analyzer"}, always("Rust files present", 0.95)},
		{"clangd", "clangd", "c", "clangd", []string{"clangd"}, always("C or C++ files present", 0.9)},
		{"jdtls", "Eclipse JDT language server", "java", "jdtls", []string{"jdtls"}, always("Java files present", 0.85)},
		{"ruby-lsp", "Ruby LSP", "ruby", "ruby-lsp", []string{"ruby-lsp"}, always("Ruby files present", 0.8)},
		{"solargraph", "Solargraph", "ruby", "solargraph", []string{"solargraph", "stdio"}, always("Ruby files present", 0.6)},
	}
	testRules = []toolRule{
		{"go-test", "go test", "go", "go", []string{"go", "test", "./..."}, always("go.mod present", 0.95)},
		{"vitest", "Vitest", "javascript", "npx", []string{"npx", "vitest", "run", "$FILE"}, anyOf(ifAnyFile(0.95, "vitest.config.ts", "vitest.config.js"), ifContains("package.json", `"vitest"`, 0.9))},
		{"jest", "Jest", "javascript", "npx", []string{"npx", "jest", "$FILE"}, anyOf(ifAnyFile(0.95, "jest.config.js", "jest.config.ts"), ifContains("package.json", `"jest"`, 0.9))},
		{"mocha", "Mocha", "javascript", "npx", []string{"npx", "mocha", "$FILE"}, anyOf(ifAnyFile(0.9, ".mocharc.yml", ".mocharc.json"), ifContains("package.json", `"mocha"`, 0.85))},
		{"bun-test", "bun test", "javascript", "bun", []string{"bun", "test", "$FILE"}, ifAnyFile(0.85, "bunfig.toml", "bun.lockb")},
		{"node-test", "node --test", "javascript", "node", []string{"node", "--test", "$FILE"}, ifFile("package.json", 0.5)},
		{"pytest", "pytest", "python", "pytest", []string{"pytest", "$FILE"},
			anyOf(ifAnyFile(0.95, "pytest.ini", "conftest.py"), ifContains("pyproject.toml", "[tool.pytest", 0.95), ifContains("requirements.txt", "pytest", 0.85), ifContains("tox.ini", "pytest", 0.8))},
		{"unittest", "unittest", "python", "python3", []string{"python3", "-m", "unittest", "$FILE"}, always("Python files present", 0.6)},
		{"rspec", "RSpec", "ruby", "rspec", []string{"bundle", "exec", "rspec", "$FILE"}, anyOf(ifFile(".rspec", 0.95), ifContains("Gemfile", "rspec", 0.9))},
		{"minitest", "Minitest", "ruby", "ruby", []string{"bundle", "exec", "rake", "test"}, ifFile("Gemfile", 0.6)},
		{"cargo-test", "cargo test", "rust", "cargo", []string{"cargo", "test"}, ifFile("Cargo.toml", 0.95)},
		{"gradle", "Gradle", "java", "gradle", []string{"gradle", "test"}, ifAnyFile(0.95, "build.gradle", "build.gradle.kts")},
		{"maven", "Maven", "java", "mvn", []string{"mvn", "test"}, ifFile("pom.xml", 0.9)},
	}
)

// toolLanguage maps detected languages onto the language keys of rules.
func toolLanguage(lang string) string {
	switch lang {
	case "typescript", "javascript", "vue", "svelte":
		return "javascript"
	case "cpp", "c", "objective-c":
		return "c"
	case "kotlin", "java":
		return "java"
	}
	return lang
}

// pickTools applies rules in priority order: the first applicable rule
// per language is the choice, the rest are alternatives.
func pickTools(rules []toolRule, facts projectFacts, langs map[string]bool, lookPath func(string) bool) (chosen, alts []*librarianv1.Tool) {
	taken := map[string]bool{}
	for _, r := range rules {
		if !langs[r.language] {
			continue
		}
		ok, conf, reason := r.when(facts)
		if !ok {
			continue
		}
		t := &librarianv1.Tool{Id: r.id, Name: r.name, Language: r.language, Command: r.command,
			Confidence: conf, Reason: reason, Installed: lookPath(r.program)}
		if taken[r.language] {
			alts = append(alts, t)
			continue
		}
		taken[r.language] = true
		chosen = append(chosen, t)
	}
	return chosen, alts
}

// discover detects the tools of a project.
func discover(facts projectFacts, lookPath func(string) bool) *librarianv1.DiscoverToolsResponse {
	langs := map[string]bool{}
	for l := range facts.languages {
		langs[toolLanguage(l)] = true
	}
	if facts.has("go.mod") {
		langs["go"] = true
	}
	if facts.has("package.json") {
		langs["javascript"] = true
	}
	if facts.has("pyproject.toml") || facts.has("setup.py") || facts.has("requirements.txt") {
		langs["python"] = true
	}
	if facts.has("Cargo.toml") {
		langs["rust"] = true
	}
	if facts.has("Gemfile") {
		langs["ruby"] = true
	}
	resp := &librarianv1.DiscoverToolsResponse{}
	var alts []*librarianv1.Tool
	for _, cat := range []struct {
		rules []toolRule
		out   *[]*librarianv1.Tool
	}{{formatterRules, &resp.Formatters}, {linterRules, &resp.Linters}, {lspRules, &resp.LanguageServers}, {testRules, &resp.TestFrameworks}} {
		chosen, a := pickTools(cat.rules, facts, langs, lookPath)
		*cat.out = chosen
		alts = append(alts, a...)
	}
	resp.Alternatives = alts
	for _, list := range [][]*librarianv1.Tool{resp.Formatters, resp.Linters, resp.LanguageServers, resp.TestFrameworks} {
		for _, t := range list {
			if !t.GetInstalled() {
				resp.Warnings = append(resp.Warnings, t.GetName()+" ("+t.GetId()+") is not installed on the librarian's PATH")
			}
		}
	}
	if len(langs) == 0 {
		resp.Warnings = append(resp.Warnings, "no source files of a known language were found")
	}
	return resp
}

// toolCache holds each repository's last answer with the fingerprint of
// the configuration it was computed from.
type toolCache struct {
	mu      sync.Mutex
	entries map[string]toolCacheEntry
}

type toolCacheEntry struct {
	fingerprint string
	resp        *librarianv1.DiscoverToolsResponse
}

// DiscoverTools detects a repository's formatter, linter, language server
// and test framework per language (E-19..E-22).
func (s *Service) DiscoverTools(ctx context.Context, req *librarianv1.DiscoverToolsRequest) (*librarianv1.DiscoverToolsResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	repoID, err := parseName(req.GetRepository(), "repository")
	if err != nil {
		return nil, err
	}
	r, err := s.store.getRepo(ctx, id.TenantID, repoID)
	if err != nil {
		return nil, toStatus(ctx, s.log, "discover tools", err)
	}
	root, problem := s.checkRoot(r.Path)
	if problem != "" {
		return nil, status.Error(codes.FailedPrecondition, "repository path: "+problem)
	}
	facts, fp := readFacts(root)
	key := id.TenantID + "/" + repoID
	s.tools.mu.Lock()
	e, ok := s.tools.entries[key]
	s.tools.mu.Unlock()
	if ok && e.fingerprint == fp && !req.GetRefresh() {
		out := proto.Clone(e.resp).(*librarianv1.DiscoverToolsResponse)
		out.Cached = true
		return out, nil
	}
	resp := discover(facts, func(p string) bool { _, err := exec.LookPath(p); return err == nil })
	s.tools.mu.Lock()
	s.tools.entries[key] = toolCacheEntry{fingerprint: fp, resp: proto.Clone(resp).(*librarianv1.DiscoverToolsResponse)}
	s.tools.mu.Unlock()
	return resp, nil
}

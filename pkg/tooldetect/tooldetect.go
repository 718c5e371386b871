// Package tooldetect finds a project's formatter, linter, language server
// and test framework per language (spec E-19..E-22) from its configuration
// files and the languages in its tree, in the spec's priority orders. The
// Librarian answers DiscoverTools with it; the worker's Inspector runs the
// linters and formatter checks it picks.
package tooldetect

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ConfigFiles are the files whose presence or content decides which tools
// apply; a change to any of them invalidates a repository's cached answer.
var ConfigFiles = []string{
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

// SkippedDirs are never looked into, besides hidden directories.
var SkippedDirs = map[string]bool{
	"vendor":       true,
	"node_modules": true,
}

// languages maps file extensions to language names.
var languages = map[string]string{
	".go": "go", ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
	".cjs": "javascript", ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript",
	".java": "java", ".kt": "kotlin", ".kts": "kotlin", ".scala": "scala", ".rs": "rust",
	".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp",
	".cs": "csharp", ".rb": "ruby", ".php": "php", ".swift": "swift", ".m": "objective-c",
	".sh": "shell", ".bash": "shell", ".zsh": "shell", ".ps1": "powershell", ".lua": "lua",
	".pl": "perl", ".r": "r", ".dart": "dart", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang",
	".hs": "haskell", ".ml": "ocaml", ".clj": "clojure", ".sql": "sql", ".proto": "protobuf",
	".md": "markdown", ".markdown": "markdown", ".rst": "restructuredtext", ".txt": "text",
	".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".xml": "xml",
	".html": "html", ".htm": "html", ".css": "css", ".scss": "scss", ".vue": "vue", ".svelte": "svelte",
	".tf": "terraform", ".graphql": "graphql", ".gradle": "gradle", ".mod": "go-mod", ".sum": "go-sum",
}

// languageNames maps well-known file names without a telling extension.
var languageNames = map[string]string{
	"makefile": "make", "gnumakefile": "make", "dockerfile": "dockerfile", "containerfile": "dockerfile",
	"cmakelists.txt": "cmake", "jenkinsfile": "groovy", "rakefile": "ruby", "gemfile": "ruby",
}

// Language names a file's language from its name, "text" when unknown.
func Language(rel string) string {
	base := strings.ToLower(path.Base(rel))
	if l, ok := languageNames[base]; ok {
		return l
	}
	if l, ok := languages[path.Ext(base)]; ok {
		return l
	}
	return "text"
}

// Facts is what detection looks at.
type Facts struct {
	files     map[string]string // config file name -> content (bounded)
	languages map[string]bool   // languages with files in the tree
}

// NewFacts makes facts from configuration files (name to content) and the
// languages present.
func NewFacts(files map[string]string, languages ...string) Facts {
	f := Facts{files: map[string]string{}, languages: map[string]bool{}}
	for k, v := range files {
		f.files[k] = v
	}
	for _, l := range languages {
		f.languages[l] = true
	}
	return f
}

func (p Facts) has(name string) bool { _, ok := p.files[name]; return ok }

func (p Facts) contains(name, needle string) bool {
	return strings.Contains(p.files[name], needle)
}

// ReadFacts reads root's configuration files and samples the languages of
// its tree (a bounded walk). fingerprint changes whenever anything
// detection reads does.
func ReadFacts(root string) (f Facts, fingerprint string) {
	f = NewFacts(nil)
	h := sha256.New()
	dir, err := os.OpenRoot(root)
	if err == nil {
		defer dir.Close()
	}
	for _, name := range ConfigFiles {
		if dir == nil {
			break
		}
		data, err := readConfig(dir, name)
		if err != nil {
			continue
		}
		f.files[name] = string(data)
		h.Write([]byte(name + "\x00"))
		h.Write(data)
		h.Write([]byte{0})
	}
	seen := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || seen > maxWalk {
			return fs.SkipDir
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || SkippedDirs[d.Name()]) {
				return fs.SkipDir
			}
			return nil
		}
		seen++
		if l := Language(d.Name()); l != "text" {
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

// readConfig reads at most maxConfigRead bytes of the regular file name
// in dir. The tree may be a task's, written by commands still running: a
// link out of it (to /dev/zero, say) is refused by the root, and a pipe or
// device is not read, nor waited on.
func readConfig(dir *os.Root, name string) ([]byte, error) {
	f, err := dir.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.Join(err, errors.New("not a regular file"))
	}
	return io.ReadAll(io.LimitReader(f, maxConfigRead))
}

// maxWalk bounds the files ReadFacts looks at.
const maxWalk = 20000

// rule is one candidate tool: it applies when when() holds; rules of a
// language and category are listed in the spec's priority order.
type rule struct {
	id, name, language string
	program            string
	command            []string
	check              []string
	when               func(Facts) (bool, float64, string)
}

func always(reason string, conf float64) func(Facts) (bool, float64, string) {
	return func(Facts) (bool, float64, string) { return true, conf, reason }
}

func ifFile(name string, conf float64) func(Facts) (bool, float64, string) {
	return func(p Facts) (bool, float64, string) { return p.has(name), conf, name + " present" }
}

func ifAnyFile(conf float64, names ...string) func(Facts) (bool, float64, string) {
	return func(p Facts) (bool, float64, string) {
		for _, n := range names {
			if p.has(n) {
				return true, conf, n + " present"
			}
		}
		return false, 0, ""
	}
}

func ifContains(file, needle string, conf float64) func(Facts) (bool, float64, string) {
	return func(p Facts) (bool, float64, string) {
		return p.contains(file, needle), conf, file + " mentions " + strings.Trim(needle, `"[]`)
	}
}

func allOf(fns ...func(Facts) (bool, float64, string)) func(Facts) (bool, float64, string) {
	return func(p Facts) (bool, float64, string) {
		var conf float64
		var reasons []string
		for i, fn := range fns {
			ok, c, r := fn(p)
			if !ok {
				return false, 0, ""
			}
			if i == 0 || c < conf {
				conf = c
			}
			reasons = append(reasons, r)
		}
		return true, conf, strings.Join(reasons, ", ")
	}
}

func anyOf(fns ...func(Facts) (bool, float64, string)) func(Facts) (bool, float64, string) {
	return func(p Facts) (bool, float64, string) {
		for _, fn := range fns {
			if ok, c, r := fn(p); ok {
				return ok, c, r
			}
		}
		return false, 0, ""
	}
}

var (
	formatterRules = []rule{
		{"goimports", "goimports", "go", "goimports", []string{"goimports", "-w", "$FILE"}, []string{"goimports", "-l", "."}, always("Go files present; goimports also fixes imports", 0.9)},
		{"gofmt", "gofmt", "go", "gofmt", []string{"gofmt", "-w", "$FILE"}, []string{"gofmt", "-l", "."}, always("Go files present", 0.8)},
		{"biome", "Biome", "javascript", "biome", []string{"biome", "format", "--write", "$FILE"}, []string{"biome", "format", "."}, ifAnyFile(0.95, "biome.json", "biome.jsonc")},
		{"prettier", "Prettier", "javascript", "prettier", []string{"prettier", "--write", "$FILE"}, []string{"prettier", "--check", "."},
			anyOf(ifAnyFile(0.9, ".prettierrc", ".prettierrc.json", ".prettierrc.yml", ".prettierrc.js", "prettier.config.js"), ifContains("package.json", `"prettier"`, 0.85), always("JavaScript or TypeScript files present", 0.5))},
		{"ruff-format", "Ruff", "python", "ruff", []string{"ruff", "format", "$FILE"}, []string{"ruff", "format", "--check", "."},
			anyOf(ifAnyFile(0.95, "ruff.toml", ".ruff.toml"), ifContains("pyproject.toml", "[tool.ruff", 0.95))},
		{"black", "Black", "python", "black", []string{"black", "$FILE"}, []string{"black", "--check", "--quiet", "."},
			anyOf(ifContains("pyproject.toml", "[tool.black", 0.9), always("Python files present", 0.6))},
		{"autopep8", "autopep8", "python", "autopep8", []string{"autopep8", "--in-place", "$FILE"}, []string{"autopep8", "--diff", "--recursive", "--exit-code", "."}, always("Python files present", 0.4)},
		{"standardrb", "Standard Ruby", "ruby", "standardrb", []string{"standardrb", "--fix", "$FILE"}, []string{"standardrb"},
			anyOf(ifFile(".standard.yml", 0.9), ifContains("Gemfile", "standard", 0.85))},
		{"rubocop-format", "RuboCop", "ruby", "rubocop", []string{"rubocop", "-a", "$FILE"}, nil, anyOf(ifFile(".rubocop.yml", 0.85), always("Ruby files present", 0.5))},
		{"rustfmt", "rustfmt", "rust", "rustfmt", []string{"rustfmt", "$FILE"}, []string{"cargo", "fmt", "--check"}, always("Rust files present", 0.9)},
		{"clang-format", "clang-format", "c", "clang-format", []string{"clang-format", "-i", "$FILE"}, nil, anyOf(ifFile(".clang-format", 0.9), always("C or C++ files present", 0.5))},
	}
	linterRules = []rule{
		{"golangci-lint", "golangci-lint", "go", "golangci-lint", []string{"golangci-lint", "run", "./..."}, []string{"golangci-lint", "run", "./..."},
			allOf(ifFile("go.mod", 0.95), ifAnyFile(0.95, ".golangci.yml", ".golangci.yaml", ".golangci.toml"))},
		{"go-vet", "go vet", "go", "go", []string{"go", "vet", "./..."}, []string{"go", "vet", "./..."}, ifFile("go.mod", 0.85)},
		{"biome-lint", "Biome", "javascript", "biome", []string{"biome", "lint", "$FILE"}, []string{"biome", "lint", "."}, ifAnyFile(0.95, "biome.json", "biome.jsonc")},
		{"eslint", "ESLint", "javascript", "eslint", []string{"eslint", "$FILE"}, []string{"eslint", "."},
			anyOf(ifAnyFile(0.9, ".eslintrc", ".eslintrc.json", ".eslintrc.js", ".eslintrc.yml", "eslint.config.js", "eslint.config.mjs"), ifContains("package.json", `"eslint"`, 0.8))},
		{"ruff", "Ruff", "python", "ruff", []string{"ruff", "check", "$FILE"}, []string{"ruff", "check", "."},
			anyOf(ifAnyFile(0.95, "ruff.toml", ".ruff.toml"), ifContains("pyproject.toml", "[tool.ruff", 0.95), always("Python files present", 0.6))},
		{"flake8", "Flake8", "python", "flake8", []string{"flake8", "$FILE"}, []string{"flake8", "."},
			anyOf(ifFile(".flake8", 0.9), ifContains("setup.cfg", "[flake8", 0.9), ifContains("tox.ini", "[flake8", 0.9))},
		{"rubocop", "RuboCop", "ruby", "rubocop", []string{"rubocop", "$FILE"}, []string{"rubocop"}, anyOf(ifFile(".rubocop.yml", 0.9), always("Ruby files present", 0.5))},
		{"clippy", "Clippy", "rust", "cargo", []string{"cargo", "clippy"}, []string{"cargo", "clippy"}, ifFile("Cargo.toml", 0.9)},
	}
	lspRules = []rule{
		{"gopls", "gopls", "go", "gopls", []string{"gopls"}, nil, always("Go files present", 0.95)},
		{"typescript-language-server", "TypeScript language server", "javascript", "typescript-language-server", []string{"typescript-language-server", "--stdio"}, nil, always("JavaScript or TypeScript files present", 0.9)},
		{"pyright", "Pyright", "python", "pyright-langserver", []string{"pyright-langserver", "--stdio"}, nil, always("Python files present", 0.85)},
		{"pylsp", "Python LSP server", "python", "pylsp", []string{"pylsp"}, nil, always("Python files present", 0.7)},
		{"rust-analyzer", "rust-analyzer", "rust", "rust-analyzer", []string{"rust-analyzer"}, nil, always("Rust files present", 0.95)},
		{"clangd", "clangd", "c", "clangd", []string{"clangd"}, nil, always("C or C++ files present", 0.9)},
		{"jdtls", "Eclipse JDT language server", "java", "jdtls", []string{"jdtls"}, nil, always("Java files present", 0.85)},
		{"ruby-lsp", "Ruby LSP", "ruby", "ruby-lsp", []string{"ruby-lsp"}, nil, always("Ruby files present", 0.8)},
		{"solargraph", "Solargraph", "ruby", "solargraph", []string{"solargraph", "stdio"}, nil, always("Ruby files present", 0.6)},
	}
	testRules = []rule{
		{"go-test", "go test", "go", "go", []string{"go", "test", "./..."}, nil, ifFile("go.mod", 0.95)},
		{"vitest", "Vitest", "javascript", "npx", []string{"npx", "vitest", "run", "$FILE"}, nil, anyOf(ifAnyFile(0.95, "vitest.config.ts", "vitest.config.js"), ifContains("package.json", `"vitest"`, 0.9))},
		{"jest", "Jest", "javascript", "npx", []string{"npx", "jest", "$FILE"}, nil, anyOf(ifAnyFile(0.95, "jest.config.js", "jest.config.ts"), ifContains("package.json", `"jest"`, 0.9))},
		{"mocha", "Mocha", "javascript", "npx", []string{"npx", "mocha", "$FILE"}, nil, anyOf(ifAnyFile(0.9, ".mocharc.yml", ".mocharc.json"), ifContains("package.json", `"mocha"`, 0.85))},
		{"bun-test", "bun test", "javascript", "bun", []string{"bun", "test", "$FILE"}, nil, ifAnyFile(0.85, "bunfig.toml", "bun.lockb")},
		{"node-test", "node --test", "javascript", "node", []string{"node", "--test", "$FILE"}, nil, ifFile("package.json", 0.5)},
		{"pytest", "pytest", "python", "pytest", []string{"pytest", "$FILE"}, nil,
			anyOf(ifAnyFile(0.95, "pytest.ini", "conftest.py"), ifContains("pyproject.toml", "[tool.pytest", 0.95), ifContains("requirements.txt", "pytest", 0.85), ifContains("tox.ini", "pytest", 0.8))},
		{"unittest", "unittest", "python", "python3", []string{"python3", "-m", "unittest", "$FILE"}, nil, always("Python files present", 0.6)},
		{"rspec", "RSpec", "ruby", "rspec", []string{"bundle", "exec", "rspec", "$FILE"}, nil, anyOf(ifFile(".rspec", 0.95), ifContains("Gemfile", "rspec", 0.9))},
		{"minitest", "Minitest", "ruby", "ruby", []string{"bundle", "exec", "rake", "test"}, nil, ifFile("Gemfile", 0.6)},
		{"cargo-test", "cargo test", "rust", "cargo", []string{"cargo", "test"}, nil, ifFile("Cargo.toml", 0.95)},
		{"gradle", "Gradle", "java", "gradle", []string{"gradle", "test"}, nil, ifAnyFile(0.95, "build.gradle", "build.gradle.kts")},
		{"maven", "Maven", "java", "mvn", []string{"mvn", "test"}, nil, ifFile("pom.xml", 0.9)},
	}
)

// Categories of tools.
const (
	Formatter      = "formatter"
	Linter         = "linter"
	LanguageServer = "language_server"
	TestFramework  = "test_framework"
)

// Tool is one detected tool.
type Tool struct {
	ID, Name, Language string
	Category           string
	// Program is the executable the tool needs.
	Program string
	// Command runs the tool ($FILE stands for a file, where it takes one).
	Command []string
	// Check is the read-only form run over the whole project: a formatter
	// reporting what it would change, a linter over every file. Nil when the
	// tool has none.
	Check      []string
	Confidence float64
	Reason     string
	Installed  bool
}

// Result is what Discover found: per category, the first applicable tool of
// each language; the other applicable ones are alternatives.
type Result struct {
	Formatters, Linters, LanguageServers, TestFrameworks []Tool
	Alternatives                                         []Tool
	// Languages are the rule languages present.
	Languages []string
}

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

// pick applies rules in priority order: the first applicable rule per
// language is the choice, the rest are alternatives.
func pick(rules []rule, category string, facts Facts, langs map[string]bool, lookPath func(string) bool) (chosen, alts []Tool) {
	taken := map[string]bool{}
	for _, r := range rules {
		if !langs[r.language] {
			continue
		}
		ok, conf, reason := r.when(facts)
		if !ok {
			continue
		}
		t := Tool{ID: r.id, Name: r.name, Language: r.language, Category: category, Program: r.program, Command: r.command,
			Check: r.check, Confidence: conf, Reason: reason, Installed: lookPath(r.program)}
		if taken[r.language] {
			alts = append(alts, t)
			continue
		}
		taken[r.language] = true
		chosen = append(chosen, t)
	}
	return chosen, alts
}

// Discover detects the tools of a project; lookPath says whether a
// program is installed.
func Discover(facts Facts, lookPath func(program string) bool) Result {
	langs := map[string]bool{}
	for l := range facts.languages {
		langs[toolLanguage(l)] = true
	}
	for file, lang := range map[string]string{"go.mod": "go", "package.json": "javascript", "pyproject.toml": "python",
		"setup.py": "python", "requirements.txt": "python", "Cargo.toml": "rust", "Gemfile": "ruby"} {
		if facts.has(file) {
			langs[lang] = true
		}
	}
	var res Result
	for _, cat := range []struct {
		rules    []rule
		category string
		out      *[]Tool
	}{{formatterRules, Formatter, &res.Formatters}, {linterRules, Linter, &res.Linters},
		{lspRules, LanguageServer, &res.LanguageServers}, {testRules, TestFramework, &res.TestFrameworks}} {
		chosen, a := pick(cat.rules, cat.category, facts, langs, lookPath)
		*cat.out = chosen
		res.Alternatives = append(res.Alternatives, a...)
	}
	for l := range langs {
		res.Languages = append(res.Languages, l)
	}
	sort.Strings(res.Languages)
	return res
}

// Runnable is, per language, the first tool of the category (the choice,
// then the alternatives, in priority order) that is installed and has a
// project-wide check.
func (r Result) Runnable(category string) []Tool {
	var all []Tool
	switch category {
	case Formatter:
		all = r.Formatters
	case Linter:
		all = r.Linters
	case LanguageServer:
		all = r.LanguageServers
	case TestFramework:
		all = r.TestFrameworks
	}
	for _, t := range r.Alternatives {
		if t.Category == category {
			all = append(all, t)
		}
	}
	taken := map[string]bool{}
	var out []Tool
	for _, t := range all {
		if taken[t.Language] || !t.Installed || t.Check == nil {
			continue
		}
		taken[t.Language] = true
		out = append(out, t)
	}
	return out
}

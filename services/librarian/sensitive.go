package librarian

import (
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// privateKeyPattern finds a private key block, which spans lines.
var privateKeyPattern = regexp.MustCompile(`(?i)-----BEGIN\s+(?:RSA|DSA|EC|OPENSSH|PGP)?\s*PRIVATE KEY-----[\s\S]*?(?:-----END\s+(?:RSA|DSA|EC|OPENSSH|PGP)?\s*PRIVATE KEY-----|\z)`)

// secretPatterns find secrets within one line; each whole match is
// replaced by redacted before the text is stored or embedded.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(?:aws_access_key_id|aws_secret)['":\s]*[=:]\s*['"]?[A-Z0-9]{16,}`),
	regexp.MustCompile(`ghp_[a-zA-Z0-9]{36}`),
	regexp.MustCompile(`sk-ant-[a-zA-Z0-9\-]{80,}`),
	regexp.MustCompile(`sk-[a-zA-Z0-9]{48}`),
	regexp.MustCompile(`(?i)(?:mongodb|postgres|mysql|redis)(?:\+srv)?://[^\s:/@]+:[^\s@]+@`),
	regexp.MustCompile(`(?i)(?:api[_-]?key|apikey)['":\s]*[=:]\s*['"]?[a-zA-Z0-9_\-]{20,}`),
	regexp.MustCompile(`(?i)(?:secret|password|passwd|pwd)['":\s]*[=:]\s*['"][^\s'"]{8,}['"]?`),
	regexp.MustCompile(`(?i)(?:bearer|token)['":\s]*[=:]\s*['"]?[a-zA-Z0-9_\-\.]{20,}`),
	regexp.MustCompile(`(?i)(?:key|secret|token|credential)['":\s]*[=:]\s*['"]?[A-Za-z0-9+/=]{40,}`),
}

// redacted replaces a secret.
const redacted = "[REDACTED]"

// secretHints are cheap substrings one of which every line pattern needs;
// only lines holding one, and '=' or ':', are matched against the patterns.
var secretHints = []string{"ghp_", "sk-", "://", "key", "KEY", "Key",
	"secret", "SECRET", "Secret", "passw", "PASSW", "Passw", "pwd", "PWD",
	"token", "TOKEN", "Token", "bearer", "Bearer", "BEARER", "credential", "CREDENTIAL", "Credential", "aws_", "AWS_"}

func hinted(line string) bool {
	if !strings.ContainsAny(line, "=:") {
		return false
	}
	for _, h := range secretHints {
		if strings.Contains(line, h) {
			return true
		}
	}
	return false
}

// redact replaces every secret in text, keeping its line structure so
// that line numbers stay true.
func redact(text string) string {
	if strings.Contains(text, "PRIVATE KEY") {
		text = privateKeyPattern.ReplaceAllStringFunc(text, func(m string) string {
			return redacted + strings.Repeat("\n", strings.Count(m, "\n"))
		})
	}
	var b strings.Builder
	changed := false
	start := 0
	for start <= len(text) {
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		line := text[start:end]
		if hinted(line) {
			orig := line
			for _, re := range secretPatterns {
				line = re.ReplaceAllString(line, redacted)
			}
			if line != orig && !changed {
				changed = true
				b.Grow(len(text))
				b.WriteString(text[:start])
			}
		}
		if changed {
			b.WriteString(line)
			if end < len(text) {
				b.WriteByte('\n')
			}
		}
		start = end + 1
	}
	if !changed {
		return text
	}
	return b.String()
}

// defaultIgnore is the built-in ignore list: dependency trees, build
// output, lock files and minified bundles.
var defaultIgnore = []string{
	"vendor/", "node_modules/", "dist/", "build/", "target/", "__pycache__/", ".venv/",
	"package-lock.json", "yarn.lock", "pnpm-lock.yaml", "go.sum", "Cargo.lock", "poetry.lock",
	"Gemfile.lock", "composer.lock", "*.min.js", "*.min.css", "*.map", "*.pb.go", "*_pb2.py",
}

// ignoreRules match paths relative to a repository root, in the
// .gitignore style: a pattern without a slash matches a name at any depth,
// one with a slash matches from the root, a trailing slash matches
// directories only, "**" matches any directories, and "!" re-includes.
type ignoreRules struct {
	rules []ignoreRule
}

type ignoreRule struct {
	pattern  string
	anchored bool
	dirOnly  bool
	negate   bool
}

// add parses one pattern line.
func (r *ignoreRules) add(line string) {
	line = strings.TrimRight(line, " \t\r")
	if line == "" || strings.HasPrefix(line, "#") {
		return
	}
	var rule ignoreRule
	if strings.HasPrefix(line, "!") {
		rule.negate, line = true, line[1:]
	}
	if strings.HasSuffix(line, "/") {
		rule.dirOnly, line = true, strings.TrimSuffix(line, "/")
	}
	if strings.Contains(line, "/") {
		rule.anchored, line = true, strings.TrimPrefix(line, "/")
	}
	if line == "" {
		return
	}
	rule.pattern = line
	r.rules = append(r.rules, rule)
}

// maxIgnoreBytes and maxIgnoreRules bound what a repository's ignore files
// add: every path indexed or watched is matched against every rule.
const (
	maxIgnoreBytes = 1 << 20
	maxIgnoreRules = 10_000
)

// loadGitignore adds the patterns of the root's .gitignore and
// .git/info/exclude, when present: read as go.mod is (readRepoFile), and
// no more than maxIgnoreRules rules in all.
func (r *ignoreRules) loadGitignore(root string) {
	for _, p := range []string{".gitignore", filepath.Join(".git", "info", "exclude")} {
		data, ok := readRepoFile(root, p, maxIgnoreBytes)
		if !ok {
			continue
		}
		for line := range strings.Lines(string(data)) {
			if len(r.rules) >= maxIgnoreRules {
				return
			}
			r.add(strings.TrimRight(line, "\r\n"))
		}
	}
}

// match reports whether rel (slash-separated) is ignored; the last
// matching rule wins.
func (r ignoreRules) match(rel string, isDir bool) bool {
	ignored := false
	for _, rule := range r.rules {
		if rule.dirOnly && !isDir {
			continue
		}
		if rule.matches(rel) {
			ignored = !rule.negate
		}
	}
	return ignored
}

func (rule ignoreRule) matches(rel string) bool {
	if !rule.anchored {
		ok, _ := path.Match(rule.pattern, path.Base(rel))
		return ok
	}
	return globMatch(rule.pattern, rel)
}

// globMatch matches a slash-separated path against a pattern in which "*"
// stays within a segment and "**" spans any number of segments.
func globMatch(pattern, name string) bool {
	return globParts(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func globParts(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if globParts(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

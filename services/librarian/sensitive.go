package librarian

import (
	"path"
	"path/filepath"
	"strings"
)

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

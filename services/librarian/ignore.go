package librarian

import (
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// ignoreRules decide which paths of a repository are not indexed, with
// .gitignore semantics: the configured patterns, then .git/info/exclude
// and the root's .gitignore, then the .gitignore of every directory on a
// path's way, deeper files taking precedence; within them the last matching
// pattern wins, "!" re-includes, a pattern without a slash (other than a
// trailing one) matches a name at any depth below its file's directory,
// one with a slash is anchored to that directory, and "**" spans
// directories. Matching is the version-control library's own, so that what
// is indexed agrees with what git ignores.
type ignoreRules struct {
	// rules are the configured and root patterns, in order.
	rules []gitignore.Pattern
	// nested loads and keeps the .gitignore files below the root; nil
	// until loadGitignore names the root.
	nested *nestedIgnores
}

// nestedIgnores caches the patterns of the .gitignore of each directory
// met, read on first use.
type nestedIgnores struct {
	root  string
	mu    sync.Mutex
	dirs  map[string][]gitignore.Pattern
	count int // patterns read from nested files, bounded with the rest
}

// add parses one pattern line of the root (configured patterns and the
// root's ignore files).
func (r *ignoreRules) add(line string) {
	if p, ok := parseIgnoreLine(line, nil); ok {
		r.rules = append(r.rules, p)
	}
}

// parseIgnoreLine parses one line of an ignore file whose directory is
// domain; blank lines and comments give nothing.
func parseIgnoreLine(line string, domain []string) (gitignore.Pattern, bool) {
	line = strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimRight(line, " \t")
	if trimmed == "" || strings.HasPrefix(trimmed, "#") || trimmed == "!" || trimmed == "/" {
		return nil, false
	}
	// "\ " at the end keeps a trailing space, as in git.
	if !strings.HasSuffix(line, "\\ ") {
		line = trimmed
	}
	return gitignore.ParsePattern(line, domain), true
}

// maxIgnoreBytes and maxIgnoreRules bound what a repository's ignore files
// add: every path indexed or watched is matched against every rule.
const (
	maxIgnoreBytes = 1 << 20
	maxIgnoreRules = 10_000
)

// loadGitignore adds the patterns of .git/info/exclude and the root's
// .gitignore, when present, and reads nested .gitignore files on demand:
// all read as go.mod is (readRepoFile, never through a link leading out of
// the repository), and no more than maxIgnoreRules rules in all.
func (r *ignoreRules) loadGitignore(root string) {
	for _, p := range []string{filepath.Join(".git", "info", "exclude"), ".gitignore"} {
		r.rules = append(r.rules, readIgnoreFile(root, p, nil, maxIgnoreRules-len(r.rules))...)
	}
	r.nested = &nestedIgnores{root: root, dirs: map[string][]gitignore.Pattern{}, count: len(r.rules)}
}

// readIgnoreFile reads at most limit patterns of the ignore file rel
// (slash- or OS-separated, relative to root) whose directory is domain.
func readIgnoreFile(root, rel string, domain []string, limit int) []gitignore.Pattern {
	if limit <= 0 {
		return nil
	}
	data, ok := readRepoFile(root, rel, maxIgnoreBytes)
	if !ok {
		return nil
	}
	var out []gitignore.Pattern
	for line := range strings.Lines(string(data)) {
		if len(out) >= limit {
			break
		}
		if p, ok := parseIgnoreLine(line, domain); ok {
			out = append(out, p)
		}
	}
	return out
}

// patterns returns the patterns of dir's .gitignore (dir below the root,
// slash-separated), reading it on first use.
func (n *nestedIgnores) patterns(dir string) []gitignore.Pattern {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ps, ok := n.dirs[dir]; ok {
		return ps
	}
	ps := readIgnoreFile(n.root, path.Join(dir, ".gitignore"), strings.Split(dir, "/"), maxIgnoreRules-n.count)
	n.count += len(ps)
	n.dirs[dir] = ps
	return ps
}

// match reports whether rel (slash-separated, relative to the root) is
// ignored.
func (r ignoreRules) match(rel string, isDir bool) bool {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	ps := r.rules
	if r.nested != nil && len(parts) > 1 {
		ps = append([]gitignore.Pattern(nil), ps...)
		for i := 1; i < len(parts); i++ {
			ps = append(ps, r.nested.patterns(strings.Join(parts[:i], "/"))...)
		}
	}
	return gitignore.NewMatcher(ps).Match(parts, isDir)
}

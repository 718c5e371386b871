package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// gitTimeout bounds one of the worker's own git calls (spec C-26: git 30s).
const gitTimeout = 30 * time.Second

// gitAudit records every git call a task makes: the worker's own, and the
// agent's through the guard on its PATH (spec F-33).
type gitAudit struct {
	mu    sync.Mutex
	calls []string
}

func (a *gitAudit) add(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, s)
}

func (a *gitAudit) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// workspace is a task's checkout of the run's repository.
type workspace struct {
	root  string // the task's temp dir
	dir   string // the checkout, where commands run
	base  string // the starting commit
	git   string // the real git binary
	audit *gitAudit
	log   *slog.Logger
}

// run runs one of the worker's own git commands in the checkout, audited.
func (w *workspace) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.git, args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+w.root,
		"GIT_AUTHOR_NAME=Sylk Engineer", "GIT_AUTHOR_EMAIL=engineer@sylk.invalid",
		"GIT_COMMITTER_NAME=Sylk Engineer", "GIT_COMMITTER_EMAIL=engineer@sylk.invalid")
	out, err := cmd.CombinedOutput()
	w.audit.add("worker: git " + strings.Join(args, " "))
	w.log.InfoContext(ctx, "git", slog.String("args", strings.Join(args, " ")), slog.Bool("ok", err == nil))
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(lastLine(string(out))))
	}
	return string(out), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// openWorkspace clones repo into root/src at base (spec B-27: every task
// starts from the run's starting commit) and installs the git guard.
func openWorkspace(ctx context.Context, log *slog.Logger, root, repo, base string) (*workspace, error) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return nil, errors.New("git is not installed on the worker")
	}
	w := &workspace{root: root, dir: filepath.Join(root, "src"), base: base, git: gitPath, audit: &gitAudit{}, log: log}
	// Clone from the parent directory: the checkout does not exist yet.
	w.dir = root
	if _, err := w.run(ctx, "clone", "--quiet", "--no-checkout", repo, "src"); err != nil {
		return nil, err
	}
	w.dir = filepath.Join(root, "src")
	if _, err := w.run(ctx, "-c", "advice.detachedHead=false", "checkout", "--quiet", base); err != nil {
		return nil, err
	}
	if err := w.installGuard(); err != nil {
		return nil, err
	}
	return w, nil
}

// guardScript is the git an agent's commands see: it refuses push, merge
// (and pull, which merges) and reset --hard (spec F-29..F-32), logs every
// call, and runs the real git otherwise.
const guardScript = `#!/bin/sh
printf '%%s\n' "$*" >> '%s'
hard=0; reset=0
for a in "$@"; do
  case "$a" in
    push|merge|pull) echo "sylk: git $a is not allowed for agents" >&2; exit 1 ;;
    reset) reset=1 ;;
    --hard) hard=1 ;;
  esac
done
if [ $reset = 1 ] && [ $hard = 1 ]; then echo "sylk: git reset --hard is not allowed for agents" >&2; exit 1; fi
exec '%s' "$@"
`

func (w *workspace) guardDir() string { return filepath.Join(w.root, ".bin") }
func (w *workspace) auditFile() string {
	return filepath.Join(w.root, ".git-audit.log")
}

func (w *workspace) installGuard() error {
	if err := os.MkdirAll(w.guardDir(), 0o700); err != nil {
		return err
	}
	script := fmt.Sprintf(guardScript, w.auditFile(), w.git)
	return os.WriteFile(filepath.Join(w.guardDir(), "git"), []byte(script), 0o700)
}

// agentCalls are the git calls the agent's commands made.
func (w *workspace) agentCalls() []string {
	b, err := os.ReadFile(w.auditFile())
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, "agent: git "+l)
		}
	}
	return out
}

// changedFiles lists what the task changed against the starting commit,
// committed or not, including new files.
func (w *workspace) changedFiles(ctx context.Context) ([]string, error) {
	if _, err := w.run(ctx, "add", "-A"); err != nil {
		return nil, err
	}
	out, err := w.run(ctx, "diff", "--cached", "--name-only", w.base)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			files = append(files, l)
		}
	}
	return files, nil
}

// commit records the task's changes with a conventional message (spec
// F-30) and returns the patch from the starting commit.
func (w *workspace) commit(ctx context.Context, message string) (string, error) {
	files, err := w.changedFiles(ctx)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", nil
	}
	if _, err := w.run(ctx, "commit", "--quiet", "--no-verify", "-m", message); err != nil {
		return "", err
	}
	return w.run(ctx, "diff", "--binary", w.base, "HEAD")
}

// conventionalMessage makes a commit subject like "feat(api): add handler".
func conventionalMessage(nodeID, name string) string {
	subject := strings.TrimSpace(name)
	if subject == "" {
		subject = "task " + nodeID
	}
	kind := "feat"
	l := strings.ToLower(subject)
	switch {
	case strings.HasPrefix(l, "fix") || strings.Contains(l, "bug"):
		kind = "fix"
	case strings.HasPrefix(l, "test"):
		kind = "test"
	case strings.HasPrefix(l, "doc"):
		kind = "docs"
	case strings.HasPrefix(l, "refactor"):
		kind = "refactor"
	}
	if len(subject) > 72 {
		subject = subject[:72]
	}
	scope := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, strings.ToLower(nodeID))
	return fmt.Sprintf("%s(%s): %s", kind, scope, subject)
}

// applyEdits writes the node's explicit edits inside the checkout; a path
// that leaves it is refused.
func applyEdits(dir string, edits map[string]string) ([]string, error) {
	var written []string
	for p, content := range edits {
		clean := filepath.Clean(p)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || clean == ".git" || strings.HasPrefix(clean, ".git"+string(filepath.Separator)) {
			return written, fmt.Errorf("edit %q: must be a relative path inside the workspace", p)
		}
		full := filepath.Join(dir, clean)
		// Resolve the parent: a symlink inside the checkout must not lead out.
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return written, fmt.Errorf("edit %q: %w", p, err)
		}
		parent, err := filepath.EvalSymlinks(filepath.Dir(full))
		if err != nil {
			return written, fmt.Errorf("edit %q: %w", p, err)
		}
		root, _ := filepath.EvalSymlinks(dir)
		if rel, err := filepath.Rel(root, parent); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return written, fmt.Errorf("edit %q: resolves outside the workspace", p)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return written, fmt.Errorf("edit %q: %w", p, err)
		}
		written = append(written, clean)
	}
	return written, nil
}

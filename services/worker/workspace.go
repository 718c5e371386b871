package worker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"sylk.dev/sylk/pkg/toolexec"
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
	env   []string
	audit *gitAudit
	log   *slog.Logger
	// gitDir is the checkout's .git as cloned, and pristine the content
	// then of its guardedGitFiles: the task's commands run as the worker's
	// user and may change both, so the worker's own git calls check the
	// one and restore the other first (see secureGit).
	gitDir   os.FileInfo
	pristine map[string][]byte
	// gitHeld keeps that .git open while the workspace lives: a directory
	// the task makes in its place can then never get its inode number, and
	// pass for it.
	gitHeld *os.File
	// hidden are the files left out of the patch by ignore rules the task
	// wrote (see addIgnoredByTask).
	hidden []string
	// start starts the worker's own git once the checkout exists: confined
	// to the task directory like the task's commands, so that a checkout
	// changed under it (a process the task left racing it) leads it
	// neither into another task's directory nor to run a program outside
	// this one.
	start func(*exec.Cmd) error
}

// run runs one of the worker's own git commands in the checkout, audited,
// with the environment stripped of secrets, no global configuration (the
// task may write $HOME/.gitconfig) and, after the clone, the checkout's
// configuration as cloned.
func (w *workspace) run(ctx context.Context, args ...string) (string, error) {
	return w.runInput(ctx, "", args...)
}

// runInput is run with stdin.
func (w *workspace) runInput(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	full := args
	env := append(slices.Clip(w.env), "HOME="+w.root,
		"GIT_AUTHOR_NAME=Sylk Engineer", "GIT_AUTHOR_EMAIL=engineer@sylk.invalid",
		"GIT_COMMITTER_NAME=Sylk Engineer", "GIT_COMMITTER_EMAIL=engineer@sylk.invalid")
	if w.gitDir != nil {
		if err := w.secureGit(); err != nil {
			w.audit.add("worker: refused git " + strings.Join(args, " ") + ": " + err.Error())
			return "", err
		}
		// No program the task left in the checkout runs as the worker, and
		// no ignore file outside the checkout hides a file from it.
		full = slices.Concat(toolexec.SafeGitArgs, []string{"-c", "core.excludesFile=/dev/null", "-c", "core.quotePath=false",
			"-c", "core.commitGraph=false"}, args)
		// The git directory is named outright, so that .git/commondir (a
		// file the task may write) cannot send git to another one, with
		// another configuration.
		gd := filepath.Join(w.dir, ".git")
		// Nor can grafts rewrite the history the patch is checked against.
		env = append(env, "GIT_DIR="+gd, "GIT_COMMON_DIR="+gd, "GIT_WORK_TREE="+w.dir, "GIT_GRAFT_FILE=/dev/null")
	}
	cmd := exec.CommandContext(ctx, w.git, full...)
	// A process the call left holding its output does not hold the worker
	// past the call's end.
	cmd.WaitDelay = time.Second
	cmd.Dir = w.dir
	cmd.Env = env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	// Only what git prints on stdout is its answer: its warnings can quote
	// paths the task chose, whole lines of a diff among them.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	var err error
	if w.start != nil {
		err = w.start(cmd)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	out := stdout.Bytes()
	w.audit.add("worker: git " + strings.Join(args, " "))
	w.log.InfoContext(ctx, "git", slog.String("args", strings.Join(args, " ")), slog.Bool("ok", err == nil))
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(lastLine(stderr.String())))
	}
	return string(out), nil
}

// close lets go of the workspace's .git.
func (w *workspace) close() {
	if w.gitHeld != nil {
		_ = w.gitHeld.Close()
	}
}

// secureGit checks that the checkout's .git is still the directory the
// clone made (not a symlink, a file naming another repository, or a new
// directory) and puts back its configuration as cloned, so that nothing
// the task wrote there (hooks paths, file-system monitors, filters,
// external diff programs, includes) takes effect in the worker's git.
func (w *workspace) secureGit() error {
	gd := filepath.Join(w.dir, ".git")
	fi, err := os.Lstat(gd)
	if err != nil || !fi.IsDir() || !os.SameFile(fi, w.gitDir) {
		return errors.New("the task replaced the checkout's .git; its changes are not taken")
	}
	root, err := os.OpenRoot(gd)
	if err != nil {
		return fmt.Errorf("open the checkout's .git: %w", err)
	}
	defer root.Close()
	for _, name := range guardedGitFiles {
		if err := root.RemoveAll(name); err != nil {
			return fmt.Errorf("restore the checkout's .git/%s: %w", name, err)
		}
		content, ok := w.pristine[name]
		if !ok {
			continue
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("restore the checkout's .git/%s: %w", name, err)
		}
		_, err = f.Write(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("restore the checkout's .git/%s: %w", name, err)
		}
	}
	return nil
}

// guardedGitFiles are the files of .git that change what the worker's git
// runs or sees (its configuration, the ignore rules and attributes that
// only the repository's own files should set), put back as cloned (or
// removed, when the clone had none) before each of its calls.
var guardedGitFiles = []string{"config", "config.worktree", "info/exclude", "info/attributes", "info/sparse-checkout",
	"info/grafts", "shallow", "objects/info/commit-graph", "objects/info/commit-graphs"}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// openWorkspace clones repo into root/src at base (spec B-27: every task
// starts from the run's starting commit) and installs the git guard. env
// is the environment of the worker's own git calls, stripped of secrets.
func openWorkspace(ctx context.Context, log *slog.Logger, root, repo, base string, env []string, start func(*exec.Cmd) error) (*workspace, error) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return nil, errors.New("git is not installed on the worker")
	}
	w := &workspace{root: root, dir: filepath.Join(root, "src"), base: base, git: gitPath, env: env, audit: &gitAudit{}, log: log}
	// Clone from the parent directory: the checkout does not exist yet.
	w.dir = root
	// No hard links: the clone's object files would be the repository's
	// own, which a task could then change in place.
	if _, err := w.run(ctx, "clone", "--quiet", "--no-checkout", "--no-hardlinks", repo, "src"); err != nil {
		return nil, err
	}
	w.start = start
	w.dir = filepath.Join(root, "src")
	// The checkout has no remote: an agent's git finds nothing to push to.
	if _, err := w.run(ctx, "remote", "remove", "origin"); err != nil {
		return nil, err
	}
	if w.gitHeld, err = os.Open(filepath.Join(w.dir, ".git")); err != nil {
		return nil, err
	}
	ready := false
	defer func() {
		if !ready {
			w.close()
		}
	}()
	if w.gitDir, err = w.gitHeld.Stat(); err != nil || !w.gitDir.IsDir() {
		return nil, fmt.Errorf("the clone's .git: %w", cmp.Or(err, errors.New("not a directory")))
	}
	w.pristine = map[string][]byte{}
	for _, name := range guardedGitFiles {
		b, err := os.ReadFile(filepath.Join(w.dir, ".git", name))
		switch {
		case err == nil:
			w.pristine[name] = b
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	if _, err := w.run(ctx, "-c", "advice.detachedHead=false", "checkout", "--quiet", base); err != nil {
		return nil, err
	}
	if err := w.installGuard(ctx); err != nil {
		return nil, err
	}
	ready = true
	return w, nil
}

package worker

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// guardScript is the git an agent's commands see: it refuses push, merge
// (and pull, which merges), send-pack, subtree and reset --hard (spec
// F-29..F-32), logs every call, and runs the real git otherwise. It finds
// the subcommand as git does, after git's own options, and accepts only
// git's own commands: no aliases (which could hide any of these), no typos
// git would correct into one; and the abbreviations of --hard git accepts.
// It guards the git on PATH only: a command that runs another git directly
// is not stopped, which is why the checkout also has no remote to push to.
const guardScript = `#!/bin/sh
set -f
printf '%%s\n' "$*" >> '%s'
real='%s'
# Git itself resets the working tree with reset --hard for stash and
# worktree: such a call, whose parent is git running one of those two, is
# git's own step. (A shell can exec into this script with git as its
# parent, so only that reset is let through, and only under those two.)
internal=0
if [ "$(readlink /proc/$PPID/exe 2>/dev/null)" = '%s' ]; then
  if tr '\0' '\n' < /proc/$PPID/cmdline 2>/dev/null | {
    n=0; skip=0
    while IFS= read -r a; do
      n=$((n+1))
      if [ $n = 1 ]; then continue; fi
      if [ $skip = 1 ]; then skip=0; continue; fi
      case "$a" in
        -c|-C|--git-dir|--work-tree|--namespace|--config-env|--super-prefix|--shallow-file|--attr-source) skip=1 ;;
        -*) ;;
        stash|worktree) exit 0 ;;
        *) exit 1 ;;
      esac
    done
    exit 1
  }; then internal=1; fi
fi
deny() { echo "sylk: git $1 is not allowed for agents" >&2; exit 1; }
# check SUBCOMMAND ARGS...: refuse what agents may not do.
check() {
  case "$1" in
    push|merge|pull|send-pack|subtree|http-push|receive-pack|remote-*) deny "$1" ;;
    merge-base|merge-file|merge-tree) ;;
    merge-*) deny "$1" ;;
    reset) [ $internal = 1 ] || for a in "$@"; do case "$a" in --h|--ha|--har|--hard) deny "reset --hard" ;; esac; done ;;
    read-tree) for a in "$@"; do case "$a" in --reset) deny "read-tree --reset" ;; esac; done ;;
  esac
  known=$("$real" --list-cmds=main,others 2>/dev/null)
  case "
$known
" in
    *"
$1
"*) ;;
    *) deny "$1 (only git's own commands; aliases are not allowed)" ;;
  esac
}
# Configuration given on the command line may not define aliases or
# include files.
cfgarg() {
  case "$1" in
    [Aa][Ll][Ii][Aa][Ss].*) deny "with an alias on the command line" ;;
    [Ii][Nn][Cc][Ll][Uu][Dd][Ee]*) deny "with an include on the command line" ;;
  esac
}
scan() {
  while [ $# -gt 0 ]; do
    case "$1" in
      -c|--config-env) cfgarg "$2"; shift 2; continue ;;
      -c*) cfgarg "${1#-c}" ;;
      --config-env=*) cfgarg "${1#--config-env=}" ;;
      -C|--git-dir|--work-tree|--namespace|--super-prefix|--shallow-file|--attr-source) shift 2; continue ;;
      -*) ;;
      *) check "$@"; return ;;
    esac
    shift
  done
}
scan "$@"
exec "$real" -c help.autocorrect=0 "$@"
`

func (w *workspace) guardDir() string { return filepath.Join(w.root, ".bin") }
func (w *workspace) auditFile() string {
	return filepath.Join(w.root, ".git-audit.log")
}

func (w *workspace) installGuard(ctx context.Context) error {
	if err := os.MkdirAll(w.guardDir(), 0o700); err != nil {
		return err
	}
	realExe, err := filepath.EvalSymlinks(w.git)
	if err != nil {
		return err
	}
	script := fmt.Sprintf(guardScript, w.auditFile(), w.git, realExe)
	if err := os.WriteFile(filepath.Join(w.guardDir(), "git"), []byte(script), 0o700); err != nil {
		return err
	}
	return w.installExecPath(ctx)
}

// execPath is the git program directory the agent's git runs with
// (GIT_EXEC_PATH). Git puts its program directory first on the PATH of
// every program it starts (rebase --exec, bisect run, hooks), so there its
// own "git" must be the guard too; the rest are git's, but for the
// programs that push, merge or reset under their own names.
func (w *workspace) execPath() string { return filepath.Join(w.guardDir(), "libexec") }

// guardedPrograms are the programs of git's directory left out of
// execPath: they push, merge or pull under their own names.
func guardedProgram(name string) bool {
	switch name {
	case "git-merge-base", "git-merge-file", "git-merge-tree":
		return false
	}
	for _, p := range []string{"git-push", "git-merge", "git-pull", "git-send-pack", "git-subtree", "git-http-push", "git-receive-pack"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func (w *workspace) installExecPath(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, w.git, "--exec-path").Output()
	if err != nil {
		return fmt.Errorf("find git's program directory: %w", err)
	}
	real := strings.TrimSpace(string(out))
	ents, err := os.ReadDir(real)
	if err != nil {
		return fmt.Errorf("read git's program directory: %w", err)
	}
	dir := w.execPath()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		target := filepath.Join(real, name)
		switch {
		case name == "git":
			target = filepath.Join(w.guardDir(), "git")
		case guardedProgram(name):
			continue
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
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
// committed or not, including new files. The index is rebuilt from the
// files first: one the task wrote could name contents that are not on disk.
func (w *workspace) changedFiles(ctx context.Context) ([]string, error) {
	// Tracked files stay tracked whatever the ignore rules say: the index
	// starts from the starting commit (or from HEAD, when the task
	// committed), then takes every file on disk.
	if _, err := w.run(ctx, "read-tree", "HEAD"); err != nil {
		return nil, err
	}
	if _, err := w.run(ctx, "add", "-A"); err != nil {
		return nil, err
	}
	if err := w.addIgnoredByTask(ctx); err != nil {
		return nil, err
	}
	out, err := w.run(ctx, "diff", "--cached", "--name-only", "-z", w.base)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, l := range strings.Split(out, "\x00") {
		if l != "" {
			files = append(files, l)
		}
	}
	return files, nil
}

// commit records the task's changes, files as changedFiles staged them,
// with a conventional message (spec F-30) and returns the patch from the
// starting commit.
func (w *workspace) commit(ctx context.Context, message string, files []string) (string, error) {
	if len(files) == 0 {
		return "", nil
	}
	// A task that committed its changes itself leaves nothing to commit.
	staged, err := w.run(ctx, "diff", "--cached", "--name-only", "HEAD")
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(staged) != "" {
		if _, err := w.run(ctx, "commit", "--quiet", "--no-verify", "-m", message); err != nil {
			return "", err
		}
	}
	if err := w.verifyObjects(ctx); err != nil {
		return "", err
	}
	if err := w.refuseGitlinks(ctx); err != nil {
		return "", err
	}
	if err := w.refuseConversions(ctx); err != nil {
		return "", err
	}
	return w.run(ctx, "diff", "--binary", "--no-ext-diff", "--no-textconv", w.base, "HEAD")
}

// verifyObjects checks that every object the patch is made of (those
// reachable from HEAD and not from the starting commit) holds what its name
// says. Git trusts an object file it finds under the right name, and the
// task could have written one itself: then the patch would say what is not
// on disk.
func (w *workspace) verifyObjects(ctx context.Context) error {
	list, err := w.run(ctx, "rev-list", "--objects", "--no-object-names", w.base+"..HEAD")
	if err != nil || strings.TrimSpace(list) == "" {
		return err
	}
	out, err := w.runInput(ctx, list, "cat-file", "--batch")
	if err != nil {
		return err
	}
	for rest := out; rest != ""; {
		header, body, ok := strings.Cut(rest, "\n")
		f := strings.Fields(header)
		if !ok || len(f) != 3 {
			return fmt.Errorf("verify the task's objects: unexpected %q", truncateString(header, 80))
		}
		size, err := strconv.Atoi(f[2])
		if err != nil || size < 0 || len(body) < size+1 {
			return fmt.Errorf("verify the task's objects: unexpected %q", truncateString(header, 80))
		}
		if objectID(f[1], body[:size], len(f[0])) != f[0] {
			return errors.New("the task altered the checkout's object files; its changes are not taken")
		}
		rest = body[size+1:]
	}
	return nil
}

// addIgnoredByTask deals with the files that only ignore rules the task
// wrote itself hide (a .gitignore it added or changed): ignore files among
// them are staged, so the rules travel with the patch; the others (build
// outputs, as a rule) are not, and are named in w.hidden for the task's
// report, so that the patch leaving them out is said.
func (w *workspace) addIgnoredByTask(ctx context.Context) error {
	w.hidden = nil
	ignored, err := w.run(ctx, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	if err != nil || ignored == "" {
		return err
	}
	verbose, err := w.runInput(ctx, ignored, "check-ignore", "-v", "-z", "--stdin")
	if err != nil {
		return err
	}
	// Records: "<source>\x00<line>\x00<pattern>\x00<path>\x00".
	f := strings.Split(verbose, "\x00")
	made := map[string]bool{}
	var force []string
	for i := 0; i+3 < len(f); i += 4 {
		src, path := f[i], f[i+3]
		m, ok := made[src]
		if !ok {
			m = w.changedByTask(ctx, src)
			made[src] = m
		}
		if !m {
			continue
		}
		paths := []string{path}
		if strings.HasSuffix(path, "/") {
			// A whole directory the task's rules hide: its files.
			inside, err := w.run(ctx, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--", path)
			if err != nil {
				return err
			}
			paths = strings.Split(strings.TrimSuffix(inside, "\x00"), "\x00")
		}
		for _, p := range paths {
			switch {
			case p == "":
			case filepath.Base(p) == ".gitignore", filepath.Base(p) == ".gitattributes":
				force = append(force, p)
			default:
				w.hidden = append(w.hidden, p)
			}
		}
	}
	if len(force) == 0 {
		return nil
	}
	_, err = w.runInput(ctx, strings.Join(force, "\x00"), "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul")
	return err
}

// changedByTask reports whether the checkout's file at path is new or
// differs from the starting commit's. Files outside the checkout (the
// ignore and attribute files of .git are put back as cloned) are not.
func (w *workspace) changedByTask(ctx context.Context, path string) bool {
	if path == "" || filepath.IsAbs(path) || path == ".git" || strings.HasPrefix(path, ".git/") {
		return false
	}
	want, err := w.run(ctx, "rev-parse", "--verify", "-q", w.base+":"+path)
	if err != nil {
		return true
	}
	// As git would store it: a checkout may have converted it (line endings).
	got, err := w.run(ctx, "hash-object", "--", path)
	return err != nil || strings.TrimSpace(got) != strings.TrimSpace(want)
}

// refuseConversions fails the task when attributes it wrote itself (a
// .gitattributes it added or changed) make what is committed differ from
// what the starting commit's attributes would have committed (ident, an
// encoding, line endings): the tests ran on the disk, and the starting
// commit's attributes are the repository's intent. Each changed file is
// hashed again with the starting commit's attribute files put in place for
// the while.
func (w *workspace) refuseConversions(ctx context.Context) error {
	names, err := w.run(ctx, "diff", "--name-only", "-z", "--no-renames", w.base, "HEAD")
	if err != nil {
		return err
	}
	var paths, attrs []string
	for _, p := range strings.Split(names, "\x00") {
		if p == "" {
			continue
		}
		if filepath.Base(p) == ".gitattributes" {
			attrs = append(attrs, p)
		}
		if fi, err := os.Lstat(filepath.Join(w.dir, p)); err == nil && fi.Mode().IsRegular() {
			paths = append(paths, p)
		}
	}
	if len(attrs) == 0 || len(paths) == 0 {
		return nil
	}
	// The starting commit's attribute files go back where they were, not
	// through a directory the task made a symlink.
	for _, a := range attrs {
		for d := filepath.Dir(a); d != "."; d = filepath.Dir(d) {
			if fi, err := os.Lstat(filepath.Join(w.dir, d)); err == nil && !fi.IsDir() {
				return fmt.Errorf("the task made %s, which holds attributes, something other than a directory; its changes are not taken", d)
			}
		}
	}
	root, err := openDirRoot(w.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	// The task's attribute files, put back when done (their content is
	// committed already; the checkout is the task's until it is removed).
	saved := map[string][]byte{}
	for _, a := range attrs {
		b, err := root.ReadFile(a)
		if err == nil {
			saved[a] = b
		}
		if err := root.Remove(a); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if was, err := w.run(ctx, "cat-file", "blob", w.base+":"+a); err == nil {
			if err := root.MkdirAll(filepath.Dir(a), 0o755); err != nil {
				return err
			}
			if err := root.WriteFile(a, []byte(was), 0o644); err != nil {
				return err
			}
		}
	}
	defer func() {
		for _, a := range attrs {
			_ = root.Remove(a)
			if b, ok := saved[a]; ok {
				_ = root.WriteFile(a, b, 0o644)
			}
		}
	}()
	for _, p := range paths {
		if slices.Contains(attrs, p) {
			continue
		}
		intended, err := w.run(ctx, "hash-object", "--", p)
		if err != nil {
			return err
		}
		committed, err := w.run(ctx, "rev-parse", "--verify", "-q", "HEAD:"+p)
		if err != nil || strings.TrimSpace(intended) != strings.TrimSpace(committed) {
			return fmt.Errorf("attributes the task wrote make %q differ between disk and patch; its changes are not taken", p)
		}
	}
	return nil
}

// refuseGitlinks fails the task when its changes hold a repository of its
// own (git records it as a commit of that repository, not its files, and
// the patch would not carry them).
func (w *workspace) refuseGitlinks(ctx context.Context) error {
	out, err := w.run(ctx, "diff-tree", "-r", "-z", "--no-renames", w.base, "HEAD")
	if err != nil {
		return err
	}
	// Records: ":<old mode> <new mode> <old> <new> <status>\x00<path>\x00".
	f := strings.Split(out, "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(f[i], ":"))
		if len(meta) >= 2 && meta[1] == "160000" {
			return fmt.Errorf("the task left a git repository of its own at %s; its files are not in a patch, so its changes are not taken", f[i+1])
		}
	}
	return nil
}

// objectID is git's name for an object of type typ holding content, in
// the repository's hash (SHA-1, or SHA-256 for 64-digit names).
func objectID(typ, content string, digits int) string {
	h := sha1.New()
	if digits == 64 {
		h = sha256.New()
	}
	fmt.Fprintf(h, "%s %d\x00", typ, len(content))
	io.WriteString(h, content)
	return hex.EncodeToString(h.Sum(nil))
}

// applyPatch applies a git diff from the starting commit to the checkout,
// uncommitted.
func (w *workspace) applyPatch(ctx context.Context, patch string) error {
	f := filepath.Join(w.root, ".start.patch")
	if err := os.WriteFile(f, []byte(patch), 0o600); err != nil {
		return err
	}
	defer os.Remove(f)
	_, err := w.run(ctx, "apply", "--binary", "--whitespace=nowarn", f)
	return err
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
// that leaves it, lexically or through a symlink (one in the repository, or
// one an earlier command made), is refused before anything is created. The
// writes go through an os.Root, so a symlink swapped in meanwhile cannot
// lead out either.
func applyEdits(dir string, edits map[string]string) ([]string, error) {
	root, err := openDirRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	defer root.Close()
	var written []string
	for p, content := range edits {
		clean := filepath.Clean(p)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || clean == ".git" || strings.HasPrefix(clean, ".git"+string(filepath.Separator)) {
			return written, fmt.Errorf("edit %q: must be a relative path inside the workspace", p)
		}
		if parent := filepath.Dir(clean); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return written, fmt.Errorf("edit %q: %w", p, err)
			}
		}
		if err := root.WriteFile(clean, []byte(content), 0o644); err != nil {
			return written, fmt.Errorf("edit %q: %w", p, err)
		}
		written = append(written, clean)
	}
	return written, nil
}

// errDirReplaced is a task directory (a checkout) that a task's command
// replaced with a symlink: whatever it leads to is not the task's.
var errDirReplaced = errors.New("the task replaced its working directory with a link")

// openDirRoot opens dir as a root for the worker's own reads and writes,
// refusing a dir that is a symlink (the task's commands may have swapped
// its checkout for a link to another task's) or that changed while it was
// opened.
func openDirRoot(dir string) (*os.Root, error) {
	before, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !before.IsDir() {
		return nil, errDirReplaced
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if opened, err := root.Stat("."); err != nil || !os.SameFile(before, opened) {
		root.Close()
		return nil, errDirReplaced
	}
	return root, nil
}

// scratchPool hands out task directories. Creating and removing a
// directory is the expensive part of a no-op task on most filesystems (a
// block is allocated, and freed, for each), so a directory whose task has
// ended is emptied, checked and kept for a later task instead of removed:
// a task still starts with nothing in its directory but an empty .tmp. A
// directory that cannot be emptied, or whose type or permissions the task
// changed, is removed as before. Spare empty directories are kept as well,
// for the dependencies' outputs (.upstream), and moved in by a rename.
//
// A directory is kept for later tasks of the same user (its scope) only.
// Nothing a task started outlives it in namespaces of its own, but a
// descriptor of its directory can: the task can pass it, through a socket
// in the user's Go cache, to another task of the user that is still
// running, which could then list, chmod or touch what a later task puts
// in the same directory (Landlock governs opening, not these).
type scratchPool struct {
	root string
	max  int

	mu     sync.Mutex
	free   []keptDir // root/sylk-task-*, each holding only an empty .tmp
	spare  []keptDir // empty root/sylk-spare-* directories
	closed bool
}

// keptDir is a directory kept for a later task of the user scope.
type keptDir struct{ dir, scope string }

// take removes from *list the directory kept last for scope, "" when none.
func take(list *[]keptDir, scope string) string {
	for i := len(*list) - 1; i >= 0; i-- {
		if k := (*list)[i]; k.scope == scope {
			*list = slices.Delete(*list, i, i+1)
			return k.dir
		}
	}
	return ""
}

// keep adds k to *list, which holds at most max: it returns the directory
// dropped for it (the oldest, of whichever user), to be removed, or "".
func keep(list *[]keptDir, k keptDir, max int) string {
	*list = append(*list, k)
	if len(*list) <= max {
		return ""
	}
	old := (*list)[0].dir
	*list = slices.Delete(*list, 0, 1)
	return old
}

const (
	scratchTmp      = ".tmp"
	scratchUpstream = ".upstream"
)

func newScratchPool(root string, max int) *scratchPool {
	return &scratchPool{root: root, max: max}
}

// get returns an empty task directory holding an empty .tmp, for a task of
// the user scope, or "" and an error.
func (p *scratchPool) get(scope string) (string, error) {
	p.mu.Lock()
	ws := take(&p.free, scope)
	p.mu.Unlock()
	if ws != "" {
		return ws, nil
	}
	ws, err := os.MkdirTemp(p.root, "sylk-task-")
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(ws, scratchTmp), 0o700); err != nil {
		removeWorkspace(ws)
		return "", err
	}
	return ws, nil
}

// mkdir creates the directory dir (which must not exist) with mode 0700,
// from a spare one of the user scope when there is one.
func (p *scratchPool) mkdir(scope, dir string) error {
	p.mu.Lock()
	sp := take(&p.spare, scope)
	p.mu.Unlock()
	if sp != "" {
		// A rename replaces an empty directory: refuse as mkdir would.
		if _, err := os.Lstat(dir); err == nil {
			p.keepSpare(scope, sp)
			return &os.PathError{Op: "mkdir", Path: dir, Err: os.ErrExist}
		}
		if err := os.Rename(sp, dir); err == nil {
			return nil
		}
		_ = os.RemoveAll(sp)
	}
	return os.Mkdir(dir, 0o700)
}

// put takes back the task directory of a task of the user scope: emptied
// and kept for that user's tasks when that is safe, removed otherwise.
func (p *scratchPool) put(scope, ws string) {
	if ws == "" {
		return
	}
	if p.max == 0 {
		removeWorkspace(ws)
		return
	}
	if p.reset(scope, ws) {
		p.mu.Lock()
		if !p.closed {
			old := keep(&p.free, keptDir{ws, scope}, p.max)
			p.mu.Unlock()
			if old != "" {
				removeWorkspace(old)
			}
			return
		}
		p.mu.Unlock()
	}
	removeWorkspace(ws)
}

// reset empties ws down to an empty .tmp and reports whether it is fit for
// another task: a real directory with mode 0700, holding only .tmp, also a
// real, empty directory with mode 0700.
func (p *scratchPool) reset(scope, ws string) bool {
	if !privateDir(ws) {
		return false
	}
	names, err := dirNames(ws)
	if err != nil {
		return false
	}
	changed := false
	for _, n := range names {
		full := filepath.Join(ws, n)
		switch n {
		case scratchTmp:
			continue
		case scratchUpstream:
			if privateDir(full) && emptyDir(full) {
				sp := filepath.Join(p.root, "sylk-spare-"+rand.Text())
				if os.Rename(full, sp) == nil {
					p.keepSpare(scope, sp)
					changed = true
					continue
				}
			}
		}
		if os.RemoveAll(full) != nil {
			return false
		}
		changed = true
	}
	tmp := filepath.Join(ws, scratchTmp)
	if !privateDir(tmp) {
		return false
	}
	left, err := dirNames(tmp)
	if err != nil {
		return false
	}
	if !changed && len(left) == 0 && slices.Equal(names, []string{scratchTmp}) {
		// The task left nothing behind (the usual case for a command
		// that writes no file): the listings above are the check.
		return true
	}
	if !emptyDir(tmp) {
		return false
	}
	// Check the result: nothing may be left but the empty .tmp.
	names, err = dirNames(ws)
	if err != nil || len(names) != 1 || names[0] != scratchTmp {
		return false
	}
	names, err = dirNames(tmp)
	return err == nil && len(names) == 0
}

func (p *scratchPool) keepSpare(scope, sp string) {
	p.mu.Lock()
	if !p.closed {
		old := keep(&p.spare, keptDir{sp, scope}, p.max)
		p.mu.Unlock()
		if old != "" {
			_ = os.RemoveAll(old)
		}
		return
	}
	p.mu.Unlock()
	_ = os.RemoveAll(sp)
}

// close removes the kept directories; later ones are removed when put back.
func (p *scratchPool) close() {
	p.mu.Lock()
	kept := slices.Concat(p.free, p.spare)
	p.free, p.spare, p.closed = nil, nil, true
	p.mu.Unlock()
	for _, k := range kept {
		removeWorkspace(k.dir)
	}
}

// privateDir reports whether path is a directory (not a symlink to one)
// with mode 0700.
func privateDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode() == os.ModeDir|0o700
}

// emptyDir removes everything inside dir and reports whether that worked.
func emptyDir(dir string) bool {
	names, err := dirNames(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if os.RemoveAll(filepath.Join(dir, n)) != nil {
			return false
		}
	}
	return true
}

// dirNames lists dir, which must not be a symlink.
func dirNames(dir string) ([]string, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

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

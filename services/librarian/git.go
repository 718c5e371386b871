package librarian

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sylk.dev/sylk/pkg/toolexec"
)

// gitHead returns the commit checked out at root, or "" when root is not a
// git work tree.
func gitHead(ctx context.Context, root string) string {
	out, err := gitOutput(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// gitWaitDelay bounds how long git's output is read after it was killed.
const gitWaitDelay = 5 * time.Second

func gitOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	return gitOutputConfig(ctx, root, nil, args...)
}

// gitOutputConfig is gitOutput with configuration for this call only
// (key=value pairs, passed in git's GIT_CONFIG_* variables, so that a
// clone does not keep them).
func gitOutputConfig(ctx context.Context, root string, config []string, args ...string) ([]byte, error) {
	full := append([]string{"-C", root}, args...)
	env := append(toolexec.WithoutServiceSettings(os.Environ()), "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0")
	if args[0] != "clone" && args[0] != "pull" {
		// A registered directory's repository is its users': nothing its
		// configuration names (hooks, a file-system monitor) runs, and
		// what else it may run (filters) gets no secrets. Clones and pulls
		// keep this process's environment for the remote's credentials,
		// less the services' own settings.
		full = append(slices.Clone(toolexec.SafeGitArgs), full...)
		env = append(toolexec.GitEnv(toolexec.DefaultConfig().ExtraSecretPatterns), "GIT_OPTIONAL_LOCKS=0")
	} else {
		// A remote that stops sending is given up on, not waited for.
		full = append([]string{"-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60"}, full...)
	}
	if len(config) > 0 {
		if slices.ContainsFunc(config, func(kv string) bool { return strings.HasPrefix(kv, "core.sshCommand=") }) {
			// A pin's ssh command adds to the environment's, which would
			// otherwise win over it.
			env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GIT_SSH_COMMAND=") })
		}
		env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(config)))
		for i, kv := range config {
			k, v, _ := strings.Cut(kv, "=")
			env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, k), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, v))
		}
	}
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = env
	// git runs helpers (git-remote-http) that hold its output open: on
	// cancellation the whole group is killed, and the wait for the output
	// is bounded.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = gitWaitDelay
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// gitChanged lists the paths changed between commit since and the work
// tree (committed, staged, unstaged and untracked), relative to root.
func gitChanged(ctx context.Context, root, since string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	diff, err := gitOutput(ctx, root, "diff", "--name-only", "-z", "--no-renames", "--relative", since)
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(string(diff), "\x00") {
		add(p)
	}
	untracked, err := gitOutput(ctx, root, "ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(string(untracked), "\x00") {
		add(p)
	}
	return out, nil
}

package agenteval

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"sylk.dev/sylk/pkg/agent/codetools"
)

// Verdict is what judging a change found.
type Verdict struct {
	// Solved: the test command passed with the hidden files in.
	Solved bool
	// Output is the end of the test command's output when it failed.
	Output string
}

// Judge applies patch (a git diff; empty for no change) to a fresh copy of
// the task's repository under dir, copies the hidden files in and runs the
// test command. A patch that does not apply is an error.
func Judge(ctx context.Context, task Task, patch, dir string, timeout time.Duration) (Verdict, error) {
	clean := filepath.Join(dir, "judged")
	if err := Checkout(ctx, task, clean); err != nil {
		return Verdict{}, err
	}
	if strings.TrimSpace(patch) != "" {
		if err := gitApply(ctx, clean, patch); err != nil {
			return Verdict{}, err
		}
	}
	if err := task.OverlayHidden(clean); err != nil {
		return Verdict{}, fmt.Errorf("copy the hidden files: %w", err)
	}
	res, err := task.RunTestCommand(ctx, clean, timeout)
	if err != nil {
		return Verdict{}, err
	}
	if res.ExitCode == 0 && !res.TimedOut {
		return Verdict{Solved: true}, nil
	}
	return Verdict{Output: lastBytes(codetools.FormatCommand(res), 2000)}, nil
}

// Checkout copies the task's repository into dir and commits it as the
// first commit of a new git repository: what an agent works on, and what
// its change is judged against.
func Checkout(ctx context.Context, task Task, dir string) error {
	if err := task.CopyRepo(dir); err != nil {
		return fmt.Errorf("copy the repository: %w", err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "--no-verify", "-m", "the task's repository"}} {
		if _, err := git(ctx, dir, "", args...); err != nil {
			return err
		}
	}
	return nil
}

// Diff is the change made to the work tree of dir, untracked files included,
// since its first commit: what the baseline submits.
func Diff(ctx context.Context, dir string) (string, error) {
	base, err := git(ctx, dir, "", "rev-list", "--max-parents=0", "HEAD")
	if err != nil {
		return "", err
	}
	if _, err := git(ctx, dir, "", "add", "-A"); err != nil {
		return "", err
	}
	return git(ctx, dir, "", "diff", "--cached", "--binary", strings.TrimSpace(base))
}

func gitApply(ctx context.Context, dir, patch string) error {
	if !strings.HasSuffix(patch, "\n") {
		patch += "\n"
	}
	if _, err := git(ctx, dir, patch, "apply", "--whitespace=nowarn", "-"); err != nil {
		return fmt.Errorf("the change does not apply to the task's repository: %w", err)
	}
	return nil
}

// git runs a git command in dir, with stdin, as a fixed identity and
// without the user's hooks or signing, and returns its output.
func git(ctx context.Context, dir, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	base := []string{"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"}
	cmd := exec.CommandContext(ctx, "git", append(base, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=sylk-eval", "GIT_AUTHOR_EMAIL=eval@sylk.invalid",
		"GIT_COMMITTER_NAME=sylk-eval", "GIT_COMMITTER_EMAIL=eval@sylk.invalid", "GIT_CONFIG_NOSYSTEM=1")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// lastBytes is the end of s, at most n bytes of it.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return "..." + s[start:]
}

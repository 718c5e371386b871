package librarian

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A registered directory's repository may name programs in its own
// configuration. Reading what changed runs neither its file-system monitor
// nor its hooks, and a filter it runs gets no secrets. Not parallel: it sets
// an environment variable.
func TestGitOnARegisteredRepositoryRunsNothingItNames(t *testing.T) {
	t.Setenv("SYLK_PROBE_DSN", "postgres://sylk:leak@db/sylk")
	dir, out := t.TempDir(), t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, string(b))
		return strings.TrimSpace(string(b))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte("package a\n"), 0o644))
	git("init", "--quiet")
	git("add", "-A")
	git("commit", "--quiet", "-m", "init")
	base := git("rev-parse", "HEAD")
	script := func(name, body string) string {
		p := filepath.Join(dir, ".git", name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		return p
	}
	git("config", "core.fsmonitor", script("fsm", "touch "+out+"/fsmonitor; exit 1"))
	git("config", "filter.x.clean", script("clean", "env > "+out+"/filter.env; cat"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("*.go filter=x\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte("package a\n\n// changed\n"), 0o644))

	changed, err := gitChanged(context.Background(), dir, base)
	require.NoError(t, err)
	require.Contains(t, changed, "a.go")
	_, err = os.Stat(filepath.Join(out, "fsmonitor"))
	require.ErrorIs(t, err, os.ErrNotExist, "the repository's file-system monitor did not run")
	if env, err := os.ReadFile(filepath.Join(out, "filter.env")); err == nil {
		require.NotContains(t, string(env), "leak", "a filter the repository names gets no secrets")
	}
}

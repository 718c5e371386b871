package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/toolexec"
)

// inspectDir writes files into a fresh directory and returns it with a
// stage runner executing there, as a task's workspace would.
func inspectDir(t *testing.T, files map[string]string) (string, stageRunner) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	ex, env := taskExecutor(t, dir)
	return dir, func(ctx context.Context, command string) (toolexec.Result, error) {
		return ex.Execute(ctx, toolexec.Invocation{Command: command, WorkingDir: dir, Env: env})
	}
}

// taskExecutor is an executor whose boundary is root, and the environment
// its commands get as in a task: the worker's Go caches, and a temporary
// directory (here outside the checked files), which confined commands may
// write.
func taskExecutor(t *testing.T, root string) (*toolexec.Executor, map[string]string) {
	t.Helper()
	b, err := toolexec.NewBoundary(root)
	require.NoError(t, err)
	env := goEnv()
	env["TMPDIR"] = t.TempDir()
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	// The machine's Go build cache, warm: the tenant's in a worker.
	env["GOCACHE"] = filepath.Join(cache, "go-build")
	require.NoError(t, os.MkdirAll(env["GOCACHE"], 0o755))
	cfg := toolexec.DefaultConfig()
	cfg.ConfineWritable = []string{env["GOCACHE"], env["TMPDIR"]}
	cfg.UnsafeRunTasksAsRoot = true // when the tests run as root
	ex, err := toolexec.New(cfg, b, nil)
	require.NoError(t, err)
	return ex, env
}

// A project that configures flake8 gets it as its Python linter; findings
// in the changed files fail the inspection, findings the change did not
// touch do not.
func TestInspectorRunsTheProjectsLinter(t *testing.T) {
	if _, err := exec.LookPath("flake8"); err != nil {
		testenv.MissingTool(t, "flake8")
	}
	dir, run := inspectDir(t, map[string]string{
		".flake8":   "[flake8]\nmax-line-length = 120\n",
		"old.py":    "import os\n\n\ndef old():\n    return 1\n",
		"change.py": "import sys\n\n\ndef new():\n    return undefined_name\n",
	})
	names := func() []string {
		var out []string
		for _, c := range inspectorChecks(dir) {
			out = append(out, c.name)
		}
		return out
	}()
	require.Contains(t, names, "flake8")
	ok, issues, err := inspect(context.Background(), dir, run, []string{"change.py"})
	require.NoError(t, err)
	require.False(t, ok)
	joined := strings.Join(issues, "\n")
	require.Contains(t, joined, "change.py:1:1: flake8: F401 'sys' imported but unused")
	require.Contains(t, joined, "F821 undefined name 'undefined_name'")
	require.NotContains(t, joined, "old.py", "the unused import the change did not touch is not its finding")

	ok, issues, err = inspect(context.Background(), dir, run, []string{"old.py"})
	require.NoError(t, err)
	require.False(t, ok, "%v", issues)
	require.NotContains(t, strings.Join(issues, "\n"), "change.py")
}

// Without a configuration, flake8 is not imposed on a Python project: only
// the syntax check runs.
func TestInspectorDoesNotImposeUnconfiguredLinters(t *testing.T) {
	needPython(t)
	dir, run := inspectDir(t, map[string]string{"a.py": "import os, sys\n"})
	ok, issues, err := inspect(context.Background(), dir, run, []string{"a.py"})
	require.NoError(t, err)
	require.True(t, ok, "%v", issues)
	_, issues, err = inspect(context.Background(), dir, run, nil)
	require.NoError(t, err)
	for _, c := range inspectorChecks(dir) {
		require.NotEqual(t, "flake8", c.name)
	}
	bad, run2 := inspectDir(t, map[string]string{"b.py": "def broken(:\n"})
	ok, issues, err = inspect(context.Background(), bad, run2, []string{"b.py"})
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, strings.Join(issues, "\n"), "b.py:1")
}

// Go formatting is judged on the changed files; go vet on the whole module.
func TestInspectorGoChecks(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.MissingTool(t, "go")
	}
	dir, run := inspectDir(t, map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"old.go": "package m\nfunc Old( ) int { return 1 }\n",
		"new.go": "package m\n\nfunc New() int { return Old() }\n",
	})
	ok, issues, err := inspect(context.Background(), dir, run, []string{"new.go"})
	require.NoError(t, err)
	require.True(t, ok, "old.go's formatting is not the change's: %v", issues)
	ok, issues, err = inspect(context.Background(), dir, run, []string{"old.go"})
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, strings.Join(issues, "\n"), "old.go: format: not")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.go"), []byte("package m\n\nfunc Old(x int) int { return x }\n"), 0o644))
	ok, issues, err = inspect(context.Background(), dir, run, []string{"old.go"})
	require.NoError(t, err)
	require.False(t, ok, "the signature change breaks new.go, which it did not touch")
	require.Contains(t, strings.Join(issues, "\n"), "new.go")
}

// The Inspector's checks run once for files already checked: a second
// workspace with the same Go files gets gofmt's and go vet's outputs from
// the cache (spec C-33), and a change to a Go file runs them again.
func TestInspectorReusesUnchangedChecks(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.MissingTool(t, "go")
	}
	if _, err := exec.LookPath("gofmt"); err != nil {
		testenv.MissingTool(t, "gofmt")
	}
	root := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"old.go": "package m\nfunc Old( ) int { return 1 }\n",
	}
	workspace := func(name string) string {
		dir := filepath.Join(root, name)
		for f, content := range files {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644))
		}
		return dir
	}
	ex, env := taskExecutor(t, root)
	runIn := func(dir string) stageRunner {
		return func(ctx context.Context, command string) (toolexec.Result, error) {
			return ex.Execute(ctx, toolexec.Invocation{Command: command, WorkingDir: dir, Env: env})
		}
	}
	one, two := workspace("one"), workspace("two")
	ok, issues, err := inspect(context.Background(), one, runIn(one), []string{"old.go"})
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, ex.CacheStats().Hits)

	ok2, issues2, err := inspect(context.Background(), two, runIn(two), []string{"old.go"})
	require.NoError(t, err)
	require.Equal(t, ok, ok2)
	require.Equal(t, issues, issues2)
	require.Equal(t, uint64(2), ex.CacheStats().Hits, "gofmt and go vet reused")

	require.NoError(t, os.WriteFile(filepath.Join(two, "old.go"), []byte("package m\n\nfunc Old() int { return 1 }\n"), 0o644))
	ok, issues, err = inspect(context.Background(), two, runIn(two), []string{"old.go"})
	require.NoError(t, err)
	require.True(t, ok, "%v", issues)
	require.Equal(t, uint64(2), ex.CacheStats().Hits, "a changed Go file runs them again")
}

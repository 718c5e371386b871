package toolexec

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lintScript is a "lint" tool that prints the .txt files of its working
// directory with their absolute paths, counts its runs in $COUNT, and
// exits 1 when it finds "bad" (a finding is output like any other).
const lintScript = `#!/bin/sh
echo run >> "$COUNT"
for f in *.txt; do echo "$PWD/$f: $(cat "$f")"; done
! grep -q bad *.txt
`

// lintTool installs lintScript outside the executor's boundary (where
// confined commands read but do not write) and returns its path: a program
// run directly, as cached tools must be.
func lintTool(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin", "lint")
	write(t, p, lintScript)
	require.NoError(t, os.Chmod(p, 0o755))
	return p
}

// cacheConfig is the cache tests' config and the file the lint tool counts
// its runs in, in a directory confined commands may write.
func cacheConfig(t *testing.T) (Config, string) {
	c := testConfig()
	c.CachePolicies = map[string]CachePolicy{"lint": {InvalidateOn: []string{"*.txt"}}}
	counts := t.TempDir()
	c.ConfineWritable = []string{counts}
	return c, filepath.Join(counts, "count")
}

func write(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}

func runs(t *testing.T, count string) int {
	t.Helper()
	raw, err := os.ReadFile(count)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(raw), "run\n")
}

func TestCacheReusesUnchangedOutput(t *testing.T) {
	t.Parallel()
	cfg, count := cacheConfig(t)
	e, root := newExec(t, cfg)
	ws := filepath.Join(root, "ws")
	write(t, filepath.Join(ws, "a.txt"), "fine")
	inv := Invocation{Command: lintTool(t), WorkingDir: ws, Env: map[string]string{"COUNT": count}}
	ctx := context.Background()
	call := func() Result {
		t.Helper()
		res, err := e.Execute(ctx, inv)
		require.NoError(t, err)
		return res
	}

	first := call()
	require.False(t, first.Cached)
	require.Equal(t, 0, first.ExitCode)
	require.Contains(t, first.Stdout, ws+"/a.txt: fine")

	again := call()
	require.True(t, again.Cached, "nothing changed")
	require.Equal(t, 1, again.CacheHits)
	require.Equal(t, first.Stdout, again.Stdout)
	require.Equal(t, 1, runs(t, count))

	// Files the policy does not name do not matter.
	write(t, filepath.Join(ws, "notes.md"), "x")
	require.True(t, call().Cached)

	// Editing, adding or removing a named file runs the tool again.
	write(t, filepath.Join(ws, "a.txt"), "bad")
	edited := call()
	require.False(t, edited.Cached)
	require.Equal(t, 1, edited.ExitCode)
	require.Contains(t, edited.Stdout, "a.txt: bad")
	findings := call()
	require.True(t, findings.Cached, "a run with findings is reused too")
	require.Equal(t, 1, findings.ExitCode)

	write(t, filepath.Join(ws, "sub", "b.txt"), "fine")
	require.False(t, call().Cached)
	require.NoError(t, os.Remove(filepath.Join(ws, "sub", "b.txt")))
	require.True(t, call().Cached, "back to the files of an earlier run")
	require.Equal(t, 3, runs(t, count))

	// The environment is part of the key; NoCache and standard input run.
	inv.Env = map[string]string{"COUNT": count, "MODE": "strict"}
	require.False(t, call().Cached)
	inv.NoCache = true
	require.False(t, call().Cached)
	inv.NoCache, inv.Stdin = false, bytes.NewReader(nil)
	require.False(t, call().Cached)
	require.Equal(t, 6, runs(t, count))

	st := e.CacheStats()
	require.Equal(t, uint64(4), st.Hits)
	require.Equal(t, 4, st.Entries)
}

func TestCacheMovesPathsBetweenWorkspaces(t *testing.T) {
	t.Parallel()
	cfg, count := cacheConfig(t)
	e, root := newExec(t, cfg)
	one, two := filepath.Join(root, "one"), filepath.Join(root, "two")
	write(t, filepath.Join(one, "a.txt"), "bad")
	write(t, filepath.Join(two, "a.txt"), "bad")
	ctx := context.Background()
	lint := lintTool(t)
	_, err := e.Execute(ctx, Invocation{Command: lint, WorkingDir: one, Env: map[string]string{"COUNT": count}})
	require.NoError(t, err)
	log := &streamLog{}
	res, err := e.Execute(ctx, Invocation{Command: lint, WorkingDir: two, Env: map[string]string{"COUNT": count}, StreamTo: log.add})
	require.NoError(t, err)
	require.True(t, res.Cached, "same files in another workspace")
	require.Equal(t, 1, runs(t, count))
	require.Equal(t, two+"/a.txt: bad\n", res.Stdout)
	require.NotContains(t, res.Stdout, one)
	require.NotNil(t, res.Truncated)
	require.Equal(t, []string{two + "/a.txt: bad"}, res.Truncated.FirstLines)
	require.Equal(t, 1, log.count("status:"+MsgCached))
	require.Equal(t, 1, log.count("stdout:"+two+"/a.txt: bad"))
}

func TestCacheKeepsOnlyCompleteRuns(t *testing.T) {
	t.Parallel()
	cfg, _ := cacheConfig(t)
	cfg.CachePolicies["slow"] = CachePolicy{InvalidateOn: []string{"*"}}
	e, root := newExec(t, cfg)
	inv := Invocation{Tool: "slow", Command: "sleep 30", WorkingDir: root, Timeout: 50 * time.Millisecond}
	for range 2 {
		res, err := e.Execute(context.Background(), inv)
		require.NoError(t, err)
		require.True(t, res.TimedOut)
		require.False(t, res.Cached, "a killed run is never reused")
	}
	require.Zero(t, e.CacheStats().Entries)
}

func TestCachePolicyByProgramName(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.UnsafeRunTasksAsRoot = true // when the tests run as root
	e, _ := newExec(t, cfg)
	for cmd, want := range map[string]bool{
		"go vet ./...":                             true,
		"./node_modules/.bin/eslint .":             true,
		"/usr/bin/gofmt -l .":                      true,
		"'./node_modules/.bin/prettier' --check .": false, // quoted: a shell command, not a program
		"go test ./...":                            false,
		"eslint . | tee out":                       false,
	} {
		_, ok := e.cachePolicy(Invocation{Command: cmd})
		require.Equal(t, want, ok, cmd)
	}
	off := DefaultConfig()
	off.UnsafeRunTasksAsRoot = true // when the tests run as root
	off.CacheEntries = 0
	e, _ = newExec(t, off)
	_, ok := e.cachePolicy(Invocation{Command: "go vet ./..."})
	require.False(t, ok, "cache off")
}

func TestOutputCacheBoundsAndExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newOutputCache(2, 1<<20, time.Minute)
	c.put("a", "/d", Result{Stdout: "1"}, 0, now)
	c.put("b", "/d", Result{Stdout: "2"}, 0, now)
	_, ok := c.get("a", now) // a is now the most recently used
	require.True(t, ok)
	c.put("c", "/d", Result{Stdout: "3"}, 0, now)
	_, ok = c.get("b", now)
	require.False(t, ok, "least recently used evicted")
	_, ok = c.get("a", now.Add(time.Minute+time.Nanosecond))
	require.False(t, ok, "expired")
	c.put("d", "/d", Result{Stdout: "4"}, time.Hour, now)
	_, ok = c.get("d", now.Add(30*time.Minute))
	require.True(t, ok, "a policy's own TTL")

	small := newOutputCache(100, 2048, time.Minute)
	small.put("big", "/d", Result{Stdout: strings.Repeat("x", 4096)}, 0, now)
	require.Zero(t, small.snapshot().Entries, "larger than the whole cache")
	small.put("x", "/d", Result{Stdout: strings.Repeat("x", 900)}, 0, now)
	small.put("y", "/d", Result{Stdout: strings.Repeat("y", 900)}, 0, now)
	st := small.snapshot()
	require.Equal(t, 1, st.Entries, "bytes bound")
	require.LessOrEqual(t, st.Bytes, int64(2048))
	require.Equal(t, uint64(1), st.Evictions)
	require.Nil(t, newOutputCache(0, 1, time.Minute))
}

// A task's workspace holds its working directory and the paths of its
// environment (HOME, TMPDIR): two workspaces with the same files share
// outputs, and a workspace that does not hold the working directory is
// refused.
func TestCacheSharesWorkspaces(t *testing.T) {
	t.Parallel()
	cfg, count := cacheConfig(t)
	e, root := newExec(t, cfg)
	lint := lintTool(t)
	call := func(ws, dir string) Result {
		t.Helper()
		write(t, filepath.Join(dir, "a.txt"), "fine")
		res, err := e.Execute(context.Background(), Invocation{Command: lint, WorkingDir: dir, Workspace: ws,
			Env: map[string]string{"COUNT": count, "HOME": ws, "TMPDIR": filepath.Join(ws, ".tmp")}})
		require.NoError(t, err)
		return res
	}
	one, two, three := filepath.Join(root, "one"), filepath.Join(root, "two"), filepath.Join(root, "three")
	require.False(t, call(one, filepath.Join(one, "src")).Cached)
	res := call(two, filepath.Join(two, "src"))
	require.True(t, res.Cached, "the same files and environment, in another workspace")
	require.Equal(t, filepath.Join(two, "src", "a.txt")+": fine\n", res.Stdout)
	require.False(t, call(two, filepath.Join(two, "lib")).Cached, "another place in the workspace")
	write(t, filepath.Join(three, "src", "a.txt"), "fine")
	_, err := e.Execute(context.Background(), Invocation{Command: lint, WorkingDir: filepath.Join(three, "src"), Workspace: one})
	require.ErrorIs(t, err, ErrOutsideWorkspace, "a workspace that does not hold the directory is refused")
	require.Equal(t, 2, runs(t, count))

	// Another scope (another user) is not served the first scope's output.
	scoped := func(scope string) Result {
		t.Helper()
		res, err := e.Execute(context.Background(), Invocation{Command: lint, WorkingDir: filepath.Join(three, "src"), Workspace: three,
			Env: map[string]string{"COUNT": count, "HOME": three, "TMPDIR": filepath.Join(three, ".tmp")}, CacheScope: scope})
		require.NoError(t, err)
		return res
	}
	require.False(t, scoped("tenant\x00alice").Cached)
	require.True(t, scoped("tenant\x00alice").Cached)
	require.False(t, scoped("tenant\x00bob").Cached)
	require.Equal(t, 4, runs(t, count))
}

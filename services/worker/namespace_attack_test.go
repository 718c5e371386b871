package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/toolexec"
)

// nsAttack builds the attacker's program of the namespace tests.
func nsAttack(t *testing.T) string {
	return testenv.Program(t, "sylk.dev/sylk/pkg/toolexec/testdata/nsattack", "SYLK_TEST_NSATTACK")
}

// A task can hand a descriptor of its directory to another task of its
// user that is still running (through a socket in their Go cache), and so
// outlive its namespaces. A directory is therefore reused only for a later
// task of the same user: another user's task never starts in a directory
// that such a descriptor may still name.
func TestNamespacedReusedDirectoryHeldByAnotherTask(t *testing.T) {
	t.Parallel()
	attack := nsAttack(t)
	cfg := testConfig(t)
	cfg.CacheRoot = t.TempDir()
	cfg.Tools.Namespaces = toolexec.NamespacesOn
	cfg.Tools.TaskInit = testenv.TaskInit(t)
	cfg.Tools.Cgroup = ""
	// Unix sockets, which the default network refuses, are what the
	// descriptor travels through: allowed here, so that the attack gets as
	// far as the directory it would reach.
	cfg.Tools.Network = toolexec.NetworkHost
	s := offlineService(t, cfg)
	s.scratch = newScratchPool(cfg.WorkspaceRoot, scratchReuse(cfg, s.exec))
	t.Cleanup(s.scratch.close)
	run := func(tenant, user, cmd string) *taskv1.TaskResult {
		d := dispatch(cmd)
		d.TenantId, d.UserId = tenant, user
		out, _ := s.runTask(context.Background(), "engineer", d)
		return out.msg
	}
	gocache, _, err := s.userCaches("tenant-m", "mallory")
	require.NoError(t, err)
	ready, proceed := filepath.Join(gocache, "ready"), filepath.Join(gocache, "proceed")
	hold := filepath.Join(t.TempDir(), "hold")
	for _, f := range []string{ready, proceed, hold} {
		require.NoError(t, syscall.Mkfifo(f, 0o600))
	}
	// Victor's task runs as the task user when the tests run as root.
	require.NoError(t, os.Chmod(filepath.Dir(hold), 0o755))
	require.NoError(t, os.Chmod(hold, 0o666))

	// Mallory's first task waits for a descriptor.
	holder := make(chan *taskv1.TaskResult, 1)
	go func() {
		holder <- run("tenant-m", "mallory", `pwd; `+attack+` recvfd "$GOCACHE/s" "$GOCACHE/ready" "$GOCACHE/proceed"`)
	}()
	listening := make(chan struct{})
	go func() {
		_, _ = os.ReadFile(ready)
		close(listening)
	}()
	select {
	case <-listening:
	case r := <-holder:
		t.Fatalf("the holder ended early: %s%s", r.GetStdout(), r.GetStderr())
	}
	// Her second task sends it its directory and ends.
	sender := run("tenant-m", "mallory", `pwd; `+attack+` sendfd "$GOCACHE/s" . .tmp`)
	require.Zero(t, sender.GetExitCode(), sender.GetStderr())
	// Victor's task writes his files and waits.
	victim := make(chan *taskv1.TaskResult, 1)
	go func() {
		victim <- run("tenant-v", "victor", "pwd; echo s3cret > victor-secret; echo t > .tmp/victor-tmp; cat "+hold)
	}()
	w, err := os.OpenFile(hold, os.O_WRONLY, 0) // once Victor's files are there
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(proceed, []byte("go\n"), 0))
	got := <-holder
	require.NoError(t, w.Close())
	v := <-victim
	require.Zero(t, v.GetExitCode(), v.GetStderr())
	t.Logf("sender in %s, victim in %s; holder:\n%s%s", sender.GetStdout(), v.GetStdout(), got.GetStdout(), got.GetStderr())
	require.Zero(t, got.GetExitCode(), got.GetStderr())
	require.NotContains(t, got.GetStdout(), "victor-", "a task of another user listed the victim's directory")
	dirOf := func(r *taskv1.TaskResult) string { d, _, _ := strings.Cut(r.GetStdout(), "\n"); return d }
	require.NotEqual(t, dirOf(sender), dirOf(v))
	// Mallory's own later tasks still reuse her directories.
	again := run("tenant-m", "mallory", "pwd")
	require.Contains(t, []string{dirOf(sender), dirOf(got)}, dirOf(again))
}

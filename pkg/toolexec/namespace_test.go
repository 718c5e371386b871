package toolexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// namespacedConfig starts commands in namespaces of their own, through a
// freshly built init program.
func namespacedConfig(t *testing.T) Config {
	cfg := testConfig()
	cfg.Namespaces = NamespacesOn
	cfg.TaskInit = testenv.TaskInit(t)
	return cfg
}

// In namespaces of its own a command cannot name another task's
// directory (so cannot change its permissions either), sees only its own
// processes, and has a /dev/shm of its own; its status, output and working
// directory are as without.
func TestNamespacedCommand(t *testing.T) {
	t.Parallel()
	writable := t.TempDir()
	key := filepath.Join(t.TempDir(), "service.key")
	require.NoError(t, os.WriteFile(key, []byte("the service's key"), 0o600))
	cfg := namespacedConfig(t)
	cfg.ConfineWritable = []string{writable}
	cfg.ConfineHidden = []string{key}
	e, a, b, outside := confinedSetup(t, cfg)
	ok, why := e.Namespaced()
	require.True(t, ok, "%v", why)

	run := func(script string) Result {
		t.Helper()
		return shell(t, e, a, script)
	}
	succeeds := func(script string) string {
		t.Helper()
		res := run(script)
		require.Zero(t, res.ExitCode, "%s: %s", script, res.Stderr)
		return res.Stdout
	}
	// Its own directory, by any name, and what lies outside the root.
	require.Equal(t, a+"\n", succeeds("pwd"))
	require.Equal(t, "hi\n", succeeds("echo hi > x && cat "+filepath.Join(a, "x")))
	require.Equal(t, "readable", succeeds("cat "+filepath.Join(outside, "readme")))
	succeeds("echo cached > " + filepath.Join(writable, "c"))
	require.Equal(t, 3, run("exit 3").ExitCode)
	// The other workspace is not there at all.
	res := run("chmod 777 ../b")
	require.NotZero(t, res.ExitCode)
	require.Contains(t, res.Stderr, "No such file")
	require.NotZero(t, run("test -e "+filepath.Join(b, "secret")).ExitCode)
	fi, err := os.Stat(b)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the sibling's permissions are unchanged")
	// A hidden file can be neither read nor changed.
	for _, script := range []string{"cat " + key, "chmod 666 " + key, "touch " + key, "echo x > " + key} {
		res := run(script)
		require.NotZero(t, res.ExitCode, script)
		require.NotContains(t, res.Stdout, "the service's key")
	}
	fi, err = os.Stat(key)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	// Its own processes only: the init program is process 1.
	require.Equal(t, "sylk-task-init\n", succeeds("cat /proc/1/comm"))
	// ... which it can neither read nor trace: its other threads still
	// hold the namespaces' capabilities.
	require.NotZero(t, run("cat /proc/1/environ").ExitCode)
	require.NotZero(t, run("head -c 1 /proc/1/mem").ExitCode)
	procs := strings.Fields(succeeds("ls /proc | grep '^[0-9]' | tr '\\n' ' '"))
	require.Less(t, len(procs), 6, "processes seen: %v", procs)
	// /dev/shm of its own: what one command leaves there, the next one and
	// the machine do not see.
	succeeds("echo shared > /dev/shm/sylk-ns-test")
	require.NotZero(t, run("test -e /dev/shm/sylk-ns-test").ExitCode)
	_, err = os.Stat("/dev/shm/sylk-ns-test")
	require.ErrorIs(t, err, os.ErrNotExist)
}

// Whatever a command leaves running ends with it, even a process that left
// its session and cleared its environment, with no cgroup to find it by.
func TestNamespacedLeftoversEnd(t *testing.T) {
	t.Parallel()
	cfg := namespacedConfig(t)
	cfg.Cgroup = ""
	e, root := newExec(t, cfg)
	marker := "sylk-leftover-" + testenv.ID()
	res, err := e.Execute(context.Background(), Invocation{Command: "sh",
		Args:       []string{"-c", "setsid env -i sh -c 'exec -a " + marker + " sleep 300' </dev/null >/dev/null 2>&1 & echo started"},
		WorkingDir: root, Workspace: root})
	require.NoError(t, err)
	require.Equal(t, "started\n", res.Stdout)
	require.Empty(t, testenv.ProcessesWith(t, marker), "the left-behind process was killed with the command")
}

// A stopped command goes through the whole kill sequence as without
// namespaces: SIGINT reaches it, and it is reported stopped by SIGINT.
func TestNamespacedStop(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, namespacedConfig(t))
	ctx, cancel := context.WithCancel(context.Background())
	res, err := e.Execute(ctx, Invocation{Command: "sh", Args: []string{"-c", "echo up; exec sleep 300"},
		WorkingDir: root, Workspace: root, StreamTo: func(stream, line string) {
			if line == "up" {
				cancel()
			}
		}})
	require.NoError(t, err)
	require.True(t, res.Cancelled)
	require.Equal(t, "SIGINT", res.Kill.ExitedAfter)
	require.Equal(t, 130, res.ExitCode)
}

// With the network off, a command has a network namespace whose only
// interface is loopback.
func TestNamespacedNetworkNone(t *testing.T) {
	t.Parallel()
	cfg := namespacedConfig(t)
	cfg.Network = NetworkNone
	e, root := newExec(t, cfg)
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.MissingTool(t, "ip (iproute2)")
	}
	res := shell(t, e, root, "ip -o link; readlink /proc/self/ns/net")
	require.Zero(t, res.ExitCode, res.Stderr)
	own, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	require.NotContains(t, res.Stdout, own)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.Len(t, lines, 2, res.Stdout)
	require.Contains(t, lines[0], "lo: <LOOPBACK,UP")
}

// Settings that cannot work are refused: namespaces asked for without the
// program, and no network without namespaces.
func TestNamespacesRefused(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Namespaces = NamespacesOn
	cfg.TaskInit = filepath.Join(t.TempDir(), "missing")
	b, err := NewBoundary(t.TempDir())
	require.NoError(t, err)
	_, err = New(cfg, b, nil)
	require.ErrorContains(t, err, "toolexec.task-init")

	cfg.Confine, cfg.Network = false, NetworkNone
	require.ErrorContains(t, cfg.Validate(), "toolexec.network")

	// Auto without the program runs commands as before, and says why.
	cfg = testConfig()
	cfg.TaskInit = ""
	e, err := New(cfg, b, nil)
	require.NoError(t, err)
	ok, why := e.Namespaced()
	require.False(t, ok)
	require.ErrorContains(t, why, "sylk-task-init")
}

// A service that is not root starts commands through a relay (the init
// program makes the namespaces itself); commands run there as directly.
func TestNamespacedThroughRelay(t *testing.T) {
	t.Parallel()
	e, a, _, _ := confinedSetup(t, namespacedConfig(t))
	e.ns.relay = true
	res := shell(t, e, a, "cat /proc/1/comm; chmod 777 ../b; exit 4")
	require.Equal(t, 4, res.ExitCode, res.Stderr)
	require.Equal(t, "sylk-task-init\n", res.Stdout)
	require.Contains(t, res.Stderr, "No such file")

	ctx, cancel := context.WithCancel(context.Background())
	res, err := e.Execute(ctx, Invocation{Command: "sh", Args: []string{"-c", "echo up; exec sleep 300"},
		WorkingDir: a, Workspace: a, StreamTo: func(stream, line string) { cancel() }})
	require.NoError(t, err)
	require.Equal(t, "SIGINT", res.Kill.ExitedAfter)
}

// BenchmarkExecuteNoopNamespaced is BenchmarkExecuteNoop's confined no-op
// in namespaces of its own, started directly (a root service) and through
// the relay (any other).
func BenchmarkExecuteNoopNamespaced(b *testing.B) {
	init := testenv.TaskInit(b)
	for _, relay := range []bool{false, true} {
		b.Run("relay="+strconv.FormatBool(relay), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Namespaces, cfg.TaskInit = NamespacesOn, init
			root := b.TempDir()
			bd, err := NewBoundary(root)
			require.NoError(b, err)
			e, err := New(cfg, bd, nil)
			require.NoError(b, err)
			b.Cleanup(e.Close)
			e.ns.relay = e.ns.relay || relay
			for b.Loop() {
				res, err := e.Execute(context.Background(), Invocation{Command: "true", WorkingDir: root})
				require.NoError(b, err)
				require.Zero(b, res.ExitCode, res.Stderr)
			}
		})
	}
}

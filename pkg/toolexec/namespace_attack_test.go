package toolexec

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"sylk.dev/sylk/pkg/testenv"
)

// EnvNSAttack names a built testdata/nsattack program, for runs as a user
// who cannot build it.
const EnvNSAttack = "SYLK_TEST_NSATTACK"

// nsAttack builds testdata/nsattack, the attacker's program, into a
// directory any user may read.
func nsAttack(t *testing.T) string {
	return testenv.Program(t, "sylk.dev/sylk/pkg/toolexec/testdata/nsattack", EnvNSAttack)
}

// nsRelay runs the test directly and through the relay.
func nsRelay(t *testing.T, f func(t *testing.T, relay bool)) {
	for _, relay := range []bool{false, true} {
		name := "direct"
		if relay {
			name = "relay"
		}
		t.Run(name, func(t *testing.T) { f(t, relay) })
	}
}

// A command cannot reach another task's pseudo-terminal: each command has
// a devpts instance of its own, as it has a /dev/shm of its own.
func TestNamespacedPseudoTerminals(t *testing.T) {
	t.Parallel()
	attack := nsAttack(t)
	nsRelay(t, func(t *testing.T, relay bool) {
		e, a, b, _ := confinedSetup(t, namespacedConfig(t))
		e.ns.relay = e.ns.relay || relay
		opened := make(chan string, 1)
		stdinR, stdinW := io.Pipe()
		t.Cleanup(func() { _ = stdinW.Close() })
		victim := make(chan Result, 1)
		go func() {
			res, err := e.Execute(context.Background(), Invocation{Command: attack, Args: []string{"ptyvictim"},
				WorkingDir: b, Workspace: b, Stdin: stdinR, StreamTo: func(stream, line string) {
					if strings.HasPrefix(line, "pty ") {
						opened <- line
					}
				}})
			if err != nil {
				res.Stderr += err.Error()
			}
			_ = stdinR.Close()
			victim <- res
		}()
		var line string
		select {
		case line = <-opened:
		case res := <-victim:
			t.Fatalf("the victim did not open a terminal: %s%s", res.Stdout, res.Stderr)
		}
		t.Log(line)
		res, err := e.Execute(context.Background(), Invocation{Command: attack, Args: []string{"ptyattack"},
			WorkingDir: a, Workspace: a})
		require.NoError(t, err)
		require.Zero(t, res.ExitCode, res.Stderr)
		t.Log(res.Stdout)
		_, _ = stdinW.Write([]byte("\n"))
		_ = stdinW.Close()
		got := <-victim
		require.Zero(t, got.ExitCode, got.Stderr)
		require.NotContains(t, res.Stdout, "write /dev/pts/")
		require.NotContains(t, got.Stdout, "forged", "another task wrote to the victim's terminal")
	})
}

// A command has a session keyring of its own. The service has one from
// its container runtime (runc) or systemd, which every command would
// otherwise share: a key one task adds there (or the service's own) would
// be another's to read, and any task could clear it.
func TestNamespacedSessionKeyring(t *testing.T) {
	t.Parallel()
	attack := nsAttack(t)
	if os.Getenv("SYLK_TOOLEXEC_KEYRING") != "" {
		sessionKeyringChild(t, attack) // this is the child
		return
	}
	// The test binary runs itself in a session keyring of its own, as a
	// service is started.
	cmd := exec.Command(attack, "keysession", os.Args[0], "-test.run=^TestNamespacedSessionKeyring$", "-test.v")
	cmd.Env = append(os.Environ(), "SYLK_TOOLEXEC_KEYRING=1", EnvNSAttack+"="+attack, "SYLK_TEST_TASK_INIT="+testenv.TaskInit(t))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestNamespacedSessionKeyring")
}

func sessionKeyringChild(t *testing.T, attack string) {
	_, err := unix.AddKey("user", "sylk-service-key", []byte("service secret"), unix.KEY_SPEC_SESSION_KEYRING)
	require.NoError(t, err)
	nsRelay(t, func(t *testing.T, relay bool) {
		e, a, b, _ := confinedSetup(t, namespacedConfig(t))
		e.ns.relay = e.ns.relay || relay
		run := func(dir string, args ...string) Result {
			res, err := e.Execute(context.Background(), Invocation{Command: attack, Args: args, WorkingDir: dir, Workspace: dir})
			require.NoError(t, err)
			return res
		}
		res := run(b, "keyadd", "sylk-victim-key", "victim secret")
		require.Zero(t, res.ExitCode, res.Stderr)
		for _, k := range []string{"sylk-victim-key", "sylk-service-key"} {
			res := run(a, "keyread", k)
			require.NotZero(t, res.ExitCode, "%s: %s", k, res.Stdout)
			require.NotContains(t, res.Stdout, "secret")
		}
	})
}

// The init program outlives whatever signal the command sends it (those
// that would make the Go runtime crash included) and exits with the
// command's status, not its own.
func TestNamespacedInitOutlivesTheCommandsSignals(t *testing.T) {
	t.Parallel()
	nsRelay(t, func(t *testing.T, relay bool) {
		e, a, _, _ := confinedSetup(t, namespacedConfig(t))
		e.ns.relay = e.ns.relay || relay
		for _, sig := range []string{"ABRT", "ILL", "TRAP", "SYS", "STKFLT", "SEGV", "BUS", "FPE", "QUIT", "HUP", "TSTP"} {
			res := shell(t, e, a, "kill -"+sig+" 1 && echo sent; exit 3")
			require.Equal(t, 3, res.ExitCode, "SIG%s: %s%s", sig, res.Stdout, res.Stderr)
			require.NotContains(t, res.Stderr, "goroutine", sig)
		}
	})
}

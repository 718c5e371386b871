package toolexec

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// Environment of the child of TestCommandsEndWithTheExecutorsProcess.
const (
	envDieMode  = "SYLK_TOOLEXEC_DIE_MODE"
	envDieRoot  = "SYLK_TOOLEXEC_DIE_ROOT"
	envDieToken = "SYLK_TOOLEXEC_DIE_TOKEN"
)

// dieModes are the ways commands are started whose processes must end with
// the executor's: in namespaces, through the reaper (confined or not), and
// bare (no task init program: the command itself ends, and the next
// executor's start sweeps what it started).
var dieModes = map[string]func(*Config){
	"namespaces": func(c *Config) { c.Namespaces = NamespacesOn },
	"reaper":     func(c *Config) { c.Namespaces, c.Confine, c.Network = NamespacesOff, false, NetworkHost },
	"confined-reaper": func(c *Config) {
		c.Namespaces = NamespacesOff
	},
	"bare": func(c *Config) {
		c.Namespaces, c.Confine, c.Network, c.TaskInit = NamespacesOff, false, NetworkHost, "/nonexistent/sylk-task-init"
	},
}

// An executor's process killed with SIGKILL while a command runs leaves
// nothing of it running: neither the command's background process in its
// group nor one that left its session. The test binary runs itself as the
// executor's process, and kills it.
func TestCommandsEndWithTheExecutorsProcess(t *testing.T) {
	if mode := os.Getenv(envDieMode); mode != "" {
		runUntilKilled(t, mode) // this is the child
		return
	}
	t.Parallel()
	init := testenv.TaskInit(t)
	// One after the other, bare last: its sweep kills what any dead
	// executor left.
	for _, mode := range []string{"namespaces", "reaper", "confined-reaper", "bare"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "confined-reaper" && LandlockABI() == 0 {
				t.Skip("no Landlock here")
			}
			// Digits: sleep takes "3600.<token>" for seconds.
			token := strconv.FormatUint(rand.Uint64(), 10)
			cmd := exec.Command(os.Args[0], "-test.run=^TestCommandsEndWithTheExecutorsProcess$")
			cmd.Env = append(os.Environ(), envDieMode+"="+mode, envDieRoot+"="+t.TempDir(), envDieToken+"="+token,
				testenv.EnvTaskInit+"="+init)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			var pids []int
			require.Eventually(t, func() bool {
				pids = processesWith(token)
				return len(pids) == 2
			}, 30*time.Second, 20*time.Millisecond, "the command's processes did not start: %s", &out)
			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()
			if mode == "bare" {
				// Nothing but the command's first process had a
				// parent-death signal: the next start sweeps the rest.
				require.Eventually(t, func() bool { return killDeadOwners() >= 0 && len(processesWith(token)) == 0 },
					10*time.Second, 20*time.Millisecond, "left running: %v", pids)
				return
			}
			require.Eventually(t, func() bool { return len(processesWith(token)) == 0 },
				10*time.Second, 20*time.Millisecond, "left running: %v", pids)
		})
	}
}

// runUntilKilled runs a command that leaves a process in its group and one
// in a session of its own, until the parent test kills this process.
func runUntilKilled(t *testing.T, mode string) {
	cfg := testConfig()
	cfg.DefaultTimeout, cfg.MaxTimeout = time.Hour, time.Hour
	cfg.TaskInit = os.Getenv(testenv.EnvTaskInit)
	dieModes[mode](&cfg)
	root := os.Getenv(envDieRoot)
	// The task user passes through the parent's directories.
	require.NoError(t, os.Chmod(root, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(root), 0o711))
	b, err := NewBoundary(root)
	require.NoError(t, err)
	e, err := New(cfg, b, nil)
	require.NoError(t, err)
	defer e.Close()
	token := os.Getenv(envDieToken)
	res, err := e.Execute(context.Background(), Invocation{Command: "sh", Args: []string{"-c",
		"sleep 3600." + token + "1 & setsid sleep 3600." + token + "2 & wait"}, WorkingDir: root})
	t.Fatalf("the command ended before this process was killed: %v %+v", err, res)
}

// processesWith lists the live sleep processes (not zombies) whose command
// line holds token.
func processesWith(token string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix(cl, []byte("sleep\x00")) || !bytes.Contains(cl, []byte(token)) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && strings.HasPrefix(string(st[i+1:]), " Z") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

package toolexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

func testConfig() Config {
	c := DefaultConfig()
	c.DefaultTimeout = 5 * time.Second
	c.MaxTimeout = 20 * time.Second
	c.ExtendOnOutput = 400 * time.Millisecond
	c.InterruptGrace = 300 * time.Millisecond
	c.TerminateGrace = 300 * time.Millisecond
	c.CleanupTimeout = time.Second
	c.AcquireTimeout = 200 * time.Millisecond
	c.Slots = 8
	// Tests that run as root without namespaces run their commands as
	// root (the namespaced ones run them as the task user).
	c.UnsafeRunTasksAsRoot = true
	return c
}

func newExec(t *testing.T, cfg Config) (*Executor, string) {
	t.Helper()
	root := t.TempDir()
	// The task user passes through the test's directory to its
	// workspaces.
	require.NoError(t, os.Chmod(filepath.Dir(root), 0o711))
	b, err := NewBoundary(root)
	require.NoError(t, err)
	e, err := New(cfg, b, nil)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e, root
}

// streamLog collects StreamTo calls.
type streamLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *streamLog) add(stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, stream+":"+line)
}

func (l *streamLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func (l *streamLog) count(prefix string) int {
	n := 0
	for _, s := range l.snapshot() {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// A command shares the executor's user, yet cannot read the secrets in the
// executor's startup environment (which StripEnv keeps out of its own)
// through /proc, nor the executor's memory. The test binary runs itself
// with a secret in its startup environment, as a service is started.
func TestCommandsCannotReadTheExecutorsProcess(t *testing.T) {
	t.Parallel()
	if os.Getenv("SYLK_TOOLEXEC_PROBE") != "" {
		probeExecutorsProcess(t) // this is the child
		return
	}
	bin := os.Args[0]
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// Root reads any process's /proc files; services run as a user
		// of their own (the images' 65532), so the child runs as nobody,
		// from a copy of the test binary that nobody may run.
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o755))
		for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			require.NoError(t, os.Chmod(d, 0o755))
		}
		// A hard link when it can be: a copy written here could still be
		// open for writing in a process another test is forking at that
		// moment, and exec would fail with "text file busy".
		copied := filepath.Join(dir, "toolexec.test")
		if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm()&0o005 != 0o005 || os.Link(bin, copied) != nil {
			raw, err := os.ReadFile(bin)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(copied, raw, 0o755))
		}
		bin = copied
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	cmd := exec.Command(bin, "-test.run=^TestCommandsCannotReadTheExecutorsProcess$", "-test.v")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "SYLK_TOOLEXEC_PROBE=1", "SYLK_POSTGRES_DSN=postgres://sylk:leak-in-environ@db/sylk")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "probe ran")
	require.NotContains(t, string(out), "leak-in-environ")
}

// probeExecutorsProcess is what the child of
// TestCommandsCannotReadTheExecutorsProcess runs: commands that try to read
// its environment and memory.
func probeExecutorsProcess(t *testing.T) {
	e, root := newExec(t, testConfig())
	for _, probe := range []string{
		`cat /proc/$PPID/environ`,
		`tr '\0' '\n' < /proc/$PPID/environ`,
		`head -c 64 /proc/$PPID/mem`,
	} {
		res, err := e.Execute(context.Background(), Invocation{Command: probe, WorkingDir: root})
		require.NoError(t, err)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", probe, res.Stdout)
		t.Logf("%s: exit %d: %s%s", probe, res.ExitCode, res.Stdout, res.Stderr)
	}
	t.Log("probe ran")
}

// Not parallel: it sets environment variables of the test process.
func TestEnvSecretsAreStripped(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "leak-1")
	t.Setenv("FOO_SECRET", "leak-2")
	t.Setenv("AWS_REGION", "leak-3")
	t.Setenv("DB_PASSWORD", "leak-4")
	t.Setenv("SYLK_POSTGRES_DSN", "leak-5")
	e, root := newExec(t, testConfig())
	res, err := e.Execute(context.Background(), Invocation{Command: "env", WorkingDir: root, Env: map[string]string{"X": "1"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.NotContains(t, res.Stdout, "leak-")
	require.Contains(t, res.Stdout, "PATH=")
	require.Contains(t, res.Stdout, "\nX=1\n")
}

func TestIsSecretName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"OPENAI_API_KEY": true, "MY_TOKEN": true, "aws_access_key_id": true, "GITHUB_TOKEN": true,
		"PATH": false, "HOME": false, "TOKENIZER": false, "LANG": false,
	} {
		require.Equal(t, want, IsSecretName(name, nil), name)
	}
}

func TestWorkingDirBoundary(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, testConfig())
	require.NoError(t, os.Symlink("/etc", filepath.Join(root, "etc-link")))
	sibling := root + "2"
	require.NoError(t, os.Mkdir(sibling, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(sibling) })
	require.NoError(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	tests := []struct {
		name, dir string
		want      error
	}{
		{"relative", "rel", ErrNotAbsolute},
		{"system dir", "/etc", ErrOutsideBoundary},
		{"symlink out of the project", filepath.Join(root, "etc-link"), ErrOutsideBoundary},
		{"sibling with the root as prefix", sibling, ErrOutsideBoundary},
		{"dot-dot escape", filepath.Join(root, "sub", "..", ".."), ErrOutsideBoundary},
		{"inside", filepath.Join(root, "sub"), nil},
	}
	for _, tt := range tests {
		// Sequential: the "inside" case holds a slot while it runs, and the
		// others assert that a refused call never takes one.
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.Execute(context.Background(), Invocation{Command: "pwd", WorkingDir: tt.dir})
			if tt.want == nil {
				require.NoError(t, err)
				require.Equal(t, filepath.Join(root, "sub")+"\n", res.Stdout)
				return
			}
			require.ErrorIs(t, err, tt.want)
			require.Equal(t, 0, res.PID, "no process may be spawned")
			require.Zero(t, e.Pool().Stats().InUse, "no slot may be used")
		})
	}
	require.ErrorContains(t, func() error { _, err := NewBoundary("/etc"); return err }(), "cannot be roots")
}

func TestShellDetection(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, testConfig())
	res, err := e.Execute(context.Background(), Invocation{Command: "echo a | wc -c", WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, "2", strings.TrimSpace(res.Stdout))
	// Direct exec: the argument reaches the program verbatim, no expansion.
	res, err = e.Execute(context.Background(), Invocation{Command: "echo", Args: []string{"$HOME", "*"}, WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, "$HOME *\n", res.Stdout)
	for cmd, want := range map[string]bool{"ls": false, "go test ./...": false, "a && b": true, "a || b": true, "a; b": true,
		"ls *.go": true, "ls ?": true, "echo $X": true, "echo `x`": true, "a | b": true} {
		require.Equal(t, want, NeedsShell(cmd), cmd)
	}
	res, err = e.Execute(context.Background(), Invocation{Command: "no-such-tool-sylk", WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, 127, res.ExitCode)
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.DefaultTimeout = 300 * time.Millisecond
	e, root := newExec(t, cfg)
	start := time.Now()
	res, err := e.Execute(context.Background(), Invocation{Command: "sleep 120", WorkingDir: root})
	require.NoError(t, err)
	require.True(t, res.TimedOut)
	require.True(t, res.Killed)
	require.Equal(t, "SIGINT", res.KillSignal)
	require.Less(t, time.Since(start), 10*time.Second)

	def := DefaultConfig()
	def.UnsafeRunTasksAsRoot = true // when the tests run as root
	d, _ := newExec(t, def)
	require.Equal(t, 60*time.Second, d.BaseTimeout(Invocation{Command: "sleep 120"}))
	require.Equal(t, 30*time.Second, d.BaseTimeout(Invocation{Command: "git", Args: []string{"status"}}))
	require.Equal(t, 5*time.Minute, d.BaseTimeout(Invocation{Command: "go test ./..."}))
	require.Equal(t, 10*time.Minute, d.BaseTimeout(Invocation{Command: "go", Args: []string{"build", "./..."}}))
	require.Equal(t, 10*time.Minute, d.BaseTimeout(Invocation{Command: "npm run build"}))
	require.Equal(t, 7*time.Second, d.BaseTimeout(Invocation{Command: "git", Timeout: 7 * time.Second}))
}

func TestAdaptiveTimeout(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.DefaultTimeout = 500 * time.Millisecond
	cfg.ExtendOnOutput = 500 * time.Millisecond
	cfg.MaxTimeout = 3 * time.Second
	tests := []struct {
		name     string
		cmd      string
		timedOut bool
		minDur   time.Duration
		maxDur   time.Duration
	}{
		// A meaningful line every 100ms for 1.5s: three times the base.
		{"meaningful output extends", `for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do echo "step $i"; sleep 0.1; done`, false, 1400 * time.Millisecond, 3 * time.Second},
		{"dots do not extend", `while :; do echo ...; sleep 0.05; done`, true, 500 * time.Millisecond, 2500 * time.Millisecond},
		{"spinners do not extend", `while :; do printf '|\r/\r-\r\\\r'; sleep 0.05; done`, true, 500 * time.Millisecond, 2500 * time.Millisecond},
		{"percentages do not extend", `while :; do echo 42%; sleep 0.05; done`, true, 500 * time.Millisecond, 2500 * time.Millisecond},
		{"max timeout wins", `while :; do echo working; sleep 0.05; done`, true, 3 * time.Second, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, root := newExec(t, cfg)
			res, err := e.Execute(context.Background(), Invocation{Command: tt.cmd, WorkingDir: root})
			require.NoError(t, err)
			require.Equal(t, tt.timedOut, res.TimedOut, "duration %s", res.Duration)
			require.GreaterOrEqual(t, res.Duration, tt.minDur)
			require.Less(t, res.Duration, tt.maxDur)
		})
	}
	require.True(t, IsNoise("  ...  "))
	require.True(t, IsNoise(""))
	require.True(t, IsNoise("|/-\\"))
	require.True(t, IsNoise("99%"))
	require.False(t, IsNoise("compiling 99%"))
}

func TestKillEscalation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, cmd, exited string
		sigterm, sigkill  bool
	}{
		// Each command says ready only once its traps are set, so the
		// cancellation cannot arrive before them.
		{"exits on SIGINT", "echo ready; exec sleep 100", "SIGINT", false, false},
		{"ignores SIGINT", "trap '' INT; echo ready; sleep 100 & wait; while :; do wait; done", "SIGTERM", true, false},
		{"ignores both", "trap '' INT TERM; echo ready; sleep 100 & while :; do wait; done", "SIGKILL", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, root := newExec(t, testConfig())
			log := &streamLog{}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan Result, 1)
			go func() {
				res, err := e.Execute(ctx, Invocation{Command: tt.cmd, WorkingDir: root, StreamTo: log.add})
				require.NoError(t, err)
				done <- res
			}()
			require.Eventually(t, func() bool { return log.count("stdout:ready") == 1 }, 10*time.Second, 5*time.Millisecond)
			cancel()
			res := <-done
			require.True(t, res.Cancelled)
			require.True(t, res.Killed)
			require.True(t, res.Kill.SentSIGINT)
			require.Equal(t, tt.sigterm, res.Kill.SentSIGTERM)
			require.Equal(t, tt.sigkill, res.Kill.SentSIGKILL)
			require.Equal(t, tt.exited, res.Kill.ExitedAfter)
			require.Equal(t, tt.exited, res.KillSignal)
			require.Equal(t, 1, log.count("status:"+MsgStopping))
			require.Equal(t, b2i(tt.sigterm), log.count("status:"+MsgForceStopping))
			require.Equal(t, b2i(tt.sigkill), log.count("status:"+MsgKilled))
			require.Eventually(t, func() bool { return groupGone(res.PID) }, 5*time.Second, 10*time.Millisecond)
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// groupGone reports whether no live (non-zombie) process is in group pgid.
func groupGone(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 3 && f[0] != "Z" && f[3] == strconv.Itoa(pgid) {
			return false
		}
	}
	return true
}

func TestOrphansAreKilled(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result, 1)
	log := &streamLog{}
	go func() {
		res, err := e.Execute(ctx, Invocation{Command: "sh", Args: []string{"-c", "echo up; sleep 1000 & sleep 1000"}, WorkingDir: root, StreamTo: log.add})
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool { return log.count("stdout:up") == 1 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	res := <-done
	require.Eventually(t, func() bool { return groupGone(res.PID) }, 5*time.Second, 10*time.Millisecond)

	// A background process left behind by a command that exited normally.
	res, err := e.Execute(context.Background(), Invocation{Command: "sleep 1000 >/dev/null 2>&1 & echo bg", WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Eventually(t, func() bool { return groupGone(res.PID) }, 5*time.Second, 10*time.Millisecond)
}

// A process that left its command's process group (a new session) is out
// of the group kill's reach; the orphan sweeper kills it once its command
// ended, and not before.
func TestOrphansInANewSessionAreSwept(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		testenv.MissingTool(t, "setsid")
	}
	// Without a cgroup per command: in one, the escaped process would be
	// killed with its command (TestLeftoversAreKilledWithTheirCommand).
	cfg := testConfig()
	cfg.Cgroup = ""
	e, root := newExec(t, cfg)
	pidFile := filepath.Join(root, "escaped.pid")
	alive := func() bool {
		raw, err := os.ReadFile(pidFile)
		if err != nil || len(strings.TrimSpace(string(raw))) == 0 {
			return false
		}
		stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(raw)) + "/stat")
		if err != nil {
			return false
		}
		// The state follows the command name in parentheses: a zombie
		// is gone for this purpose.
		_, after, _ := strings.Cut(string(stat), ") ")
		return !strings.HasPrefix(after, "Z")
	}
	// The command waits for the escaped process to write its pid, so the
	// escape happened while the command ran.
	script := `setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' >/dev/null 2>&1 </dev/null &
while [ ! -s escaped.pid ]; do sleep 0.01; done; echo escaped`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	go func() {
		res, err := e.Execute(ctx, Invocation{Command: script + "; sleep 300", WorkingDir: root})
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, alive, 10*time.Second, 5*time.Millisecond)
	SweepOrphans()
	require.True(t, alive(), "a process of a running command is left alone")
	// The sweep that kills it may be this one or the sweeper's own, which
	// may come as soon as the command ends: the count is read before.
	killed := OrphansKilled()
	cancel()
	res := <-done
	require.True(t, res.Cancelled)
	require.True(t, alive(), "the group kill does not reach a process in its own session")
	SweepOrphans()
	require.Eventually(t, func() bool { return !alive() }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, OrphansKilled(), killed)

	// A chain of processes that each fork the next and exit changes pid
	// all the time; the sweep stops what it finds pass by pass, then kills
	// it with its process group.
	killed = OrphansKilled()
	chain := `setsid sh -c 'g() { : > alive; sleep 0.05; ( g & ); }; g' >/dev/null 2>&1 </dev/null; while [ ! -e alive ]; do sleep 0.01; done; echo chained`
	res, err := e.Execute(context.Background(), Invocation{Command: chain, WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, "chained\n", res.Stdout, res.Stderr)
	require.Eventually(t, func() bool { return len(sweeper.endedRunProcesses()) > 0 }, 5*time.Second, 5*time.Millisecond, "the chain outlived its command")
	SweepOrphans()
	require.Eventually(t, func() bool { return len(sweeper.endedRunProcesses()) == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, OrphansKilled(), killed)

	// A command cannot pose as another run: its own marker wins.
	res, err = e.Execute(context.Background(), Invocation{Command: "env", WorkingDir: root, Env: map[string]string{RunMarkerEnv: "forged"}})
	require.NoError(t, err)
	require.NotContains(t, res.Stdout, RunMarkerEnv+"=forged")
	require.Contains(t, res.Stdout, RunMarkerEnv+"="+sweeper.prefix)
}

// A process that left its command's session and cleared its environment
// carries no marker; it is re-parented to this process when its parent
// exits, and swept and reaped once its run has ended. Not parallel: a run
// of another test that began before it would keep it alive until that run
// ended.
func TestOrphansThatClearedTheirEnvironmentAreSwept(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		testenv.MissingTool(t, "setsid")
	}
	// Without a cgroup per command: in one, the escaped process would be
	// killed with its command (TestLeftoversAreKilledWithTheirCommand).
	cfg := testConfig()
	cfg.Cgroup = ""
	e, root := newExec(t, cfg)
	script := `setsid env -i /bin/sh -c 'echo $$ > escaped.pid; exec sleep 300' >/dev/null 2>&1 </dev/null &
while [ ! -s escaped.pid ]; do sleep 0.01; done; echo escaped`
	res, err := e.Execute(context.Background(), Invocation{Command: script, WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, "escaped\n", res.Stdout, res.Stderr)
	raw, err := os.ReadFile(filepath.Join(root, "escaped.pid"))
	require.NoError(t, err)
	pid := strings.TrimSpace(string(raw))
	env, err := os.ReadFile("/proc/" + pid + "/environ")
	require.NoError(t, err, "the escaped process runs")
	require.NotContains(t, string(env), RunMarkerEnv, "it carries no marker")
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	require.NoError(t, err)
	p, ok := parseStat(stat)
	require.True(t, ok)
	require.Equal(t, os.Getpid(), p.ppid, "adopted by this process")

	// Swept, and reaped: no zombie is left behind.
	require.Eventually(t, func() bool {
		SweepOrphans()
		_, err := os.Stat("/proc/" + pid)
		return errors.Is(err, os.ErrNotExist)
	}, 10*time.Second, 20*time.Millisecond)
}

// A process one of this process's own programs left behind is adopted
// too; once it has exited and stayed a zombie for staleZombie, it is
// reaped, where before it would have been reaped by init.
func TestOwnOrphansAreReaped(t *testing.T) {
	t.Parallel()
	newExec(t, testConfig()) // adopts orphans
	out, err := exec.Command("sh", "-c", "sleep 0.05 >/dev/null 2>&1 & echo $!").Output()
	require.NoError(t, err)
	pid := strings.TrimSpace(string(out))
	statOf := func() (adoptedProcess, bool) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return adoptedProcess{}, false
		}
		return parseStat(stat)
	}
	require.Eventually(t, func() bool {
		p, ok := statOf()
		return ok && p.zombie && p.ppid == os.Getpid()
	}, 10*time.Second, 10*time.Millisecond, "the orphan is adopted and exits")

	sweeper.sweeping.Lock()
	defer sweeper.sweeping.Unlock()
	now := time.Now()
	h := sweeper.horizon()
	_, kids := sweeper.scan(h)
	sweeper.reap(kids, h, now)
	_, ok := statOf()
	require.True(t, ok, "a fresh zombie in this process's session may be a program os/exec is about to wait for")
	sweeper.reap(kids, h, now.Add(staleZombie))
	_, ok = statOf()
	require.False(t, ok, "a stale one is reaped")
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	p, ok := parseStat([]byte("4242 (a (b) c) S 17 4242 4242 0 -1 4194560 97 0 0 0 0 0 0 0 20 0 1 0 123456 2490368 143 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"))
	require.True(t, ok)
	require.Equal(t, adoptedProcess{pid: 4242, ppid: 17, sid: 4242, start: 123456}, p)
	p, ok = parseStat([]byte("7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99"))
	require.True(t, ok)
	require.True(t, p.zombie)
	for _, bad := range []string{"", "7 x S 1", "7 (x) S 1 2 3", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19"} {
		_, ok := parseStat([]byte(bad))
		require.False(t, ok, bad)
	}
}

func TestPartialOutputOnCancel(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, testConfig())
	log := &streamLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result, 1)
	go func() {
		res, err := e.Execute(ctx, Invocation{Command: "echo one; echo two; echo three; exec sleep 100", WorkingDir: root, StreamTo: log.add})
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool { return log.count("stdout:") == 3 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	res := <-done
	require.True(t, res.Partial)
	require.Equal(t, "one\ntwo\nthree\n", res.Stdout)
	require.Contains(t, log.snapshot(), "status:"+MsgStopping)
}

func TestSmartTruncate(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 10000 {
		if i == 5000 {
			b.WriteString("error: x\n")
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	tr := SmartTruncate(b.String(), 1<<20, 50, 100)
	require.Len(t, tr.FirstLines, 50)
	require.Len(t, tr.LastLines, 100)
	require.Equal(t, "line 9999", tr.LastLines[99])
	require.Contains(t, tr.Important, "error: x")
	require.Equal(t, "1 errors, 0 warnings in 10000 lines", tr.Summary)
	require.False(t, tr.Truncated)

	big := strings.Repeat("x", 100) + "\n"
	tr = SmartTruncate(strings.Repeat(big, 11000), 1<<20, 50, 100)
	require.True(t, tr.Truncated)

	tr = SmartTruncate("a\nb\nc\n", 1<<20, 50, 100)
	require.Equal(t, "3 lines of output", tr.Summary)
	require.Equal(t, []string{"a", "b", "c"}, tr.FirstLines)
	require.Empty(t, tr.LastLines)
	require.Empty(t, tr.Important)
}

func TestOutputCapAndTruncationFromAProcess(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxOutputBytes = 64 << 10
	e, root := newExec(t, cfg)
	res, err := e.Execute(context.Background(), Invocation{Command: `i=0; while [ $i -lt 20000 ]; do if [ $i -eq 10000 ]; then echo "main.go:3:4: error: boom"; else echo "line $i"; fi; i=$((i+1)); done`, WorkingDir: root})
	require.NoError(t, err)
	require.True(t, res.StdoutTruncated)
	require.LessOrEqual(t, len(res.Stdout), 65<<10)
	require.NotNil(t, res.Truncated)
	require.True(t, res.Truncated.Truncated)
	require.Equal(t, 20000, res.Truncated.TotalLines)
	require.Contains(t, res.Truncated.Important, "main.go:3:4: error: boom")
	require.Equal(t, "1 errors, 0 warnings in 20000 lines", res.Truncated.Summary)
	require.Equal(t, "line 0", res.Truncated.FirstLines[0])
	require.Equal(t, "line 19999", res.Truncated.LastLines[len(res.Truncated.LastLines)-1])
}

func TestParserPrecedence(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, testConfig())
	e.RegisterParser("mytool", func(stdout, _ string, _ int) (any, bool) { return strings.ToUpper(stdout), true })
	bin := filepath.Join(root, "mytool")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho parsed\n"), 0o755))
	res, err := e.Execute(context.Background(), Invocation{Tool: "mytool", Command: bin, WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, "PARSED\n", res.Parsed)
	require.Nil(t, res.Truncated)

	res, err = e.Execute(context.Background(), Invocation{Command: "echo unknown", WorkingDir: root})
	require.NoError(t, err)
	require.Nil(t, res.Parsed)
	require.NotNil(t, res.Truncated)

	d, ok := ParseGoDiagnostics("", "# pkg\n./a.go:3:5: undefined: x\n", 1)
	require.True(t, ok)
	require.Equal(t, []Diagnostic{{File: "./a.go", Line: 3, Column: 5, Message: "undefined: x"}}, d)
	_, ok = ParseGoDiagnostics("something else\n", "", 1)
	require.False(t, ok)
}

func TestPoolSaturationAndUserReserve(t *testing.T) {
	t.Parallel()
	p := NewPool(10, 20)
	require.Equal(t, 2, p.Stats().Reserve)
	var releases []func()
	for range 8 {
		r, err := p.Acquire(context.Background(), ClassPipeline, 50, time.Second, nil)
		require.NoError(t, err)
		releases = append(releases, r)
	}
	_, err := p.Acquire(context.Background(), ClassPipeline, 50, 50*time.Millisecond, nil)
	require.ErrorIs(t, err, ErrPoolTimeout)
	require.ErrorContains(t, err, "timeout waiting for resource")
	// User calls take the reserve at once.
	u1, err := p.Acquire(context.Background(), ClassUser, 100, 0, nil)
	require.NoError(t, err)
	u2, err := p.Acquire(context.Background(), ClassUser, 100, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 10, p.Stats().InUse)
	u1()
	u1() // idempotent
	u2()
	for _, r := range releases {
		r()
	}
	require.Zero(t, p.Stats().InUse)
}

func TestPoolUserPreemptsLowestPipeline(t *testing.T) {
	t.Parallel()
	p := NewPool(2, 0)
	var low, high error
	var mu sync.Mutex
	rl, err := p.Acquire(context.Background(), ClassPipeline, 10, time.Second, func(c error) { mu.Lock(); low = c; mu.Unlock() })
	require.NoError(t, err)
	_, err = p.Acquire(context.Background(), ClassPipeline, 90, time.Second, func(c error) { mu.Lock(); high = c; mu.Unlock() })
	require.NoError(t, err)
	got := make(chan func(), 1)
	go func() {
		r, err := p.Acquire(context.Background(), ClassUser, 100, 0, nil)
		require.NoError(t, err)
		got <- r
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return low != nil }, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	require.ErrorIs(t, low, ErrPreempted)
	require.NoError(t, high)
	mu.Unlock()
	rl() // the preempted call gives its slot up
	(<-got)()
}

func TestPoolWakesHigherPriorityFirst(t *testing.T) {
	t.Parallel()
	p := NewPool(1, 0)
	r, err := p.Acquire(context.Background(), ClassPipeline, 50, time.Second, nil)
	require.NoError(t, err)
	order := make(chan int, 2)
	for _, prio := range []int{10, 90} {
		go func() {
			rr, err := p.Acquire(context.Background(), ClassPipeline, prio, 10*time.Second, nil)
			require.NoError(t, err)
			order <- prio
			rr()
		}()
		require.Eventually(t, func() bool { return p.Stats().Waiting >= 1 }, 5*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { return p.Stats().Waiting == 2 }, 5*time.Second, time.Millisecond)
	r()
	require.Equal(t, 90, <-order)
	require.Equal(t, 10, <-order)
}

func TestExecuteUnderSaturatedPool(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Slots = 1
	cfg.UserReservePercent = 0
	e, root := newExec(t, cfg)
	hold, err := e.Pool().Acquire(context.Background(), ClassPipeline, 50, time.Second, nil)
	require.NoError(t, err)
	_, err = e.Execute(context.Background(), Invocation{Command: "true", WorkingDir: root})
	require.ErrorIs(t, err, ErrPoolTimeout)
	hold()
	res, err := e.Execute(context.Background(), Invocation{Command: "true", WorkingDir: root})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
}

func TestWritePath(t *testing.T) {
	t.Parallel()
	project := t.TempDir()
	staging := t.TempDir()
	outside := t.TempDir()
	b, err := NewBoundary(project, staging)
	require.NoError(t, err)
	var mu sync.Mutex
	var audit []WriteRecord
	fs, err := NewFS(b, project, staging, func(_ context.Context, r WriteRecord) { mu.Lock(); audit = append(audit, r); mu.Unlock() })
	require.NoError(t, err)
	ctx := context.Background()

	require.NoError(t, os.Symlink(outside, filepath.Join(project, "link")))
	_, err = fs.Write(ctx, "s1", "", filepath.Join(project, "link", "f"), []byte("x"))
	require.ErrorContains(t, err, "outside allowed boundaries")
	_, statErr := os.Stat(filepath.Join(outside, "f"))
	require.True(t, errors.Is(statErr, os.ErrNotExist))
	require.Empty(t, audit)

	orig := filepath.Join(project, "a.txt")
	require.NoError(t, os.WriteFile(orig, []byte("original"), 0o644))
	target, err := fs.Write(ctx, "s1", "p1", orig, []byte("staged!"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(staging, "p1", "a.txt"), target)
	got, _ := os.ReadFile(orig)
	require.Equal(t, "original", string(got))
	got, _ = os.ReadFile(target)
	require.Equal(t, "staged!", string(got))
	require.Len(t, audit, 1)
	require.Equal(t, WriteRecord{Session: "s1", Pipeline: "p1", Path: orig, Target: target, Size: 7, Time: audit[0].Time}, audit[0])

	ro := filepath.Join(project, "ro")
	require.NoError(t, os.Mkdir(ro, 0o555))
	_, err = fs.Write(ctx, "s1", "", filepath.Join(ro, "f"), []byte("x"))
	var uf *UserFixableError
	require.ErrorAs(t, err, &uf)
	require.Equal(t, "Check permissions: ls -la "+ro, uf.Fix)

	target, err = fs.Write(ctx, "s1", "", filepath.Join(project, "new", "dir", "b.txt"), []byte("b"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(project, "new", "dir", "b.txt"), target)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultConfig().Validate())
	bad := DefaultConfig()
	bad.DefaultTimeout = 0
	bad.MaxOutputBytes = 10
	bad.UserReservePercent = 90
	err := bad.Validate()
	require.ErrorContains(t, err, "toolexec.default-timeout")
	require.ErrorContains(t, err, "toolexec.max-output-bytes")
	require.ErrorContains(t, err, "toolexec.user-reserve-percent")
	var m durationMap
	require.NoError(t, m.Set("cargo  build=3m, make=1m"))
	require.Equal(t, 3*time.Minute, m["cargo build"])
}

// TestInvocationPathIsSearched: a program is looked up on the PATH the
// invocation gives the child (a guard wrapper put first wins).
func TestInvocationPathIsSearched(t *testing.T) {
	t.Parallel()
	e, root := newExec(t, testConfig())
	bin := filepath.Join(root, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\necho guarded \"$@\"\n"), 0o755))
	res, err := e.Execute(context.Background(), Invocation{Command: "git", Args: []string{"push"}, WorkingDir: root,
		Env: map[string]string{"PATH": bin + string(os.PathListSeparator) + os.Getenv("PATH")}})
	require.NoError(t, err)
	require.Equal(t, "guarded push\n", res.Stdout)
}

package toolexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// confinedSetup is an executor rooted at root holding two workspaces, a
// and b (b with a secret), and a directory outside the root.
func confinedSetup(t *testing.T, cfg Config) (e *Executor, a, b, outside string) {
	t.Helper()
	e, root := newExec(t, cfg)
	a, b = filepath.Join(root, "a"), filepath.Join(root, "b")
	require.NoError(t, os.Mkdir(a, 0o700))
	require.NoError(t, os.Mkdir(b, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(b, "secret"), []byte("b's secret"), 0o600))
	outside = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "readme"), []byte("readable"), 0o644))
	return e, a, b, outside
}

func shell(t *testing.T, e *Executor, dir, script string) Result {
	t.Helper()
	res, err := e.Execute(context.Background(), Invocation{Command: "sh", Args: []string{"-c", script}, WorkingDir: dir, Workspace: dir})
	require.NoError(t, err)
	return res
}

// A command reads the system and its own workspace and writes only the
// latter: other workspaces under the root are neither readable nor
// writable, nor reachable through a symlink; the rest of the machine is
// read-only unless configured writable; and the service that started it
// cannot be signalled.
func TestConfinedCommand(t *testing.T) {
	t.Parallel()
	writable := t.TempDir()
	cfg := testConfig()
	cfg.ConfineWritable = []string{writable}
	e, a, b, outside := confinedSetup(t, cfg)
	if LandlockABI() == 0 {
		// This kernel has no Landlock: commands run unconfined, and say so.
		require.False(t, e.Confined())
		require.Zero(t, shell(t, e, a, "cat ../b/secret").ExitCode)
		return
	}
	require.True(t, e.Confined())

	ok := func(script string) Result {
		t.Helper()
		res := shell(t, e, a, script)
		require.Zero(t, res.ExitCode, "%s: %s", script, res.Stderr)
		return res
	}
	denied := func(script string) {
		t.Helper()
		res := shell(t, e, a, script)
		require.NotZero(t, res.ExitCode, "%s ran: %s", script, res.Stdout)
		require.NotContains(t, res.Stdout, "b's secret")
	}
	// Its own workspace, in full: files, directories, renames across
	// directories, truncation, links.
	ok("mkdir -p d/e && echo hi > d/f && mv d/f d/e/g && : > d/e/g && ln -s e d/l && rm -r d")
	require.Equal(t, "hi\n", ok("echo hi > x && cat x").Stdout)
	// The system and what lies outside the root: readable, runnable.
	require.Equal(t, "readable", ok("cat "+filepath.Join(outside, "readme")).Stdout)
	ok("git --version && test -r /etc/passwd && echo x > /dev/null")
	// Another workspace under the root, however reached.
	denied("cat ../b/secret")
	denied("ls ../b")
	denied("echo planted > ../b/planted")
	ok("ln -s ../b link")
	denied("cat link/secret")
	denied("cat " + filepath.Join(b, "secret"))
	// Nor through the working directory of a process that runs in b.
	other := exec.Command("sleep", "30")
	other.Dir = b
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	denied("cat /proc/" + strconv.Itoa(other.Process.Pid) + "/cwd/secret")
	_, err := os.Stat(filepath.Join(b, "planted"))
	require.ErrorIs(t, err, os.ErrNotExist)
	// Outside the root: read-only, unless configured writable.
	denied("echo x > " + filepath.Join(outside, "new"))
	denied("rm " + filepath.Join(outside, "readme"))
	ok("echo cached > " + filepath.Join(writable, "cache"))
	if LandlockABI() >= 6 {
		denied("kill -0 " + strconv.Itoa(os.Getpid()))
		// Its own children, it may.
		ok(`sleep 5 & kill $!`)
	}

	// No capabilities, whoever runs the service (tests run as root, too),
	// so no device files either.
	status := ok("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status").Stdout
	require.Equal(t, 5, strings.Count(status, "\t0000000000000000\n"), status)
	denied("mkfifo f && mknod d c 1 3")
	ok("mkfifo fifo")

	// Only the commands are confined, never the service: its own threads
	// still write where its commands may not, after many commands.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { shell(t, e, a, "true") })
	}
	wg.Wait()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "by-the-service"), []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(b, "by-the-service"), []byte("x"), 0o600))
}

// Rulesets are reused for a workspace and their shared rules kept, but
// never stale: a workspace removed and made again at the same path is
// writable, and a directory that appeared beside the root is readable.
func TestConfinedRulesFollowTheFileSystem(t *testing.T) {
	t.Parallel()
	e, a, _, _ := confinedSetup(t, testConfig())
	if !e.Confined() {
		require.Zero(t, shell(t, e, a, "true").ExitCode)
		return
	}
	for range 2 {
		res := shell(t, e, a, "echo x > f && cat f")
		require.Zero(t, res.ExitCode, res.Stderr)
		require.NoError(t, os.RemoveAll(a))
		require.NoError(t, os.Mkdir(a, 0o700))
	}
	later := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(later, "new"), []byte("new"), 0o644))
	res := shell(t, e, a, "cat "+filepath.Join(later, "new"))
	require.Zero(t, res.ExitCode, res.Stderr)
	require.Equal(t, "new", res.Stdout)
}

// A working directory that a command turned into a symlink to another
// workspace is refused, rather than taken for a workspace of its own.
func TestWorkingDirMustStayInItsWorkspace(t *testing.T) {
	t.Parallel()
	e, a, b, _ := confinedSetup(t, testConfig())
	src := filepath.Join(a, "src")
	require.NoError(t, os.Mkdir(src, 0o700))
	inv := Invocation{Command: "sh", Args: []string{"-c", "cd .. && mv src src.real && ln -s ../b src"}, WorkingDir: src, Workspace: a}
	res, err := e.Execute(context.Background(), inv)
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Stderr)
	inv.Args = []string{"-c", "cat secret; echo pwned > injected"}
	_, err = e.Execute(context.Background(), inv)
	require.ErrorIs(t, err, ErrOutsideWorkspace)
	require.NoFileExists(t, filepath.Join(b, "injected"))
}

// A hidden directory named through a symlink before it exists is hidden
// where it comes to be.
func TestConfineHiddenNotYetMade(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(real, link))
	cfg := testConfig()
	cfg.ConfineHidden = []string{filepath.Join(link, "caches")}
	e, a, _, _ := confinedSetup(t, cfg)
	require.NoError(t, os.Mkdir(filepath.Join(real, "caches"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(real, "caches", "entry"), []byte("another tenant's"), 0o600))
	for _, p := range []string{filepath.Join(link, "caches", "entry"), filepath.Join(real, "caches", "entry")} {
		res := shell(t, e, a, "cat "+p)
		if !e.Confined() {
			continue
		}
		require.NotZero(t, res.ExitCode, p)
		require.NotContains(t, res.Stdout, "another tenant's")
	}
}

// Directories named hidden are out of reach like the root.
func TestConfineHidden(t *testing.T) {
	t.Parallel()
	repos := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(repos, "code.go"), []byte("another tenant's code"), 0o644))
	cfg := testConfig()
	cfg.ConfineHidden = []string{repos}
	e, a, _, outside := confinedSetup(t, cfg)
	res := shell(t, e, a, "cat "+filepath.Join(repos, "code.go"))
	if !e.Confined() {
		require.Zero(t, res.ExitCode)
		return
	}
	require.NotZero(t, res.ExitCode)
	require.NotContains(t, res.Stdout, "another tenant's code")
	res = shell(t, e, a, "cat "+filepath.Join(outside, "readme"))
	require.Zero(t, res.ExitCode, res.Stderr)

	cfg.ConfineHidden = []string{"/"}
	require.ErrorContains(t, cfg.Validate(), "toolexec.confine-hidden")
}

// A descriptor the process inherited without close-on-exec does not pass
// to commands.
func TestInheritedDescriptorsStayBehind(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "outside")
	fd, err := syscall.Open(outside, syscall.O_CREAT|syscall.O_WRONLY, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	e, a, _, _ := confinedSetup(t, testConfig())
	res := shell(t, e, a, "echo leaked >&"+strconv.Itoa(fd))
	require.NotZero(t, res.ExitCode)
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	require.Empty(t, b)
}

// With confinement off, a command reaches what its user can.
func TestUnconfinedCommand(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Confine, cfg.Network = false, NetworkHost
	e, a, _, _ := confinedSetup(t, cfg)
	require.False(t, e.Confined())
	res := shell(t, e, a, "cat ../b/secret")
	require.Zero(t, res.ExitCode, res.Stderr)
	require.Equal(t, "b's secret", res.Stdout)
}

// Writable directories must be absolute and hold no hidden directory; one
// named through a symlink is writable where it leads.
func TestConfineWritableValidated(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ConfineWritable = []string{"cache"}
	require.ErrorContains(t, cfg.Validate(), "toolexec.confine-writable")

	root := t.TempDir()
	b, err := NewBoundary(root)
	require.NoError(t, err)
	for _, w := range []string{root, filepath.Dir(root)} {
		cfg.ConfineWritable = []string{w}
		_, err = New(cfg, b, nil)
		require.ErrorContains(t, err, "toolexec.confine-writable", w)
	}

	// A writable directory within another is granted with it; its path is
	// not followed anew through links a command made on the way.
	outer := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(outer, "sub", "cache"), 0o700))
	cfg.ConfineWritable = []string{outer, filepath.Join(outer, "sub", "cache")}
	e, a, other, _ := confinedSetup(t, cfg)
	require.Equal(t, []string{outer}, e.cfg.ConfineWritable)
	require.NoError(t, os.Mkdir(filepath.Join(other, "cache"), 0o700))
	res := shell(t, e, a, "rm -r "+filepath.Join(outer, "sub")+" && ln -s "+other+" "+filepath.Join(outer, "sub"))
	require.Zero(t, res.ExitCode, res.Stderr)
	require.NoError(t, os.WriteFile(filepath.Join(outer, "changed"), nil, 0o600)) // the shared rules are made again
	res = shell(t, e, a, "echo x > "+filepath.Join(outer, "sub", "cache", "planted"))
	require.NotZero(t, res.ExitCode)
	require.NoFileExists(t, filepath.Join(other, "cache", "planted"))

	cache := t.TempDir()
	link := filepath.Join(t.TempDir(), "cache")
	require.NoError(t, os.Symlink(cache, link))
	cfg.ConfineWritable = []string{link}
	e, a, _, _ = confinedSetup(t, cfg)
	res = shell(t, e, a, "echo x > "+filepath.Join(link, "f"))
	require.Zero(t, res.ExitCode, res.Stderr)
}

// BenchmarkExecuteNoop is what confinement and a cgroup per command add to
// starting a command: `go test -bench ExecuteNoop ./pkg/toolexec/`.
func BenchmarkExecuteNoop(b *testing.B) {
	for _, confine := range []bool{false, true} {
		for _, cgroup := range []string{"", CgroupAuto} {
			b.Run("confine="+strconv.FormatBool(confine)+"/cgroup="+cgroup, func(b *testing.B) {
				benchmarkNoop(b, confine, cgroup)
			})
		}
	}
}

func benchmarkNoop(b *testing.B, confine bool, cgroup string) {
	cfg := DefaultConfig()
	cfg.Confine = confine
	cfg.Cgroup = cgroup
	root := b.TempDir()
	bd, err := NewBoundary(root)
	require.NoError(b, err)
	e, err := New(cfg, bd, nil)
	require.NoError(b, err)
	b.Cleanup(e.Close)
	if ok, why := e.InCgroups(); cgroup != "" && !ok {
		b.Logf("no cgroups: %v", why)
	}
	for b.Loop() {
		_, err := e.Execute(context.Background(), Invocation{Command: "true", WorkingDir: root})
		require.NoError(b, err)
	}
}

// Each command leads a session of its own, so that no process of another
// command can join its process group (setpgid stays within a session) and
// be killed with it, or have it killed.
func TestCommandLeadsItsOwnSession(t *testing.T) {
	t.Parallel()
	e, a, _, _ := confinedSetup(t, testConfig())
	res := shell(t, e, a, `test "$(cut -d' ' -f6 /proc/$$/stat)" = "$$" && echo leader`)
	require.Equal(t, "leader\n", res.Stdout, res.Stderr)
}

// A call's own writable directories are writable for that call only, and
// may not be relative, missing or hold the root.
func TestCallWritableDirectories(t *testing.T) {
	t.Parallel()
	e, a, _, _ := confinedSetup(t, testConfig())
	mine := t.TempDir()
	write := func(writable ...string) (Result, error) {
		return e.Execute(context.Background(), Invocation{Command: "sh", Args: []string{"-c", "echo x > " + filepath.Join(mine, "f")},
			WorkingDir: a, Workspace: a, Writable: writable})
	}
	res, err := write(mine)
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Stderr)
	res, err = write()
	require.NoError(t, err)
	if e.Confined() {
		require.NotZero(t, res.ExitCode, "another call is not granted it")
	}
	for _, bad := range []string{"relative", filepath.Join(mine, "missing"), filepath.Dir(a)} {
		_, err = write(bad)
		require.ErrorContains(t, err, "writable directory", bad)
	}
}

// A hidden path may be a single file: it is unreadable, its neighbours are
// not.
func TestConfineHiddenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret, neighbour := filepath.Join(dir, ".pgpass"), filepath.Join(dir, "notes")
	require.NoError(t, os.WriteFile(secret, []byte("*:*:*:u:pw"), 0o600))
	require.NoError(t, os.WriteFile(neighbour, []byte("readable"), 0o600))
	cfg := testConfig()
	cfg.ConfineHidden = []string{secret}
	e, a, _, _ := confinedSetup(t, cfg)
	if LandlockABI() == 0 {
		require.False(t, e.Confined())
		return
	}
	res := shell(t, e, a, "cat "+neighbour+"; cat "+secret)
	require.Equal(t, "readable", res.Stdout, res.Stderr)
	require.Contains(t, res.Stderr, "Permission denied")
}

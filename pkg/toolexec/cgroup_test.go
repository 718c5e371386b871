package toolexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gone reports whether pid has ended (it may be left as a zombie until
// the sweep reaps it).
func gone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	p, ok := parseStat(stat)
	return ok && p.zombie
}

// A process a command started is killed when the command ends, although it
// left the command's session and cleared its environment (no marker).
func TestLeftoversAreKilledWithTheirCommand(t *testing.T) {
	e, root := newExec(t, testConfig())
	res, err := e.Execute(context.Background(), Invocation{Command: "sh",
		Args: []string{"-c", "setsid env -i sleep 300 >/dev/null 2>&1 </dev/null & echo $!"}, WorkingDir: root})
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	require.NoError(t, err, "%+v", res)
	if ok, why := e.InCgroups(); !ok {
		// No cgroup here: the orphan sweep is what ends such a process
		// (TestOrphansThatClearedTheirEnvironmentAreSwept).
		t.Logf("commands not in cgroups: %v", why)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return
	}
	require.True(t, gone(pid), "the escaped process %d is still running", pid)
}

// Cgroups are reused, one per command running at once, and removed with
// the executor; an explicit directory must be in a cgroup2 file system.
func TestCgroupsAreReusedAndRemoved(t *testing.T) {
	cfg := testConfig()
	e, root := newExec(t, cfg)
	if ok, why := e.InCgroups(); !ok {
		t.Logf("commands not in cgroups: %v", why)
		require.Error(t, why)
		return
	}
	for range 3 {
		res, err := e.Execute(context.Background(), Invocation{Command: "true", WorkingDir: root})
		require.NoError(t, err)
		require.Zero(t, res.ExitCode)
	}
	dir := e.cgroups.dir
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var cgs []string
	for _, ent := range ents {
		if ent.IsDir() {
			cgs = append(cgs, ent.Name())
		}
	}
	require.Len(t, cgs, 1, "one command at a time needs one cgroup")
	e.Close()
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)

	cfg.Cgroup = t.TempDir()
	b, err := NewBoundary(root)
	require.NoError(t, err)
	_, err = New(cfg, b, nil)
	require.ErrorContains(t, err, "not in a cgroup2 file system")
	cfg.Cgroup = "relative"
	require.ErrorContains(t, cfg.Validate(), "toolexec.cgroup")
}

// The cgroups of an executor whose process ended are emptied and removed
// by the next executor that starts there.
func TestAbandonedCgroupsAreRemoved(t *testing.T) {
	e, _ := newExec(t, testConfig())
	if ok, why := e.InCgroups(); !ok {
		t.Logf("commands not in cgroups: %v", why)
		return
	}
	base := filepath.Dir(e.cgroups.dir)
	// A process that has ended and been reaped: its pid names no process.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	require.ErrorIs(t, syscall.Kill(dead.Process.Pid, 0), syscall.ESRCH)
	abandoned := filepath.Join(base, cgroupPrefix+strconv.Itoa(dead.Process.Pid)+"-test")
	leaf := filepath.Join(abandoned, "c1")
	require.NoError(t, os.MkdirAll(leaf, 0o755))
	t.Cleanup(func() { removeCgroupTree(abandoned) })
	fd, err := syscall.Open(leaf, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	left := exec.Command("sleep", "300")
	left.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	require.NoError(t, left.Start())
	waited := make(chan error, 1)
	go func() { waited <- left.Wait() }()

	removeAbandonedCgroups(base)
	select {
	case <-waited:
	case <-time.After(time.Minute):
		t.Fatal("the abandoned cgroup's process was not killed")
	}
	// Removed once empty: by the first pass, or by the next start.
	removeAbandonedCgroups(base)
	_, err = os.Stat(abandoned)
	require.ErrorIs(t, err, os.ErrNotExist)
}

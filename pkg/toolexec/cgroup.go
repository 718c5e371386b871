package toolexec

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Each command can run in a cgroup (version 2) of its own. When the command
// ends, whatever is left in its cgroup is killed (cgroup.kill), wherever in
// the process tree, session or group it went and whatever it did to its
// environment: a daemonising tool's helpers end with the command, not at a
// later orphan sweep (orphans.go), which cannot always attribute them.
//
// This is a cleanup, not a boundary. A command cannot write cgroup files
// while confined, but it can start a process in another cgroup: clone3
// with CLONE_INTO_CGROUP needs only a descriptor of the target (an O_PATH
// one, which Landlock does not check) and permission to write cgroup.procs
// of the common ancestor, which the command's user has wherever it owns
// that file (root, without capabilities, owns them all). Such a process
// outlives its command's cgroup, so an empty cgroup proves nothing, and the
// orphan sweep still runs.

// CgroupAuto is Config.Cgroup's default: a cgroup below this process's own,
// when this process may make one there and start commands in it.
const CgroupAuto = "auto"

// cgroupPrefix names an executor's cgroup directory: sylk-exec-<pid>-<random>.
const cgroupPrefix = "sylk-exec-"

// cgroups hands out the cgroups commands run in. An emptied cgroup is kept
// for a later command: a cgroup holds no rights of its own.
type cgroups struct {
	dir string // this executor's: <base>/sylk-exec-<pid>-<random>

	mu       sync.Mutex
	free     []*cgroup
	draining []*cgroup // killed, but not yet reported empty
	seq      int
	closed   bool
}

type cgroup struct {
	path   string
	dir    int // the directory, for clone3's CLONE_INTO_CGROUP
	kill   int // cgroup.kill, opened for writing
	events int // cgroup.events, read for "populated"
}

// newCgroups sets up the executor's cgroups under setting: "" (none),
// CgroupAuto, or an absolute directory in a cgroup2 hierarchy. With auto,
// a reason is returned with nil cgroups when none can be used here; with a
// directory, that is an error.
func newCgroups(setting string) (*cgroups, error) {
	if setting == "" {
		return nil, nil
	}
	auto := setting == CgroupAuto
	base := setting
	if auto {
		var err error
		if base, err = ownCgroup(); err != nil {
			return nil, errCgroupUnavailable{err}
		}
	}
	g, err := makeCgroups(base)
	if err != nil {
		if auto {
			return nil, errCgroupUnavailable{err}
		}
		return nil, fmt.Errorf("toolexec.cgroup: %w", err)
	}
	return g, nil
}

// errCgroupUnavailable says why CgroupAuto found no cgroup to use.
type errCgroupUnavailable struct{ err error }

func (e errCgroupUnavailable) Error() string { return "no cgroup for commands: " + e.err.Error() }
func (e errCgroupUnavailable) Unwrap() error { return e.err }

func makeCgroups(base string) (*cgroups, error) {
	if !filepath.IsAbs(base) {
		return nil, fmt.Errorf("%q must be an absolute path", base)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(base, &st); err != nil {
		return nil, err
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%s is not in a cgroup2 file system", base)
	}
	removeAbandonedCgroups(base)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	g := &cgroups{dir: filepath.Join(base, cgroupPrefix+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b))}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, err
	}
	if err := g.try(); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// try starts a shell that exits at once in a new cgroup, and kills the
// cgroup's members through cgroup.kill: whether this process may put
// commands in its cgroups, and whether the kernel can kill a cgroup's
// members (Linux 5.14 and later).
func (g *cgroups) try() error {
	c, err := g.get()
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", ":")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.dir}
	if err := cmd.Run(); err != nil {
		g.discard(c)
		return fmt.Errorf("start a command in %s: %w", c.path, err)
	}
	if _, err := unix.Write(c.kill, []byte("1")); err != nil {
		g.discard(c)
		return fmt.Errorf("kill the members of %s: %w", c.path, err)
	}
	c.remove() // killed once: see end
	return nil
}

// ownCgroup is the directory of this process's cgroup in the cgroup2
// hierarchy, from /proc/self/cgroup and the hierarchy's mount point.
func ownCgroup() (string, error) {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel := ""
	found := false
	for line := range strings.Lines(string(raw)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", errors.New("this process is in no cgroup2 hierarchy")
	}
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mounts.Close()
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		root, mnt := unescapeMount(f[3]), unescapeMount(f[4])
		// The mount shows the hierarchy from root (a cgroup namespace's,
		// or a bind mount's): this process's path must lie below it.
		r, err := filepath.Rel(root, rel)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			continue
		}
		return filepath.Join(mnt, r), nil
	}
	return "", errors.New("the cgroup2 hierarchy is not mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeAbandonedCgroups kills what is left in the cgroups of executors
// whose process has ended (a worker that crashed leaves its commands'
// processes running) and removes them, as far as they are empty already.
func removeAbandonedCgroups(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		dir := filepath.Join(base, e.Name())
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		removeCgroupTree(dir)
	}
}

// removeCgroupTree removes dir and the cgroups below it that are empty.
func removeCgroupTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = unix.Rmdir(dir)
}

// get returns an empty cgroup: a drained one, a kept one, or a new one.
func (g *cgroups) get() (*cgroup, error) {
	g.mu.Lock()
	if len(g.draining) > 0 {
		kept := g.draining[:0]
		for _, c := range g.draining {
			if populated, err := c.populated(); err == nil && !populated {
				c.remove() // killed once: see end
			} else {
				kept = append(kept, c)
			}
		}
		clear(g.draining[len(kept):])
		g.draining = kept
	}
	if n := len(g.free); n > 0 {
		c := g.free[n-1]
		g.free = g.free[:n-1]
		g.mu.Unlock()
		return c, nil
	}
	g.seq++
	path := filepath.Join(g.dir, "c"+strconv.Itoa(g.seq))
	g.mu.Unlock()
	if err := unix.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup %s: %w", path, err)
	}
	c := &cgroup{path: path, dir: -1, kill: -1, events: -1}
	var err error
	if c.dir, err = unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		if c.kill, err = unix.Openat(c.dir, "cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			c.events, err = unix.Openat(c.dir, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		}
	}
	if err != nil {
		c.remove()
		return nil, fmt.Errorf("open cgroup %s: %w", path, err)
	}
	return c, nil
}

// end kills whatever is left in c and waits up to wait for the kernel to
// report it empty, and reports whether it did. A cgroup nothing was left
// in is kept for a later command; one that had to be killed is removed once
// empty: some kernels (6.18) kill every process later started into a
// cgroup that was once killed.
func (g *cgroups) end(c *cgroup, wait time.Duration) bool {
	populated, err := c.populated()
	killed := false
	if err == nil && populated {
		if _, err = unix.Write(c.kill, []byte("1")); err == nil {
			killed = true
			populated, err = c.awaitEmpty(wait)
		}
	}
	if err != nil {
		g.discard(c)
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case populated:
		g.draining = append(g.draining, c)
	case killed || g.closed:
		c.remove()
		if g.closed {
			_ = unix.Rmdir(g.dir)
		}
	default:
		g.free = append(g.free, c)
	}
	return !populated
}

// discard gives up on c: it is removed when it can be.
func (g *cgroups) discard(c *cgroup) {
	_, _ = unix.Write(c.kill, []byte("1"))
	c.remove()
}

// populated reads whether c has a live process (zombies do not count).
func (c *cgroup) populated() (bool, error) {
	var buf [128]byte
	n, err := unix.Pread(c.events, buf[:], 0)
	if err != nil {
		return false, err
	}
	for line := range bytes.Lines(buf[:n]) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("populated ")); ok {
			return string(v) != "0", nil
		}
	}
	return false, errors.New("cgroup.events has no populated field")
}

// awaitEmpty waits up to wait for c to have no live process: the kernel
// notifies a change of cgroup.events to a poll for POLLPRI, after a read.
func (c *cgroup) awaitEmpty(wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		populated, err := c.populated()
		if err != nil || !populated {
			return populated, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true, nil
		}
		fds := []unix.PollFd{{Fd: int32(c.events), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, int(min(left, 100*time.Millisecond)/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return true, err
		}
	}
}

// remove closes c's descriptors and removes its directory, which fails
// while a process is still in it (that cgroup is then left behind, and
// removed with the executor's at the next start).
func (c *cgroup) remove() {
	for _, fd := range []int{c.events, c.kill, c.dir} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	c.dir, c.kill, c.events = -1, -1, -1
	_ = unix.Rmdir(c.path)
}

// close removes the kept cgroups and this executor's directory; a command
// still running keeps its cgroup until it ends.
func (g *cgroups) close() {
	g.mu.Lock()
	all := append(g.free, g.draining...)
	g.free, g.draining, g.closed = nil, nil, true
	g.mu.Unlock()
	for _, c := range all {
		g.discard(c)
	}
	_ = unix.Rmdir(g.dir)
}

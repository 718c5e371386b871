package toolexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Confinement (Landlock, Linux 5.13 and later). Every command an executor
// runs shares the service's user, so without it a command could read and
// write whatever that user can: other tasks' workspaces (other tenants'
// code), the service's files, and signal the service itself. A confined
// command:
//   - reads and runs anything outside the boundary roots (the system, its
//     tools), but nothing inside them except its own workspace;
//   - writes only its workspace, the writable directories of
//     Config.ConfineWritable, and the terminal and null devices;
//   - cannot signal, trace or reach through abstract sockets any process
//     outside its own (kernel ABI 6 for signals and sockets).
//
// The restriction is applied to one locked OS thread just before it starts
// the command, so that the command inherits it; the thread is then left to
// end with its goroutine, and the service itself is never restricted.

// Access rights by the kernel's Landlock ABI version.
const (
	llRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// llFile are the rights that apply to a file (not a directory).
	llFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llV1 = llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
)

// confineDevices are written by ordinary programs: the null devices, the
// terminal, pseudo-terminals and POSIX shared memory (semaphores).
var confineDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm",
	"/dev/random", "/dev/urandom"}

// LandlockABI is the kernel's Landlock ABI version, 0 when it has none (an
// older kernel, or Landlock not enabled at boot).
var LandlockABI = sync.OnceValue(func() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
})

// Confined reports whether the executor's commands run confined: asked for
// in its Config and supported by the kernel.
func (e *Executor) Confined() bool { return e.cfg.Confine && LandlockABI() > 0 }

// ruleset is a Landlock ruleset being built.
type ruleset struct {
	fd      int
	handled uint64
}

func newRuleset(abi int) (*ruleset, error) {
	handled := uint64(llV1)
	if abi >= 2 {
		handled |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		handled |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	size := unsafe.Sizeof(attr.Handled_access_fs)
	if abi >= 6 {
		// The command may not signal nor connect to an abstract socket of
		// a process outside its domain (the service, other tasks).
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		size = unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return nil, fmt.Errorf("create a Landlock ruleset: %w", errno)
	}
	return &ruleset{fd: int(fd), handled: handled}, nil
}

func (r *ruleset) close() { _ = unix.Close(r.fd) }

// allow grants access beneath path (or to path, a file). A path that does
// not exist is skipped. A symlink is not followed: the rule is on the link
// itself, which grants nothing beyond it.
func (r *ruleset) allow(path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ELOOP) {
			return nil
		}
		return fmt.Errorf("confine: open %s: %w", path, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("confine: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= llFile
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access & r.handled, Parent_fd: int32(fd)}
	if attr.Allowed_access == 0 {
		return nil
	}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("confine: allow %s: %w", path, errno)
	}
	return nil
}

// allowOutside grants read access to everything under dir except the
// hidden paths, which dir is an ancestor of or holds: each entry of dir
// that is neither hidden nor an ancestor of a hidden path is allowed
// whole, and the ancestors are walked in turn.
func (r *ruleset) allowOutside(dir string, hidden []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil
		}
		return fmt.Errorf("confine: list %s: %w", dir, err)
	}
	for _, ent := range entries {
		p := filepath.Join(dir, ent.Name())
		switch hiddenRelation(p, hidden) {
		case relHidden:
		case relAncestor:
			if err := r.allowOutside(p, hidden); err != nil {
				return err
			}
		default:
			if err := r.allow(p, llRead); err != nil {
				return err
			}
		}
	}
	return nil
}

const (
	relNone = iota
	relHidden
	relAncestor
)

// hiddenRelation says whether p is hidden (within a hidden path) or an
// ancestor of one.
func hiddenRelation(p string, hidden []string) int {
	rel := relNone
	for _, h := range hidden {
		switch {
		case within(h, p):
			return relHidden
		case within(p, h):
			rel = relAncestor
		}
	}
	return rel
}

// confinedPolicy is what one command may touch.
type confinedPolicy struct {
	// hidden are the resolved boundary roots: unreadable except for the
	// writable paths within them.
	hidden []string
	// writable are the command's workspace and the configured directories.
	writable []string
}

// build makes the ruleset of p for the kernel's ABI.
func (p confinedPolicy) build(abi int) (*ruleset, error) {
	r, err := newRuleset(abi)
	if err != nil {
		return nil, err
	}
	err = r.allowOutside("/", p.hidden)
	for _, w := range p.writable {
		if err != nil {
			break
		}
		err = r.allow(w, r.handled)
	}
	for _, d := range confineDevices {
		if err != nil {
			break
		}
		err = r.allow(d, r.handled)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// startConfined starts cmd under p's ruleset: from a locked OS thread that
// restricts itself first, so that only the command and what it starts are
// confined. The thread never runs anything else: its goroutine ends
// without unlocking it, which ends the thread.
func startConfined(cmd *exec.Cmd, p confinedPolicy) error {
	r, err := p.build(LandlockABI())
	if err != nil {
		return err
	}
	defer r.close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No new privileges (set-user-ID programs) for the command: Landlock
		// requires it of an unprivileged thread, and a privileged one gets
		// the same so that a command behaves alike whoever runs the service.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("confine: no new privileges: %w", err)
			return
		}
		if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.fd), 0, 0); errno != 0 {
			errc <- fmt.Errorf("confine: restrict: %w", errno)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

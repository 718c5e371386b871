package toolexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sylk.dev/sylk/pkg/taskinit"
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
//   - has no capabilities and gains none, even when the service is root;
//   - cannot signal, trace or reach through abstract sockets any process
//     outside its own (kernel ABI 6 for signals and sockets).
//
// With Config.Network "none" and no namespaces (network.go), it also may
// neither connect to a TCP port but the egress proxy's nor bind one but an
// ephemeral one (kernel ABI 4), nor make a unix socket (a seccomp filter).
// It does not confine changes of permissions and times (which Landlock
// does not govern).
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
	// llAll is every right this package grants, masked by the ruleset's:
	// all it handles but making device files, which nothing may.
	llAll = (llV1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE) &^
		(unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
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

func newRuleset(abi int, net bool) (*ruleset, error) {
	handled := uint64(llV1)
	if abi >= 2 {
		handled |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		handled |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	size := unsafe.Sizeof(attr.Handled_access_fs)
	if net {
		// No TCP connection nor bound port but those the policy allows
		// (netRules): the host's stores and services listen on TCP ports.
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		size = unsafe.Offsetof(attr.Handled_access_net) + unsafe.Sizeof(attr.Handled_access_net)
	}
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

// add grants access beneath the directory (or to the file) fd.
func (r *ruleset) add(fd int, access uint64, name string) error {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access & r.handled, Parent_fd: int32(fd)}
	if attr.Allowed_access == 0 {
		return nil
	}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("confine: allow %s: %w", name, errno)
	}
	return nil
}

// openRule opens path for a rule (O_PATH) and returns the access that can
// apply to it: a file gets file rights only. It returns -1 for a path that
// does not exist or cannot be opened, and for a path through or to a
// symlink, which is not followed (a rule on the link itself would grant
// nothing beyond it).
func openRule(path string, access uint64) (int, uint64, error) {
	// No symlink anywhere in the path, not only at its end: the paths are
	// resolved already, and a command that may write a directory on the
	// way could otherwise point the rest of it elsewhere.
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ELOOP) {
			return -1, 0, nil
		}
		return -1, 0, fmt.Errorf("confine: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, 0, fmt.Errorf("confine: stat %s: %w", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		_ = unix.Close(fd)
		return -1, 0, nil
	case unix.S_IFDIR:
	default:
		access &= llFile
	}
	return fd, access, nil
}

// baseRules are the rules every command of an executor shares: read
// access to everything outside the hidden paths (each entry of the hidden
// paths' ancestors that is neither hidden nor an ancestor itself), and
// write access to the shared writable directories and the devices. Their
// paths are opened once (O_PATH) and kept while the ancestors' listings and
// the writable paths are unchanged, so that a command's ruleset costs a
// system call per rule rather than a walk of the file system.
type baseRules struct {
	mu    sync.RWMutex
	key   string
	gen   uint64
	rules []baseRule
	// listed are the directories walked and their change times (which,
	// unlike modification times, no command can set);
	// pinned the writable paths and the files they were (0 when missing).
	listed map[string]unix.Timespec
	pinned map[string]fileID
	// racy is set when a listed directory changed so shortly before it
	// was listed that a later change could keep its time (file times
	// advance with the kernel's clock tick): the rules are then made again
	// until the directories have been quiet for a while.
	racy bool
}

// racyWindow is the age below which a directory's change time is not
// trusted to tell a later change apart.
const racyWindow = 50 * time.Millisecond

type baseRule struct {
	fd     int
	access uint64
}

type fileID struct{ dev, ino uint64 }

func idOf(path string) fileID {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileID{}
	}
	return fileID{uint64(st.Dev), st.Ino}
}

// base holds the rules of one policy's hidden and writable paths at a time:
// an executor's, as a process has one as a rule.
var base baseRules

// with calls f with the rules of p's hidden and shared paths as the file
// system is now, and their generation (which changes when they do), under
// the read lock.
func (b *baseRules) with(p confinedPolicy, f func(gen uint64, rules []baseRule) error) error {
	key := strings.Join(p.hidden, "\x00") + "\x01" + strings.Join(p.shared, "\x00")
	b.mu.RLock()
	if b.fresh(key) {
		defer b.mu.RUnlock()
		return f(b.gen, b.rules)
	}
	b.mu.RUnlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	// Another caller may have made them meanwhile.
	if !b.fresh(key) {
		if err := b.rebuild(key, p); err != nil {
			return err
		}
	}
	return f(b.gen, b.rules)
}

// fresh reports whether the rules are key's and nothing they were made
// from has changed. Called with a lock held.
func (b *baseRules) fresh(key string) bool {
	if b.key != key || b.listed == nil || b.racy {
		return false
	}
	for dir, ctime := range b.listed {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil || st.Ctim != ctime {
			return false
		}
	}
	for path, id := range b.pinned {
		if idOf(path) != id {
			return false
		}
	}
	return true
}

// rebuild makes the rules of p anew. Called with the write lock held.
func (b *baseRules) rebuild(key string, p confinedPolicy) error {
	b.drop()
	b.gen++
	b.key, b.listed, b.pinned = key, map[string]unix.Timespec{}, map[string]fileID{}
	err := b.walk("/", p.hidden)
	for _, path := range append(slices.Clone(p.shared), confineDevices...) {
		if err != nil {
			break
		}
		b.pinned[path] = idOf(path)
		err = b.open(path, llAll)
	}
	if err != nil {
		b.drop()
	}
	return err
}

func (b *baseRules) drop() {
	for _, r := range b.rules {
		_ = unix.Close(r.fd)
	}
	b.key, b.rules, b.listed, b.pinned, b.racy = "", nil, nil, nil, false
}

func (b *baseRules) open(path string, access uint64) error {
	fd, access, err := openRule(path, access)
	if err == nil && fd >= 0 {
		b.rules = append(b.rules, baseRule{fd: fd, access: access})
	}
	return err
}

// walk opens a read rule for each entry under dir outside the hidden
// paths: entries that are neither hidden nor an ancestor of a hidden path
// whole, ancestors in turn.
func (b *baseRules) walk(dir string, hidden []string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil
	}
	b.listed[dir] = st.Ctim
	if time.Since(time.Unix(st.Ctim.Unix())) < racyWindow {
		b.racy = true
	}
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
			err = b.walk(p, hidden)
		default:
			err = b.open(p, llRead)
		}
		if err != nil {
			return err
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
	// shared are the directories every command may write (configured).
	shared []string
	// workspace is the command's own, which it may write.
	workspace string
	// extra are more directories this command may write (Invocation.Writable).
	extra []string
	// private asks for a ruleset of the command's own, which it may add
	// rules to, not one shared with other commands.
	private bool
	// net restricts TCP (kernel ABI 4): no bound port but an ephemeral one
	// and no connection but to connectPorts (the egress proxy's).
	net          bool
	connectPorts []uint16
	// noUnixSockets: the command may make no unix socket
	// (taskinit.BlockUnixSockets).
	noUnixSockets bool
}

// landlockNetPortAttr is struct landlock_net_port_attr.
type landlockNetPortAttr struct {
	allowed uint64
	port    uint64
}

const landlockRuleNetPort = 2

// netRules adds p's network rules to r.
func (p confinedPolicy) netRules(r *ruleset) error {
	add := func(access uint64, port uint16) error {
		attr := landlockNetPortAttr{allowed: access, port: uint64(port)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), landlockRuleNetPort,
			uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
		if errno != 0 {
			return fmt.Errorf("confine: allow TCP port %d: %w", port, errno)
		}
		return nil
	}
	// Port 0 is any ephemeral port the kernel picks: a test's own server
	// may listen, on a port no service of the host was given.
	if err := add(unix.LANDLOCK_ACCESS_NET_BIND_TCP, 0); err != nil {
		return err
	}
	for _, port := range p.connectPorts {
		if err := add(unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, port); err != nil {
			return err
		}
	}
	return nil
}

// build makes the ruleset of p for the kernel's ABI, or takes a copy of
// the one made for the same workspace before (task directories are reused),
// while that is still the same directory and the shared rules have not
// changed. The caller closes it.
func (p confinedPolicy) build(abi int) (*ruleset, error) {
	var r *ruleset
	err := base.with(p, func(gen uint64, rules []baseRule) error {
		// A call with writable directories of its own gets a ruleset of
		// its own, neither taken from the cache nor kept in it.
		reuse := len(p.extra) == 0 && !p.private
		key := p.cacheKey()
		if reuse {
			if fd, ok := rulesets.get(key, p.workspace, gen); ok {
				r = &ruleset{fd: fd}
				return nil
			}
		}
		var err error
		if r, err = newRuleset(abi, p.net); err != nil {
			return err
		}
		if p.net {
			if err = p.netRules(r); err != nil {
				return err
			}
		}
		for _, b := range rules {
			if err = r.add(b.fd, b.access, "a shared rule"); err != nil {
				return err
			}
		}
		ws, access, err := openRule(p.workspace, llAll)
		if err != nil || ws < 0 {
			return err
		}
		if err = r.add(ws, access, p.workspace); err != nil {
			_ = unix.Close(ws)
			return err
		}
		for _, x := range p.extra {
			fd, access, err := openRule(x, llAll)
			if err == nil && fd >= 0 {
				err = r.add(fd, access, x)
				_ = unix.Close(fd)
			}
			if err != nil {
				_ = unix.Close(ws)
				return err
			}
		}
		if !reuse {
			_ = unix.Close(ws)
			return nil
		}
		rulesets.put(key, ws, gen, r.fd)
		return nil
	})
	if err != nil {
		if r != nil {
			r.close()
		}
		return nil, err
	}
	return r, nil
}

// rulesetCache keeps the finished rulesets of recent workspaces. A ruleset
// can restrict any number of threads; each use takes a duplicate of its
// descriptor, so that one evicted meanwhile stays valid for that use. An
// entry holds its workspace open, so that the directory's inode number
// cannot name another directory while the entry lives.
type rulesetCache struct {
	mu      sync.Mutex
	entries map[string]cachedRuleset
}

type cachedRuleset struct {
	fd, ws int
	gen    uint64
}

// maxCachedRulesets bounds the cache: more than the task directories a
// worker keeps for reuse.
const maxCachedRulesets = 256

var rulesets = rulesetCache{entries: map[string]cachedRuleset{}}

// cacheKey names p's ruleset in the cache: its workspace and its network
// rules.
func (p confinedPolicy) cacheKey() string {
	return fmt.Sprintf("%s\x00%t%v", p.workspace, p.net, p.connectPorts)
}

func (c *rulesetCache) get(key, ws string, gen uint64) (int, bool) {
	var now, held unix.Stat_t
	if unix.Stat(ws, &now) != nil {
		return -1, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.gen != gen || unix.Fstat(e.ws, &held) != nil || held.Dev != now.Dev || held.Ino != now.Ino {
		return -1, false
	}
	fd, err := unix.FcntlInt(uintptr(e.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	return fd, true
}

// put keeps a duplicate of fd under key, its workspace held open as wsFd
// (which put owns), replacing an older one and evicting others past the
// bound.
func (c *rulesetCache) put(key string, wsFd int, gen uint64, fd int) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(wsFd)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	evict := func(k string, e cachedRuleset) {
		_ = unix.Close(e.fd)
		_ = unix.Close(e.ws)
		delete(c.entries, k)
	}
	if old, ok := c.entries[key]; ok {
		evict(key, old)
	}
	for k, e := range c.entries {
		if len(c.entries) < maxCachedRulesets && e.gen == gen {
			break
		}
		evict(k, e)
	}
	c.entries[key] = cachedRuleset{fd: dup, ws: wsFd, gen: gen}
}

// StartIn starts cmd (a program the service itself runs on a workspace's
// files, such as its git) confined as the commands run in workspace are:
// whatever the workspace's files lead it to run or open cannot reach past
// the workspace. Unconfined executors start it as it is.
func (e *Executor) StartIn(cmd *exec.Cmd, workspace string) error {
	if !e.Confined() {
		return cmd.Start()
	}
	ws, err := e.boundary.CheckDir(workspace)
	if err != nil {
		return err
	}
	return startConfined(cmd, confinedPolicy{hidden: e.hidden, shared: e.cfg.ConfineWritable, workspace: ws})
}

// startConfined starts cmd under p's ruleset: from a locked OS thread that
// restricts itself first, so that only the command and what it starts are
// confined. The thread never runs anything else: its goroutine ends
// without unlocking it, which ends the thread.
func startConfined(cmd *exec.Cmd, p confinedPolicy) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- startConfinedHere(cmd, p)
	}()
	return <-errc
}

// startConfinedHere restricts the calling thread under p's ruleset and
// starts cmd from it. It must run on a locked OS thread whose goroutine
// never unlocks it: the thread is confined for good.
func startConfinedHere(cmd *exec.Cmd, p confinedPolicy) error {
	r, err := p.build(LandlockABI())
	if err != nil {
		return err
	}
	defer r.close()
	if err := taskinit.DropCapabilities(); err != nil {
		return fmt.Errorf("confine: drop capabilities: %w", err)
	}
	// No new privileges (set-user-ID programs) for the command: Landlock
	// requires it of an unprivileged thread, and a privileged one gets
	// the same so that a command behaves alike whoever runs the service.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("confine: no new privileges: %w", err)
	}
	if p.noUnixSockets {
		if err := taskinit.BlockUnixSockets(); err != nil {
			return fmt.Errorf("confine: %w", err)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.fd), 0, 0); errno != 0 {
		return fmt.Errorf("confine: restrict: %w", errno)
	}
	return cmd.Start()
}

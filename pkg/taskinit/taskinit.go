// Package taskinit is the first process of a task command's namespaces: the
// executor starts the sylk-task-init program in a user, mount, PID and IPC
// namespace of its own (and, when asked, a network namespace), and Main
// there:
//   - covers the workspace roots and hidden directories with empty file
//     systems, and mounts back the command's own task directory and the
//     directories it may write, so that no other task's directory can be
//     named at all (not even to change its permissions);
//   - gives the command a /dev/shm, a /dev/pts and a /proc of its own, so
//     that it sees neither other tasks' shared memory, nor their
//     pseudo-terminals, nor their command lines;
//   - joins a session keyring of its own, drops every capability, restricts
//     itself with the Landlock ruleset the executor passed as descriptor 3,
//     and starts the command;
//   - waits for the command and exits with its status. As the namespace's
//     first process, its exit makes the kernel kill every process the
//     command left behind, wherever they moved (a session, a process group
//     or a cgroup of their own).
//
// The package depends on nothing but the standard library and x/sys, so that
// the program starts in about a millisecond.
package taskinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Name is the program's file name, looked for beside the service's own.
const Name = "sylk-task-init"

// ExitSetup is the status when the namespaces could not be set up; the
// reason is on standard error.
const ExitSetup = 125

// RulesetFD is the descriptor of the Landlock ruleset, when Spec.Ruleset.
const RulesetFD = 3

// Spec is what the executor asks of a command's namespaces; it is passed
// as the program's first argument, in JSON.
type Spec struct {
	// Dir is the command's working directory.
	Dir string `json:"dir"`
	// Cover are directories made empty (workspace roots, hidden ones).
	Cover []string `json:"cover,omitempty"`
	// Keep are directories within Cover mounted back as they are: the task's
	// own directory and the directories it may write.
	Keep []string `json:"keep,omitempty"`
	// Ruleset says that RulesetFD is a Landlock ruleset to restrict to.
	Ruleset bool `json:"ruleset,omitempty"`
	// Rules are added to the ruleset once the file systems are mounted: the
	// new /proc, /dev/shm and /dev/pts, which the ruleset cannot name beforehand (a
	// rule on the directory a file system is mounted on does not reach
	// into it).
	Rules []Rule `json:"rules,omitempty"`
	// Loopback says the command has a network namespace of its own, with
	// only its loopback interface, which is brought up.
	Loopback bool `json:"loopback,omitempty"`
	// NoUnixSockets says the command may make no unix socket
	// (BlockUnixSockets): the host's sockets are files it could otherwise
	// connect to, whatever its network namespace.
	NoUnixSockets bool `json:"no_unix_sockets,omitempty"`
	// UID and GID, when UID is not 0, are the IDs the command runs as (the
	// service runs as root): the user namespace maps them, and root, to
	// themselves; this process sets the namespaces up as root and the
	// command gets the unprivileged IDs, without supplementary groups.
	UID int `json:"uid,omitempty"`
	GID int `json:"gid,omitempty"`
	// ProxyFD, when not 0, is a descriptor (O_PATH) of the unix socket of
	// the service's egress proxy, and ProxyPort the port of the loopback
	// listener this process serves in the command's network namespace:
	// each connection to it is forwarded to that socket.
	ProxyFD   int `json:"proxy_fd,omitempty"`
	ProxyPort int `json:"proxy_port,omitempty"`
	// Probe sets everything up, checks it, and exits 0 without a command.
	Probe bool `json:"probe,omitempty"`
	// Relay asks this process to make the namespaces itself and start a
	// second one in them, which does the rest. A service that is not
	// dumpable cannot start the program in a user namespace directly: the
	// new process's ID maps would belong to root, and only root could write
	// them.
	Relay bool `json:"relay,omitempty"`
	// Reaper asks for no namespaces: this process only starts the command
	// in its own process group and, should Parent end first, kills that
	// group and every process it adopted (reaper.go). The service starts it
	// in a session of its own with a parent-death signal.
	Reaper bool `json:"reaper,omitempty"`
	// Parent is the service's process id, with Reaper: a parent-death
	// signal is also sent when only the thread that started this process
	// ends, and this process then still has Parent for its parent.
	Parent int `json:"parent,omitempty"`
}

// Attr sets what starts a process in the namespaces of spec: a user
// namespace mapping only the caller's own user and group (and the
// command's, Spec.UID and Spec.GID), in which it may mount, and mount, PID
// and IPC namespaces (and, with Loopback, a network namespace).
func Attr(sys *syscall.SysProcAttr, spec Spec) {
	sys.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC
	sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	if spec.Loopback {
		sys.Cloneflags |= unix.CLONE_NEWNET
		sys.AmbientCaps = append(sys.AmbientCaps, unix.CAP_NET_ADMIN)
	}
	uid, gid := os.Getuid(), os.Getgid()
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	sys.GidMappingsEnableSetgroups = false
	if spec.UID != 0 && spec.UID != uid {
		// Only a privileged service may map IDs other than its own, and
		// let the command drop its supplementary groups.
		sys.UidMappings = append(sys.UidMappings, syscall.SysProcIDMap{ContainerID: spec.UID, HostID: spec.UID, Size: 1})
		if spec.GID != gid {
			sys.GidMappings = append(sys.GidMappings, syscall.SysProcIDMap{ContainerID: spec.GID, HostID: spec.GID, Size: 1})
		}
		sys.GidMappingsEnableSetgroups = true
	}
}

// Rule grants Access (Landlock file system rights) beneath Path.
type Rule struct {
	Path   string `json:"path"`
	Access uint64 `json:"access"`
}

// Args is the argument list that starts program under spec through the
// program at init.
func Args(init string, spec Spec, program string, argv []string) ([]string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return append([]string{init, string(b), program}, argv...), nil
}

// Main runs the program: os.Args are those of Args.
func Main() {
	// Capabilities and the Landlock domain belong to a thread: everything
	// below runs on this one, which also starts the command.
	runtime.LockOSThread()
	// First of all: until then, a SIGINT sent to the group (a cancel right
	// after the start) would end this process, and with it the command,
	// without the command's own chance to stop.
	sigs := outliveSignals()
	code, err := run(os.Args[1:], sigs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", Name, err)
		os.Exit(ExitSetup)
	}
	os.Exit(code)
}

func run(args []string, sigs <-chan os.Signal) (int, error) {
	if len(args) < 1 {
		return 0, errors.New("no specification: this program is started by the Sylk worker, not by hand")
	}
	var spec Spec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return 0, fmt.Errorf("specification: %w", err)
	}
	if !spec.Probe && len(args) < 3 {
		return 0, errors.New("no command")
	}
	if spec.Reaper {
		return reap(spec, args, sigs)
	}
	if !spec.Relay && os.Getpid() != 1 {
		return 0, errors.New("not the first process of a PID namespace")
	}
	go drain(sigs)
	// This process ends with the thread that started it (the service's,
	// or the relay's), and the namespace with it: the service sets no
	// parent-death signal itself, as the runtime would take a parent
	// outside the new PID namespace (whose id reads 0 here) for a parent
	// that already ended. SIGKILL from the parent's namespace reaches a
	// namespace's first process.
	if err := armParentDeath(unix.SIGKILL); err != nil {
		return 0, err
	}
	// The parent may have ended before the signal was set.
	if spec.Parent != 0 && !parentIs(spec.Parent) {
		return 0, errors.New("the service that started this process has ended")
	}
	if spec.Relay {
		return relay(spec, args)
	}
	if err := mountAll(spec); err != nil {
		return 0, err
	}
	if spec.Loopback {
		if err := loopbackUp(); err != nil {
			return 0, fmt.Errorf("loopback: %w", err)
		}
	}
	if spec.ProxyFD != 0 {
		if err := forwardProxy(spec.ProxyFD, spec.ProxyPort); err != nil {
			return 0, fmt.Errorf("egress proxy: %w", err)
		}
	}
	if err := os.Chdir(spec.Dir); err != nil {
		return 0, err
	}
	// A session keyring of the command's own. The service's (its container
	// runtime or systemd gives it one) would otherwise be every command's,
	// which possess it: a key one task added there, or the service's own,
	// would be another task's to read, and any task could clear it. Like
	// capabilities, it belongs to this thread, which starts the command.
	if _, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
		return 0, fmt.Errorf("session keyring: %w", errno)
	}
	if err := restrict(spec); err != nil {
		return 0, err
	}
	if spec.Probe {
		return 0, probe(spec)
	}
	// The command may not trace this process nor read its memory: its
	// other threads still hold capabilities in the namespaces and are not
	// restricted (both belong to a thread), and they share its memory.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("make this process non-dumpable: %w", err)
	}
	pid, err := syscall.ForkExec(args[1], args[2:], &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", Name, args[1], err)
		if errors.Is(err, syscall.ENOENT) {
			return 127, nil
		}
		return 126, nil
	}
	return waitFor(pid)
}

// outliveSignals keeps this process alive through the signals sent to its
// process group, which reach the command too: handled, not ignored, so that
// the command does not inherit an ignored signal. The command may signal
// this process too (it is in the same Landlock domain): the signals that
// the Go runtime turns into a crash when sent by kill (SIGABRT, SIGILL,
// SIGTRAP, SIGSYS, SIGSTKFLT, and SIGSEGV, SIGBUS and SIGFPE) are handled
// as well, so that it cannot end this process, and with it the namespace,
// with a status of the runtime's and a dump of its goroutines. A fault of
// its own still crashes it.
//
// It returns the channel the signals arrive on, which the caller drains.
func outliveSignals() <-chan os.Signal {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
		syscall.SIGABRT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGSTKFLT,
		syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE)
	return sigs
}

// drain discards the signals outliveSignals catches.
func drain(sigs <-chan os.Signal) {
	for range sigs {
	}
}

// relay starts this program again in the namespaces, with the same
// specification but for Relay, and exits as it does.
func relay(spec Spec, args []string) (int, error) {
	spec.Relay, spec.Parent = false, os.Getpid()
	b, err := json.Marshal(spec)
	if err != nil {
		return 0, err
	}
	files := []uintptr{0, 1, 2}
	if spec.Ruleset {
		files = append(files, RulesetFD)
	}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	if spec.ProxyFD != 0 {
		files = append(files, uintptr(spec.ProxyFD))
		spec.ProxyFD = len(files) - 1
		if b, err = json.Marshal(spec); err != nil {
			return 0, err
		}
	}
	sys := &syscall.SysProcAttr{}
	Attr(sys, spec)
	pid, err := syscall.ForkExec(self, append([]string{self, string(b)}, args[1:]...),
		&syscall.ProcAttr{Env: os.Environ(), Files: files, Sys: sys})
	if err != nil {
		return 0, fmt.Errorf("start in namespaces: %w", err)
	}
	return waitFor(pid)
}

// waitFor reaps children until pid ends, and returns its status: the exit
// code, or 128 and the signal that ended it. Children other than pid are
// those the command left behind, whose parent this process became.
func waitFor(pid int) (int, error) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("wait: %w", err)
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), nil
		case ws.Signaled():
			return 128 + int(ws.Signal()), nil
		}
	}
}

// mountAll makes the command's view of the file system.
func mountAll(spec Spec) error {
	// Nothing mounted here reaches the service's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	cover := outermost(spec.Cover)
	var keep []string
	for _, k := range outermost(spec.Keep) {
		if slices.ContainsFunc(cover, func(c string) bool { return within(k, c) }) {
			keep = append(keep, k)
		}
	}
	// The directories kept are taken before they are covered.
	trees := make([]int, len(keep))
	for i, k := range keep {
		fd, err := unix.OpenTree(unix.AT_FDCWD, k, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("take %s: %w", k, err)
		}
		trees[i] = fd
	}
	empty := -1 // an empty file to cover hidden files with, made once
	defer func() {
		if empty >= 0 {
			_ = unix.Close(empty)
		}
	}()
	for _, c := range cover {
		fi, err := os.Stat(c)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			// A hidden file (a key the service holds): Landlock keeps it
			// from being read, not from having its permissions or times
			// changed; an empty file over it leaves nothing to change.
			if empty < 0 {
				if empty, err = emptyFile(); err != nil {
					return fmt.Errorf("cover %s: %w", c, err)
				}
			}
			if err := coverFile(empty, c); err != nil {
				return fmt.Errorf("cover %s: %w", c, err)
			}
			continue
		}
		if err := unix.Mount("tmpfs", c, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
			return fmt.Errorf("cover %s: %w", c, err)
		}
	}
	for i, k := range keep {
		// Searchable, not listable: the command may run as another user than
		// this process (Spec.UID).
		if err := os.MkdirAll(k, 0o711); err != nil {
			return err
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, k, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("keep %s: %w", k, err)
		}
		_ = unix.Close(trees[i])
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("/dev/shm: %w", err)
		}
	}
	// The service's devpts instance holds every task's pseudo-terminals,
	// all of the same user: a command could write to another's terminal
	// (what that task's program reads as its output) or read what is typed
	// to it. A new instance holds only the command's own; /dev/ptmx makes
	// its terminals in the instance on the pts directory beside it.
	if fi, err := os.Stat("/dev/pts"); err == nil && fi.IsDir() {
		if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
			"newinstance,mode=0600,ptmxmode=0666"); err != nil {
			return fmt.Errorf("/dev/pts: %w", err)
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	return nil
}

// emptyFile makes a tmpfs mounted nowhere and returns a mount of an empty
// file on it, read-only, to be moved onto hidden files.
func emptyFile() (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "size", "4k"); err != nil {
		return -1, err
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(mnt)
	f, err := unix.Openat(mnt, "empty", unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return -1, err
	}
	_ = unix.Close(f)
	fd, err := unix.OpenTree(mnt, "empty", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, err
	}
	// Read-only, and so are the copies made of it: not even its own
	// permissions can be changed.
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// coverFile mounts a copy of the empty file's mount on path.
func coverFile(empty int, path string) error {
	fd, err := unix.OpenTree(empty, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// outermost are the clean paths of ps, without those within another.
func outermost(ps []string) []string {
	var out []string
	for _, p := range slices.Sorted(slices.Values(ps)) {
		p = filepath.Clean(p)
		if !slices.ContainsFunc(out, func(o string) bool { return within(p, o) }) {
			out = append(out, p)
		}
	}
	return out
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// loopbackUp brings up the loopback interface of a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// restrict leaves this thread, and what it starts, with the command's IDs,
// without capabilities, without new privileges, without unix sockets when
// asked, and, with a ruleset, in its Landlock domain.
func restrict(spec Spec) error {
	if spec.UID != 0 {
		if err := SwitchThreadIDs(spec.UID, spec.GID); err != nil {
			return err
		}
	}
	if err := DropCapabilities(); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no new privileges: %w", err)
	}
	if spec.NoUnixSockets {
		if err := BlockUnixSockets(); err != nil {
			return err
		}
	}
	if !spec.Ruleset {
		return nil
	}
	for _, r := range spec.Rules {
		if err := addRule(r); err != nil {
			return fmt.Errorf("allow %s: %w", r.Path, err)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, RulesetFD, 0, 0); errno != 0 {
		return fmt.Errorf("restrict: %w", errno)
	}
	return unix.Close(RulesetFD)
}

func addRule(r Rule) error {
	fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := unix.LandlockPathBeneathAttr{Allowed_access: r.Access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, RulesetFD, unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// probe checks what was set up: this process sees itself as process 1, and
// the directories covered hold nothing but what was kept.
func probe(spec Spec) error {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(b), "1 ") {
		return errors.New("/proc is not this namespace's")
	}
	for _, c := range outermost(spec.Cover) {
		ents, err := os.ReadDir(c)
		if err != nil {
			continue // the ruleset may forbid listing it
		}
		for _, e := range ents {
			p := filepath.Join(c, e.Name())
			if !slices.ContainsFunc(spec.Keep, func(k string) bool { return within(k, p) }) {
				return fmt.Errorf("%s is still visible", p)
			}
		}
	}
	return nil
}

// SwitchThreadIDs gives the calling thread (only: the raw system calls
// change one thread's credentials, where the Go runtime's change every
// thread's) the user and group uid and gid, and no supplementary group. A
// thread whose user was root loses its capabilities with it.
func SwitchThreadIDs(uid, gid int) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
		return fmt.Errorf("drop supplementary groups: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); errno != 0 {
		return fmt.Errorf("set group %d: %w", gid, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
		return fmt.Errorf("set user %d: %w", uid, errno)
	}
	return nil
}

// Securebits (linux/securebits.h): a thread with an ID of 0 gets no
// capabilities when it executes a program, nor when its IDs change, and
// neither setting can be undone.
const (
	secbitNoRoot              = 1 << 0
	secbitNoRootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
)

// DropCapabilities leaves the calling thread, and what it starts, without
// any capability: a service that runs as root (in a container, say) would
// otherwise pass every one of them to the commands, which could then
// override file permissions, read non-dumpable processes or make device
// files. An unprivileged thread has none to drop.
func DropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if data[0].Permitted == 0 && data[1].Permitted == 0 && data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	// While the thread has CAP_SETPCAP: the securebits, then the bounding
	// set, which an ID of 0 would otherwise get back at exec. Any other ID
	// gets none at exec (no new privileges keeps file capabilities away),
	// and a thread holding only some capabilities may not change either.
	if data[0].Effective&(1<<unix.CAP_SETPCAP) == 0 {
		return clearCapabilities(&hdr)
	}
	if err := unix.Prctl(unix.PR_SET_SECUREBITS,
		secbitNoRoot|secbitNoRootLocked|secbitNoSetuidFixup|secbitNoSetuidFixupLocked, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability
		}
		if err != nil {
			return fmt.Errorf("bounding set: %w", err)
		}
	}
	return clearCapabilities(&hdr)
}

// clearCapabilities empties the thread's ambient, permitted, effective and
// inheritable sets.
func clearCapabilities(hdr *unix.CapUserHeader) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("ambient set: %w", err)
	}
	var data [2]unix.CapUserData
	return unix.Capset(hdr, &data[0])
}

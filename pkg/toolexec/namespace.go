package toolexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"sylk.dev/sylk/pkg/taskinit"
)

// Namespaces (Config.Namespaces). Landlock decides what a confined command
// may open, but a command still shares the service's user, /proc, /dev/shm
// and process tree with every other task. In namespaces of its own (started
// through the sylk-task-init program, package taskinit) a command:
//   - cannot name another task's directory at all: the workspace roots and
//     hidden directories are empty but for its own directory and the
//     directories it may write, so it can no longer change the permissions
//     of a sibling task's directory either;
//   - sees only its own processes in /proc (no other command lines) and has
//     a /dev/shm, pseudo-terminals and System V IPC of its own;
//   - ends with everything it started: when it exits, the kernel kills every
//     process left in its PID namespace, whichever session or cgroup they
//     moved to. That is what lets confined task directories be reused.
//
// With Config.Network "none" (the default) it also gets a network namespace
// with nothing but its loopback interface, where the init program serves
// the egress proxy's port (network.go), and may make no unix socket. When
// the service runs as root, the command runs as Config.TaskUID and
// TaskGID (owner.go).

// Namespace settings.
const (
	NamespacesAuto = "auto"
	NamespacesOn   = "on"
	NamespacesOff  = "off"
	NetworkHost    = "host"
	NetworkNone    = "none"
)

// namespaces is how an executor starts commands in namespaces of their own.
type namespaces struct {
	init string // the sylk-task-init program
	// base is what every command's specification holds: its network
	// namespace, unix sockets and IDs.
	base taskinit.Spec
	// proxy is the egress proxy's socket (O_PATH), nil without.
	proxy *os.File
	// relay starts the program as it is, to make the namespaces itself:
	// this process is not dumpable (protectProcess), so unless it is root,
	// it cannot write the ID maps of a process it starts in a user
	// namespace.
	relay bool
}

// attr sets what starts the init program.
func (ns *namespaces) attr(sys *syscall.SysProcAttr) {
	if !ns.relay {
		taskinit.Attr(sys, ns.base)
	}
}

// newNamespaces finds the task init program and checks, by starting it,
// that this process may make the namespaces, with commands running as uid
// and gid (when uid is not 0). A nil result with a nil error means the
// setting is off.
func newNamespaces(cfg Config, uid, gid int) (*namespaces, error) {
	if cfg.Namespaces == NamespacesOff || !cfg.Confine {
		return nil, nil
	}
	init, err := findTaskInit(cfg.TaskInit)
	if err == nil {
		none := cfg.Network == NetworkNone
		ns := &namespaces{init: init, base: taskinit.Spec{Loopback: none, NoUnixSockets: none, UID: uid, GID: gid}}
		if err = ns.probe(); err == nil {
			return ns, nil
		}
		// The relay maps only the service's own user: it serves a service
		// that does not run as root.
		if uid == 0 {
			ns.relay = true
			if err = ns.probe(); err == nil {
				return ns, nil
			}
		}
	}
	err = fmt.Errorf("no namespaces for commands: %w", err)
	if cfg.Namespaces == NamespacesOn {
		return nil, err
	}
	return nil, errNamespacesUnavailable{err}
}

type errNamespacesUnavailable struct{ err error }

func (e errNamespacesUnavailable) Error() string { return e.err.Error() }
func (e errNamespacesUnavailable) Unwrap() error { return e.err }

// findTaskInit is the program given, else the one beside this process's
// own program, else the one on PATH.
func findTaskInit(given string) (string, error) {
	if given != "" {
		if _, err := exec.LookPath(given); err != nil {
			return "", fmt.Errorf("toolexec.task-init: %w", err)
		}
		return given, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), taskinit.Name)
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(taskinit.Name)
	if err != nil {
		return "", fmt.Errorf("%s is neither beside this program nor on PATH (toolexec.task-init names it)", taskinit.Name)
	}
	return p, nil
}

// probe starts the init program on a directory of its own, which it must
// find emptied but for the directory kept.
func (ns *namespaces) probe() error {
	root, err := os.MkdirTemp("", "sylk-ns-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	task, other := filepath.Join(root, "task"), filepath.Join(root, "other")
	for _, d := range []string{task, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	spec := ns.base
	spec.Dir, spec.Cover, spec.Keep, spec.Probe, spec.Relay = task, []string{root}, []string{task}, true, ns.relay
	args, err := taskinit.Args(ns.init, spec, "", nil)
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{Path: ns.init, Args: args[:2], Dir: task, SysProcAttr: &syscall.SysProcAttr{}}
	ns.attr(cmd.SysProcAttr)
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(out) > 0 {
			return fmt.Errorf("%w: %s", err, clip(string(out), 500))
		}
		return err
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// start starts cmd through the init program under p: the command's view
// covers p's hidden directories but for its workspace and writable ones, and
// it runs restricted by p's Landlock ruleset when confined is true.
func (ns *namespaces) start(cmd *exec.Cmd, p confinedPolicy, confined bool) error {
	spec := ns.base
	spec.Dir, spec.Cover, spec.Keep, spec.Relay = cmd.Dir, p.hidden, slices.Concat([]string{p.workspace}, p.shared, p.extra), ns.relay
	// The init program checks that this process still lives once its
	// parent-death signal is set (parentdeath.go).
	spec.Parent = os.Getpid()
	if confined {
		p.private = true
		r, err := p.build(LandlockABI())
		if err != nil {
			return err
		}
		spec.Rules = []taskinit.Rule{{Path: "/proc", Access: llRead & r.handled},
			{Path: "/dev/shm", Access: llAll & r.handled}, {Path: "/dev/pts", Access: llAll & r.handled}}
		// A private ruleset is this command's alone: the file owns it.
		f := os.NewFile(uintptr(r.fd), "landlock-ruleset")
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f}
		spec.Ruleset = true
	}
	if ns.proxy != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, ns.proxy)
		spec.ProxyFD, spec.ProxyPort = 2+len(cmd.ExtraFiles), nsProxyPort
	}
	args, err := taskinit.Args(ns.init, spec, cmd.Path, cmd.Args)
	if err != nil {
		return err
	}
	cmd.Path, cmd.Args = ns.init, args
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	ns.attr(cmd.SysProcAttr)
	return cmd.Start()
}

// Namespaced reports whether each command runs in namespaces of its own
// (Config.Namespaces), and, when not, why.
func (e *Executor) Namespaced() (bool, error) {
	if e.ns != nil {
		return true, nil
	}
	if e.noNamespaces != nil {
		return false, e.noNamespaces
	}
	if !e.cfg.Confine {
		return false, errors.New("toolexec.confine is off")
	}
	return false, errors.New("toolexec.namespaces is off")
}

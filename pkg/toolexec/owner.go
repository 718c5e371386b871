package toolexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Task users. A service that runs as root would run its commands as root:
// whatever confines them, root reads /etc/shadow and every root-only file
// that is not hidden from it, and changes the mode and times of any file
// it can name. In namespaces of their own such commands run as
// Config.TaskUID and TaskGID instead (the user namespace maps those and
// root to themselves; the init program sets the namespaces up as root and
// starts the command with the unprivileged IDs). Without namespaces a
// service that runs as root refuses to start, unless
// Config.UnsafeRunTasksAsRoot says to run them as root anyway.
//
// A command must write its workspace and its writable directories, which
// the service made as root: while commands run in a workspace, it and
// they belong to the task user (owners.hold), and they go back to the
// service's user when the last one ends, so that the service's own
// programs (git, which refuses a repository of another user) find them as
// they left them. The directories above a workspace root or a writable
// directory must be searchable by the task user (checkSearchable).

// owners tracks the workspaces handed to the task user.
type owners struct {
	uid, gid int
	mu       sync.Mutex
	held     map[string]int // workspace -> commands running in it
}

// hold hands the workspace (and what it holds) to the task user, and the
// writable directories too, the first time (what is in them the task user
// made: its caches); it returns the function that hands the workspace
// back.
func (o *owners) hold(workspace string, writable []string) (func(), error) {
	for _, w := range writable {
		var st unix.Stat_t
		if err := unix.Stat(w, &st); err == nil && int(st.Uid) == o.uid {
			continue
		}
		if err := chownTree(w, o.uid, o.gid); err != nil {
			return nil, fmt.Errorf("hand %s to the task user: %w", w, err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held[workspace] == 0 {
		if err := chownTree(workspace, o.uid, o.gid); err != nil {
			_ = chownTree(workspace, os.Getuid(), os.Getgid())
			return nil, fmt.Errorf("hand %s to the task user: %w", workspace, err)
		}
	}
	o.held[workspace]++
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.held[workspace]--; o.held[workspace] == 0 {
			delete(o.held, workspace)
			_ = chownTree(workspace, os.Getuid(), os.Getgid())
		}
	}, nil
}

// chownTree gives dir and everything below it (symlinks themselves, not
// what they point to) to uid and gid, skipping what is theirs already.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		if int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		if err := unix.Lchown(p, uid, gid); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	})
}

// checkSearchable reports an error unless uid and gid may pass through
// every directory above dir (not dir itself, which becomes theirs).
func checkSearchable(dir string, uid, gid int) error {
	for p := filepath.Dir(filepath.Clean(dir)); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
		mode := st.Mode
		ok := mode&0o001 != 0 || (int(st.Uid) == uid && mode&0o100 != 0) || (int(st.Gid) == gid && mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("%s: the task user %d cannot pass through %s (give it o+x, or choose a directory elsewhere)", dir, uid, p)
		}
		if p == "/" {
			return nil
		}
	}
}

// TaskUser is the user and group commands run as when not the service's
// own (the service runs as root), and whether they are.
func (e *Executor) TaskUser() (uid, gid int, other bool) {
	if e.owners == nil {
		return os.Getuid(), os.Getgid(), false
	}
	return e.owners.uid, e.owners.gid, true
}

// CheckReachable reports an error when commands, running as the task user,
// could not pass through the directories above dir (a directory of theirs
// the service makes there later, such as their caches).
func (e *Executor) CheckReachable(dir string) error {
	if e.owners == nil {
		return nil
	}
	return checkSearchable(resolved(dir), e.owners.uid, e.owners.gid)
}

// reclaim gives back to a service running as root the writable directories
// that are another user's (the task user's, from namespaced runs).
func reclaim(dirs []string) {
	if os.Geteuid() != 0 {
		return
	}
	for _, d := range dirs {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Uid != 0 {
			_ = chownTree(d, 0, 0)
		}
	}
}

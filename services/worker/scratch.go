package worker

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// removeWorkspace deletes a workspace, first making directories writable
// when a command removed their write permission.
func removeWorkspace(ws string) {
	if err := os.RemoveAll(ws); err == nil {
		return
	}
	_ = filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(ws)
}

// scratchPool hands out task directories. Creating and removing a
// directory is the expensive part of a no-op task on most filesystems (a
// block is allocated, and freed, for each), so a directory whose task has
// ended is emptied, checked and kept for a later task instead of removed:
// a task still starts with nothing in its directory but an empty .tmp. A
// directory that cannot be emptied, or whose type or permissions the task
// changed, is removed as before. Spare empty directories are kept as well,
// for the dependencies' outputs (.upstream), and moved in by a rename.
//
// A directory is kept for later tasks of the same user (its scope) only.
// Nothing a task started outlives it in namespaces of its own, but a
// descriptor of its directory can: the task can pass it, through a socket
// in the user's Go cache, to another task of the user that is still
// running, which could then list, chmod or touch what a later task puts
// in the same directory (Landlock governs opening, not these).
type scratchPool struct {
	root string
	max  int

	mu     sync.Mutex
	free   []keptDir // root/sylk-task-*, each holding only an empty .tmp
	spare  []keptDir // empty root/sylk-spare-* directories
	closed bool
}

// keptDir is a directory kept for a later task of the user scope.
type keptDir struct{ dir, scope string }

// take removes from *list the directory kept last for scope, "" when none.
func take(list *[]keptDir, scope string) string {
	for i := len(*list) - 1; i >= 0; i-- {
		if k := (*list)[i]; k.scope == scope {
			*list = slices.Delete(*list, i, i+1)
			return k.dir
		}
	}
	return ""
}

// keep adds k to *list, which holds at most max: it returns the directory
// dropped for it (the oldest, of whichever user), to be removed, or "".
func keep(list *[]keptDir, k keptDir, max int) string {
	*list = append(*list, k)
	if len(*list) <= max {
		return ""
	}
	old := (*list)[0].dir
	*list = slices.Delete(*list, 0, 1)
	return old
}

func newScratchPool(root string, max int) *scratchPool {
	return &scratchPool{root: root, max: max}
}

// get returns an empty task directory holding an empty .tmp, for a task of
// the user scope, or "" and an error.
func (p *scratchPool) get(scope string) (string, error) {
	p.mu.Lock()
	ws := take(&p.free, scope)
	p.mu.Unlock()
	if ws != "" {
		return ws, nil
	}
	ws, err := os.MkdirTemp(p.root, "sylk-task-")
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(ws, scratchTmp), 0o700); err != nil {
		removeWorkspace(ws)
		return "", err
	}
	return ws, nil
}

// mkdir creates the directory dir (which must not exist) with mode 0700,
// from a spare one of the user scope when there is one.
func (p *scratchPool) mkdir(scope, dir string) error {
	p.mu.Lock()
	sp := take(&p.spare, scope)
	p.mu.Unlock()
	if sp != "" {
		// A rename replaces an empty directory: refuse as mkdir would.
		if _, err := os.Lstat(dir); err == nil {
			p.keepSpare(scope, sp)
			return &os.PathError{Op: "mkdir", Path: dir, Err: os.ErrExist}
		}
		if err := os.Rename(sp, dir); err == nil {
			return nil
		}
		_ = os.RemoveAll(sp)
	}
	return os.Mkdir(dir, 0o700)
}

// put takes back the task directory of a task of the user scope: emptied
// and kept for that user's tasks when that is safe, removed otherwise.
func (p *scratchPool) put(scope, ws string) {
	if ws == "" {
		return
	}
	if p.max == 0 {
		removeWorkspace(ws)
		return
	}
	if p.reset(scope, ws) {
		p.mu.Lock()
		if !p.closed {
			old := keep(&p.free, keptDir{ws, scope}, p.max)
			p.mu.Unlock()
			if old != "" {
				removeWorkspace(old)
			}
			return
		}
		p.mu.Unlock()
	}
	removeWorkspace(ws)
}

// reset empties ws down to an empty .tmp and reports whether it is fit for
// another task: a real directory with mode 0700, holding only .tmp, also a
// real, empty directory with mode 0700.
func (p *scratchPool) reset(scope, ws string) bool {
	if !privateDir(ws) {
		return false
	}
	names, err := dirNames(ws)
	if err != nil {
		return false
	}
	changed := false
	for _, n := range names {
		full := filepath.Join(ws, n)
		switch n {
		case scratchTmp:
			continue
		case scratchUpstream:
			if privateDir(full) && emptyDir(full) {
				sp := filepath.Join(p.root, "sylk-spare-"+rand.Text())
				if os.Rename(full, sp) == nil {
					p.keepSpare(scope, sp)
					changed = true
					continue
				}
			}
		}
		if os.RemoveAll(full) != nil {
			return false
		}
		changed = true
	}
	tmp := filepath.Join(ws, scratchTmp)
	if !privateDir(tmp) {
		return false
	}
	left, err := dirNames(tmp)
	if err != nil {
		return false
	}
	if !changed && len(left) == 0 && slices.Equal(names, []string{scratchTmp}) {
		// The task left nothing behind (the usual case for a command
		// that writes no file): the listings above are the check.
		return true
	}
	if !emptyDir(tmp) {
		return false
	}
	// Check the result: nothing may be left but the empty .tmp.
	names, err = dirNames(ws)
	if err != nil || len(names) != 1 || names[0] != scratchTmp {
		return false
	}
	names, err = dirNames(tmp)
	return err == nil && len(names) == 0
}

func (p *scratchPool) keepSpare(scope, sp string) {
	p.mu.Lock()
	if !p.closed {
		old := keep(&p.spare, keptDir{sp, scope}, p.max)
		p.mu.Unlock()
		if old != "" {
			_ = os.RemoveAll(old)
		}
		return
	}
	p.mu.Unlock()
	_ = os.RemoveAll(sp)
}

// close removes the kept directories; later ones are removed when put back.
func (p *scratchPool) close() {
	p.mu.Lock()
	kept := slices.Concat(p.free, p.spare)
	p.free, p.spare, p.closed = nil, nil, true
	p.mu.Unlock()
	for _, k := range kept {
		removeWorkspace(k.dir)
	}
}

// privateDir reports whether path is a directory (not a symlink to one)
// with mode 0700.
func privateDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode() == os.ModeDir|0o700
}

// emptyDir removes everything inside dir and reports whether that worked.
func emptyDir(dir string) bool {
	names, err := dirNames(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if os.RemoveAll(filepath.Join(dir, n)) != nil {
			return false
		}
	}
	return true
}

// dirNames lists dir, which must not be a symlink.
func dirNames(dir string) ([]string, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

const (
	scratchTmp      = ".tmp"
	scratchUpstream = ".upstream"
)

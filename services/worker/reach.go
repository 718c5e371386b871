package worker

import (
	"os"
	"path/filepath"
)

// Task commands of a root worker run as the task user (-toolexec.task-uid),
// so the interpreters the Inspector and the Tester name must be ones that
// user can run: not, say, a version manager's copy under root's home.

// programs lists every executable named name on the worker's PATH, in PATH
// order.
func programs(name string) []string {
	var out []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			out = append(out, p)
		}
	}
	return out
}

// runnableByTasks reports whether task commands can run the program at p:
// always when they run as the worker's own user, else when every directory
// above it may be passed and the file run by anyone.
func runnableByTasks(p string) bool {
	if os.Geteuid() != 0 {
		return true
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	fi, err := os.Stat(real)
	if err != nil || fi.Mode().Perm()&0o001 == 0 {
		return false
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		di, err := os.Stat(dir)
		if err != nil || di.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == filepath.Dir(dir) {
			return true
		}
	}
}

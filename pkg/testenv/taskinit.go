package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// EnvTaskInit names a sylk-task-init program for TaskInit to return.
const EnvTaskInit = "SYLK_TEST_TASK_INIT"

// TaskInit builds the sylk-task-init program into a directory of the test's
// own and returns its path, for executors that start commands in namespaces
// (toolexec.Config.TaskInit). SYLK_TEST_TASK_INIT names a program built
// already instead.
func TaskInit(t testing.TB) string {
	t.Helper()
	return Program(t, "sylk.dev/sylk/cmd/sylk-task-init", EnvTaskInit)
}

// Program builds the Go program of the package path into a directory of
// the test's own that any user may read, and returns the program's path;
// the environment variable env, when set, names a program built already
// (for runs as a user who cannot build). The build cache makes all but the
// first build a link.
func Program(t testing.TB, path, env string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	dir := t.TempDir()
	// Its parent too: commands may run as another user (the task user of
	// a root worker).
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatalf("build %s: %v", path, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("build %s: %v", path, err)
	}
	out := filepath.Join(dir, filepath.Base(path))
	if b, err := exec.Command("go", "build", "-o", out, path).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", path, err, b)
	}
	return out
}

// ProcessesWith are the PIDs of the machine's processes whose command line
// holds s: what a test's command left running under a marked name.
func ProcessesWith(t testing.TB, s string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var pids []string
	for _, en := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, en.Name())
		}
	}
	return pids
}

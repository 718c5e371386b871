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
// (toolexec.Config.TaskInit). The build cache makes all but the first build
// a link. SYLK_TEST_TASK_INIT names a program built already instead.
func TaskInit(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvTaskInit); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "sylk-task-init")
	cmd := exec.Command("go", "build", "-o", out, "sylk.dev/sylk/cmd/sylk-task-init")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sylk-task-init: %v\n%s", err, b)
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

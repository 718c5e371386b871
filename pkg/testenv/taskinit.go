package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
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

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// TestNamespacedTasks runs tasks, over REST, with each command in
// namespaces of its own: a task sees only its own processes, has a
// /dev/shm of its own, cannot name another task's directory, and what it
// leaves running ends with it; a repository pipeline (clone, edit, go vet,
// go test with the user's Go caches) works as without.
func TestNamespacedTasks(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(root), 0o711)) // for the task user
	other := filepath.Join(root, "sylk-task-other")
	require.NoError(t, os.Mkdir(other, 0o700))
	c := startMesh(t, "-toolexec.namespaces", "on", "-toolexec.task-init", testenv.TaskInit(t),
		"-toolexec.cgroup", "", "-worker.workspace-root", root)
	marker := "sylk-e2e-left-" + testenv.ID()
	repo := e2eRepo(t)
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(repo), "maxConcurrency": 2, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "leave", "command": "echo mine > /dev/shm/left; setsid env -i sh -c 'exec -a " + marker +
			" sleep 300' </dev/null >/dev/null 2>&1 & cat /proc/1/comm"},
		map[string]any{"id": "look", "dependsOn": []string{"leave"},
			"command": "test ! -e /dev/shm/left && ls /proc | grep -c '^[0-9]' && chmod 777 ../sylk-task-other || echo refused"},
		map[string]any{"id": "mul", "pipeline": true, "edits": []any{map[string]any{"path": "mul.go",
			"content": "package calc\n\n// Mul multiplies.\nfunc Mul(a, b int) int { return a * b }\n"}}},
	}}}))
	n := nodeMap(run)
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "%v", n)
	require.Equal(t, "sylk-task-init\n", n["leave"]["stdout"])
	look := strings.Fields(n["look"]["stdout"].(string))
	require.Len(t, look, 2, n["look"])
	require.Equal(t, "refused", look[1])
	require.Contains(t, n["look"]["stderr"], "No such file")
	require.Equal(t, "completed", n["mul"]["pipeline"].(map[string]any)["state"], "%v", n["mul"])
	require.Contains(t, n["mul"]["patch"], "+func Mul(a, b int) int")

	fi, err := os.Stat(other)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.Empty(t, testenv.ProcessesWith(t, marker), "a process outlived its task")
	require.EqualValues(t, 1, c.metric("sylk_worker_namespaced"))
}

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// Tests of the Orchestrator that need a real worker: they ran in the
// Orchestrator's package against an in-process worker, which that package
// no longer imports. Here they drive the whole mesh over REST.

// owWait is how long a step of these tests may take.
const owWait = 60 * time.Second

// owSession creates a session and returns its name and id.
func (c *client) owSession(display string) (name, id string) {
	c.t.Helper()
	name = c.ok("POST", "/v1/sessions", map[string]any{"displayName": display})["session"].(map[string]any)["name"].(string)
	return name, strings.TrimPrefix(name, "sessions/")
}

// owRun reads a run.
func (c *client) owRun(name string) map[string]any {
	c.t.Helper()
	return c.ok("GET", "/v1/"+name, nil)["run"].(map[string]any)
}

// owWaitFile waits until a task command created path.
func owWaitFile(t *testing.T, path string) {
	t.Helper()
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, owWait, 20*time.Millisecond, "%s never appeared", path)
}

// owEventTypes waits until the session's events include every type of
// want (EventType names as REST renders them).
func (c *client) owEventTypes(session string, want ...string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		seen := map[string]bool{}
		for _, e := range c.events(session, 0) {
			seen[fmt.Sprint(e["type"])] = true
		}
		for _, w := range want {
			if !seen[w] {
				return false
			}
		}
		return true
	}, owWait, 50*time.Millisecond, "events of %s never included %v", session, want)
}

// owEdit is a node's edit as REST takes it.
func owEdit(path, content string) []any {
	return []any{map[string]any{"path": path, "content": content}}
}

// owPythonRepo makes a git repository holding files; tests that need one
// need python3 to run its tests.
func owPythonRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.MissingTool(t, "python3")
	}
	return pyRepo(t, files)
}

// owZombie says whether pid has exited and awaits its parent.
func owZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

const (
	owCalcPy     = "def add(a, b):\n    return a + b\n"
	owTestCalcPy = "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n"
)

// TestOrchestratorWithTheWorker: the Orchestrator's user actions on running
// and failed pipelines (spec F-11, F-13), cancellation reaching the
// worker's process, and session checks (F-06), with the real worker.
func TestOrchestratorWithTheWorker(t *testing.T) {
	// The task commands write their signals where they may write, and run
	// in the test's PID namespace, so that it can see their process end
	// (as root, too: the test is about the pipeline, not the sandbox).
	signals := t.TempDir()
	c := startMesh(t, "-toolexec.confine-writable", signals, "-toolexec.namespaces", "off", "-toolexec.unsafe-run-tasks-as-root")

	t.Run("task actions on a running pipeline", func(t *testing.T) {
		sname, sid := c.owSession("running pipeline")
		ready := filepath.Join(signals, "pipeline-ready")
		repo := owPythonRepo(t, map[string]string{
			"calc.py": owCalcPy,
			"test_calc.py": "import pathlib, time, unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n" +
				"        pathlib.Path(\"" + ready + "\").touch()\n        time.sleep(60)\n",
		})
		name := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(repo), "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "p", "name": "swap operands", "pipeline": true, "edits": owEdit("calc.py", "def add(a, b):\n    return b + a\n")},
			map[string]any{"id": "after", "command": "true", "dependsOn": []any{"p"}},
		}}})
		owWaitFile(t, ready)

		// The Guide's form: the session and the node.
		q := c.ok("POST", "/v1/"+sname+"/tasks:action", map[string]any{"nodeId": "p", "action": "TASK_ACTION_TYPE_QUERY"})
		require.Equal(t, name, q["run"])
		require.Equal(t, "NODE_STATE_DISPATCHED", q["nodeState"])
		pipe := q["pipeline"].(map[string]any)
		require.Equal(t, "tester", pipe["stage"])
		require.Equal(t, "testing", pipe["state"])
		require.EqualValues(t, 1, pipe["loops"])
		require.Equal(t, "stage tester, loop 1 of 3", q["detail"])

		ig := c.ok("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "p", "action": "TASK_ACTION_TYPE_IGNORE_TESTER"})
		require.Contains(t, ig["detail"], "stopped and counts as passed")

		run := c.waitRun(name)
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		p := nodeMap(run)["p"]
		require.Equal(t, "completed", p["pipeline"].(map[string]any)["state"])
		require.Equal(t, []any{"ignore_tester"}, p["pipeline"].(map[string]any)["overrides"])
		require.Contains(t, p["report"].(map[string]any)["deviations"], "ignore_tester")
		require.Equal(t, "NODE_STATE_SUCCEEDED", nodeMap(run)["after"]["state"])

		r := c.do("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "p", "action": "TASK_ACTION_TYPE_INTERRUPT"})
		require.Equal(t, http.StatusBadRequest, r.Status, "a finished node cannot be interrupted: %s", r.Raw)
		require.Contains(t, r.Raw, "NODE_NOT_RUNNING")
		r = c.do("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "nope", "action": "TASK_ACTION_TYPE_QUERY"})
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
		r = c.do("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "p"})
		require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
		c.owEventTypes(sname, "EVENT_TYPE_NODE_ACTION", "EVENT_TYPE_RUN_COMPLETED")
	})

	t.Run("an interrupt fails a running node keeping its output", func(t *testing.T) {
		ready := filepath.Join(signals, "interrupt-ready")
		name := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "slow", "command": "echo before-interrupt; touch " + ready + "; sleep 60"},
		}}})
		owWaitFile(t, ready)
		resp := c.ok("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "slow", "action": "TASK_ACTION_TYPE_INTERRUPT",
			"message": "taking too long"})
		require.Contains(t, resp["detail"], "interrupting the command stage")
		run := c.waitRun(name)
		require.Equal(t, "RUN_STATE_FAILED", run["state"])
		n := nodeMap(run)["slow"]
		require.Equal(t, "interrupted by the user during the command stage: taking too long", n["error"])
		require.Contains(t, n["stdout"], "before-interrupt")
	})

	t.Run("a failed pipeline's options run the node again", func(t *testing.T) {
		sname, sid := c.owSession("failed pipeline")
		repo := owPythonRepo(t, map[string]string{"calc.py": "def add(a, b):\n    return a - b\n", "test_calc.py": owTestCalcPy})
		name := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(repo), "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "p", "name": "document add", "pipeline": true, "maxLoops": 1, "edits": owEdit("README.md", "add(a, b)\n")},
			map[string]any{"id": "after", "command": "true", "dependsOn": []any{"p"}},
		}}})
		run := c.waitRun(name)
		require.Equal(t, "RUN_STATE_FAILED", run["state"])
		pipe := nodeMap(run)["p"]["pipeline"].(map[string]any)
		require.Equal(t, "failed", pipe["state"])
		require.Len(t, pipe["options"], 4)
		require.Equal(t, "python-unittest", pipe["lastTestResult"].(map[string]any)["frameworkId"])
		require.Equal(t, "NODE_STATE_SKIPPED", nodeMap(run)["after"]["state"])

		// Option 1: more loops (still failing: the Engineer has no model).
		r := c.ok("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "p", "action": "TASK_ACTION_TYPE_RETRY", "maxLoops": 2})
		require.Equal(t, "the node runs again with max_loops 2", r["detail"])
		require.Eventually(t, func() bool {
			run = c.owRun(name)
			n := nodeMap(run)["p"]
			return run["state"] == "RUN_STATE_FAILED" && fmt.Sprint(n["attempt"]) == "2" && n["state"] == "NODE_STATE_FAILED"
		}, owWait, 50*time.Millisecond)
		pipe = nodeMap(run)["p"]["pipeline"].(map[string]any)
		require.EqualValues(t, 2, pipe["maxLoops"])
		require.EqualValues(t, 2, pipe["loops"])

		// Option 3: ignore the Tester; the run goes on past it.
		r = c.ok("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "p", "action": "TASK_ACTION_TYPE_IGNORE_TESTER"})
		require.Equal(t, "the node runs again without that stage", r["detail"])
		require.Eventually(t, func() bool { run = c.owRun(name); return run["state"] == "RUN_STATE_SUCCEEDED" }, owWait, 50*time.Millisecond)
		p := nodeMap(run)["p"]
		require.EqualValues(t, 3, p["attempt"])
		require.Equal(t, "not tested: ignore_tester", p["report"].(map[string]any)["tested"])
		require.Equal(t, "NODE_STATE_SUCCEEDED", nodeMap(run)["after"]["state"])
		require.NotEqual(t, true, run["dag"].(map[string]any)["nodes"].([]any)[0].(map[string]any)["ignoreTester"], "the submitted DAG is kept as submitted")
		// Every completion is announced, the reopened ones too.
		require.Eventually(t, func() bool {
			n := 0
			for _, e := range c.events(sname, 0) {
				if e["type"] == "EVENT_TYPE_RUN_COMPLETED" {
					n++
				}
			}
			return n == 3
		}, owWait, 50*time.Millisecond)

		// The decision log holds every attempt, readable over the API.
		d := c.ok("GET", "/v1/"+name+"/decisions", nil)
		var entries []string
		for _, e := range d["entries"].([]any) {
			entry := e.(map[string]any)
			entries = append(entries, fmt.Sprintf("%s/%v", entry["nodeId"], entry["attempt"]))
			if entry["nodeId"] == "p" && fmt.Sprint(entry["attempt"]) == "3" {
				require.Equal(t, []any{"README.md"}, entry["report"].(map[string]any)["filesChanged"])
			}
		}
		require.ElementsMatch(t, []string{"p/1", "p/2", "p/3", "after/1"}, entries)
		require.True(t, strings.HasPrefix(d["log"].(string), "# Implementation Log\n\n## Task p (attempt 1): failed"))
	})

	t.Run("a failed session check asks the Architect for a fix DAG", func(t *testing.T) {
		sname, sid := c.owSession("session checks")
		repo := owPythonRepo(t, map[string]string{"calc.py": owCalcPy, "test_calc.py": owTestCalcPy})
		check := func(name string, want string) map[string]any {
			t.Helper()
			var chk map[string]any
			require.Eventually(t, func() bool {
				chk, _ = c.owRun(name)["sessionCheck"].(map[string]any)
				return chk != nil && chk["state"] == want
			}, owWait, 50*time.Millisecond, "session check of %s: %v", name, chk)
			return chk
		}

		// A run whose merged result is sound passes.
		good := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(repo), "sessionChecks": true, "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "docs", "edits": owEdit("README.md", "calc\n")},
		}}})
		require.Equal(t, "RUN_STATE_SUCCEEDED", c.waitRun(good)["state"])
		chk := check(good, "passed")
		require.Equal(t, true, chk["inspectorPassed"])
		require.EqualValues(t, 1, chk["testResult"].(map[string]any)["passed"])
		require.NotEqual(t, true, chk["fixRequested"])

		// Two tasks that each look fine but break the tests together.
		bad := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(repo), "sessionChecks": true, "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "rename", "edits": owEdit("calc.py", "def plus(a, b):\n    return a + b\n")},
			map[string]any{"id": "docs", "edits": owEdit("README.md", "calc\n")},
		}}})
		require.Equal(t, "RUN_STATE_SUCCEEDED", c.waitRun(bad)["state"])
		chk = check(bad, "failed")
		require.Equal(t, true, chk["inspectorPassed"])
		require.NotEqual(t, true, chk["testerPassed"])
		require.Equal(t, true, chk["fixRequested"])
		require.EqualValues(t, 1, chk["testResult"].(map[string]any)["failed"])
		c.owEventTypes(sname, "EVENT_TYPE_RUN_SESSION_CHECK", "EVENT_TYPE_RUN_FIX_REQUESTED")

		r := c.do("POST", "/v1/runs", map[string]any{"sessionChecks": true, "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "command": "true"}}}})
		require.Equal(t, http.StatusBadRequest, r.Status, "session checks need a repository: %s", r.Raw)
	})

	t.Run("a cancel stops the worker's process", func(t *testing.T) {
		pidFile := filepath.Join(signals, "pid")
		name := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "slow", "command": fmt.Sprintf("echo $$ > %s.tmp && mv %s.tmp %s; exec sleep 100", pidFile, pidFile, pidFile)},
		}}})
		var pid int
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		}, owWait, 10*time.Millisecond)
		c.ok("POST", "/v1/"+name+":cancel", map[string]any{})
		require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil || owZombie(pid) }, owWait, 20*time.Millisecond)
		run := c.owRun(name)
		require.Equal(t, "RUN_STATE_CANCELLED", run["state"])
		require.EqualValues(t, 1, nodeMap(run)["slow"]["attempt"])
	})

	t.Run("a pipeline node runs its loops", func(t *testing.T) {
		name := c.createRun(map[string]any{"repository": c.register(pyRepo(t, map[string]string{"notes.txt": "line one\nline two\n"})), "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "p", "name": "update notes", "pipeline": true, "maxLoops": 2, "command": "test -e never-there",
				"edits": owEdit("notes.txt", "changed\n")},
		}}})
		run := c.waitRun(name)
		require.Equal(t, "RUN_STATE_FAILED", run["state"])
		p := nodeMap(run)["p"]["pipeline"].(map[string]any)
		require.Equal(t, "failed", p["state"])
		require.EqualValues(t, 2, p["loops"])
		require.Len(t, p["options"], 4)
		require.Contains(t, p["feedback"].([]any)[0], "engineer command failed (exit 1)")
	})
}

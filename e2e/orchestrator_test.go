package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

func nodeMap(run map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, n := range run["nodes"].([]any) {
		out[n.(map[string]any)["nodeId"].(string)] = n.(map[string]any)
	}
	return out
}

func (c *client) createRun(body map[string]any) string {
	c.t.Helper()
	return c.ok("POST", "/v1/runs", body)["run"].(map[string]any)["name"].(string)
}

func overlap(a, b map[string]any, t *testing.T) bool {
	return parseTime(t, a["startTime"]).Before(parseTime(t, b["endTime"])) && parseTime(t, b["startTime"]).Before(parseTime(t, a["endTime"]))
}

// TestOrchestratorExecution covers the DAG acceptance behaviours of spec F
// section 4 (1-6) and the run controls, over REST.
func TestOrchestratorExecution(t *testing.T) {
	c := startMesh(t)

	t.Run("layers run in order and overlap within a layer", func(t *testing.T) {
		run := c.waitRun(c.createRun(map[string]any{"maxConcurrency": 4, "dag": map[string]any{
			"nodes": []any{
				map[string]any{"id": "t1", "command": "sleep 0.2"},
				map[string]any{"id": "t2", "command": "sleep 0.5", "dependsOn": []string{"t1"}},
				map[string]any{"id": "t3", "command": "sleep 0.5", "dependsOn": []string{"t1"}},
				map[string]any{"id": "t4", "command": "true", "dependsOn": []string{"t2", "t3"}},
			},
			"executionOrder": []any{map[string]any{"nodeIds": []string{"t1"}}, map[string]any{"nodeIds": []string{"t2", "t3"}}, map[string]any{"nodeIds": []string{"t4"}}},
		}}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		n := nodeMap(run)
		require.False(t, parseTime(t, n["t2"]["startTime"]).Before(parseTime(t, n["t1"]["endTime"])))
		require.True(t, overlap(n["t2"], n["t3"], t), "t2 and t3 run at the same time")
		require.False(t, parseTime(t, n["t4"]["startTime"]).Before(parseTime(t, n["t2"]["endTime"])))
		require.False(t, parseTime(t, n["t4"]["startTime"]).Before(parseTime(t, n["t3"]["endTime"])))

		// A given execution order is kept as layers: a node of a later layer
		// waits for the layers before it, even without depending on them.
		run = c.waitRun(c.createRun(map[string]any{"maxConcurrency": 4, "dag": map[string]any{
			"nodes": []any{
				map[string]any{"id": "first", "command": "sleep 0.3"},
				map[string]any{"id": "later", "command": "true"},
			},
			"executionOrder": []any{map[string]any{"nodeIds": []string{"first"}}, map[string]any{"nodeIds": []string{"later"}}},
		}}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		n = nodeMap(run)
		require.False(t, parseTime(t, n["later"]["startTime"]).Before(parseTime(t, n["first"]["endTime"])), "%v", n)

		bad := c.do("POST", "/v1/runs", map[string]any{"dag": map[string]any{
			"nodes":          []any{map[string]any{"id": "a", "command": "true"}, map[string]any{"id": "b", "command": "true", "dependsOn": []string{"a"}}},
			"executionOrder": []any{map[string]any{"nodeIds": []string{"a", "b"}}},
		}})
		require.Equal(t, http.StatusBadRequest, bad.Status)
		require.Contains(t, bad.Raw, "must come after its dependency")
	})

	t.Run("unchanged files are not checked twice", func(t *testing.T) {
		// Spec C-33: gofmt over the same files in the second node's
		// workspace is answered from the worker's output cache.
		if _, err := exec.LookPath("gofmt"); err != nil {
			testenv.MissingTool(t, "gofmt")
		}
		hits := c.metric("sylk_worker_tool_cache_hits_total")
		run := c.waitRun(c.createRun(map[string]any{"maxConcurrency": 1, "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "fmt1", "command": "gofmt -l ."},
			map[string]any{"id": "fmt2", "command": "gofmt -l ."},
		}}}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		require.GreaterOrEqual(t, c.metric("sylk_worker_tool_cache_hits_total"), hits+1)
	})

	t.Run("max_concurrency bounds running nodes", func(t *testing.T) {
		var nodes []any
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			nodes = append(nodes, map[string]any{"id": id, "command": "sleep 0.3"})
		}
		run := c.waitRun(c.createRun(map[string]any{"maxConcurrency": 4, "dag": map[string]any{"nodes": nodes}}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		var all []map[string]any
		for _, n := range nodeMap(run) {
			all = append(all, n)
		}
		for _, a := range all {
			at := parseTime(t, a["startTime"])
			running := 0
			for _, b := range all {
				if !parseTime(t, b["startTime"]).After(at) && parseTime(t, b["endTime"]).After(at) {
					running++
				}
			}
			require.LessOrEqual(t, running, 4)
		}
	})

	t.Run("fail_fast stops the next layer", func(t *testing.T) {
		run := c.waitRun(c.createRun(map[string]any{"maxConcurrency": 4, "dag": map[string]any{
			"policy": map[string]any{"failFast": true},
			"nodes": []any{
				map[string]any{"id": "l1", "command": "true"},
				map[string]any{"id": "l2a", "command": "exit 3", "dependsOn": []string{"l1"}},
				map[string]any{"id": "l2b", "command": "sleep 0.3", "dependsOn": []string{"l1"}},
				map[string]any{"id": "l3", "command": "true", "dependsOn": []string{"l2b"}},
			},
		}}))
		require.Equal(t, "RUN_STATE_FAILED", run["state"])
		n := nodeMap(run)
		require.Equal(t, "NODE_STATE_FAILED", n["l2a"]["state"])
		require.Equal(t, "NODE_STATE_SUCCEEDED", n["l2b"]["state"], "the running batch finishes")
		require.Equal(t, "NODE_STATE_CANCELLED", n["l3"]["state"])
		require.Nil(t, n["l3"]["attempt"], "l3 was never dispatched")
	})

	t.Run("retries wait for their backoff; the default policy applies", func(t *testing.T) {
		run := c.waitRun(c.createRun(map[string]any{"dag": map[string]any{
			"policy": map[string]any{"defaultRetry": map[string]any{"max": 2, "backoff": "0.1s"}},
			"nodes": []any{
				map[string]any{"id": "r", "command": "exit 1", "retry": map[string]any{"max": 1, "backoff": "1s"}},
				map[string]any{"id": "d", "command": "exit 1"},
			},
		}}))
		require.Equal(t, "RUN_STATE_FAILED", run["state"])
		n := nodeMap(run)
		require.EqualValues(t, 2, n["r"]["attempt"])
		require.EqualValues(t, 3, n["d"]["attempt"])
	})

	t.Run("a node over its timeout is stopped and failed", func(t *testing.T) {
		run := c.waitRun(c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "slow", "command": "sleep 30", "timeout": "0.5s"},
		}}}))
		n := nodeMap(run)["slow"]
		require.Equal(t, "NODE_STATE_FAILED", n["state"])
		require.Equal(t, true, n["timedOut"])
		require.Contains(t, n["error"], "timed out after 500ms")
	})

	t.Run("dependents receive upstream outputs", func(t *testing.T) {
		run := c.waitRun(c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "up", "command": "echo from-up"},
			map[string]any{"id": "down", "command": `cat "$SYLK_UPSTREAM_DIR/up"`, "dependsOn": []string{"up"}},
		}}}))
		require.Equal(t, "from-up\n", nodeMap(run)["down"]["stdout"])
	})

	t.Run("tools run with secrets stripped and output capped", func(t *testing.T) {
		run := c.waitRun(c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "env", "command": "env"},
			map[string]any{"id": "big", "command": "head -c 3000000 /dev/zero | tr '\\0' x"},
		}}}))
		n := nodeMap(run)
		require.NotContains(t, n["env"]["stdout"], "SYLK_")
		require.NotContains(t, n["env"]["stdout"], "_PASSWORD=")
		require.Equal(t, true, n["big"]["outputTruncated"])
		require.Contains(t, n["big"]["stdout"], "bytes truncated")

		// A run whose output is larger than gRPC's default message (4 MiB)
		// can still be read.
		var nodes []any
		for i := range 5 {
			nodes = append(nodes, map[string]any{"id": fmt.Sprintf("mb%d", i),
				"command": "head -c 1000000 /dev/zero | tr '\\0' a; head -c 1000000 /dev/zero | tr '\\0' b >&2"})
		}
		run = c.waitRun(c.createRun(map[string]any{"dag": map[string]any{"nodes": nodes}}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		for i := range 5 {
			n := nodeMap(run)[fmt.Sprintf("mb%d", i)]
			require.Greater(t, len(n["stdout"].(string))+len(n["stderr"].(string)), 1000000, "node mb%d's output is in the run", i)
		}
	})

	t.Run("what a node leaves running ends with it", func(t *testing.T) {
		// A process out of the node's session and without its marker: in a
		// cgroup per command it is killed when the command ends, otherwise
		// by the orphan sweep once no command that ran beside it is live.
		// It is found by a name of its own: in namespaces of their own,
		// the PID a command prints is not the machine's.
		marker := "sylk-e2e-bg-" + testenv.ID()
		run := c.waitRun(c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "bg", "command": "setsid env -i sh -c 'exec -a " + marker + " sleep 300' >/dev/null 2>&1 </dev/null & echo started"},
		}}}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
		require.Equal(t, "started\n", nodeMap(run)["bg"]["stdout"])
		require.Eventually(t, func() bool { return len(testenv.ProcessesWith(t, marker)) == 0 },
			30*time.Second, 20*time.Millisecond, "the node's process was left running")
	})

	t.Run("a run is only in one of the caller's own sessions", func(t *testing.T) {
		alice, bob := c.asUser("default", "alice-runs"), c.asUser("default", "bob-runs")
		sess := alice.ok("POST", "/v1/sessions", map[string]any{"displayName": "alice's"})["session"].(map[string]any)
		sid := sess["id"].(string)
		dag := map[string]any{"nodes": []any{map[string]any{"id": "a", "command": "true"}}}

		theirs := bob.do("POST", "/v1/runs", map[string]any{"sessionId": sid, "dag": dag})
		require.Equal(t, http.StatusNotFound, theirs.Status, theirs.Raw)
		require.Contains(t, theirs.Raw, "session sessions/"+sid+" not found")
		unknown := alice.do("POST", "/v1/runs", map[string]any{"sessionId": "0b7e5c1e-3c55-4d7e-9a51-5d1f0c2b9a10", "dag": dag})
		require.Equal(t, http.StatusNotFound, unknown.Status, unknown.Raw)

		run := alice.waitRun(alice.createRun(map[string]any{"sessionId": sid, "dag": dag}))
		require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])

		alice.ok("POST", "/v1/"+sess["name"].(string)+":complete", map[string]any{"summary": "done"})
		over := alice.do("POST", "/v1/runs", map[string]any{"sessionId": sid, "dag": dag})
		require.Equal(t, http.StatusBadRequest, over.Status, over.Raw)
		require.Contains(t, over.Raw, "is completed; cannot run in it")
	})

	t.Run("a member sees and acts on their own runs only; an admin on the tenant's", func(t *testing.T) {
		alice, bob := c.asUser("default", "alice-own-runs"), c.asUser("default", "bob-own-runs")
		sess := alice.ok("POST", "/v1/sessions", map[string]any{"displayName": "alice's runs"})["session"].(map[string]any)
		name := alice.createRun(map[string]any{"sessionId": sess["id"], "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "n", "command": "sleep 30"}}}})
		for _, call := range []struct{ method, path string }{
			{"GET", "/v1/" + name},
			{"GET", "/v1/" + name + "/decisions"},
			{"POST", "/v1/" + name + ":pause"},
			{"POST", "/v1/" + name + ":cancel"},
			{"POST", "/v1/" + name + ":settle"},
			{"POST", "/v1/" + name + ":taskAction"},
			{"POST", "/v1/" + sess["name"].(string) + "/tasks:action"},
		} {
			var body map[string]any
			switch {
			case strings.HasSuffix(call.path, ":settle"):
				body = map[string]any{"action": "SETTLE_ACTION_KEEP"}
			case strings.Contains(call.path, "ction"):
				body = map[string]any{"nodeId": "n", "action": "TASK_ACTION_TYPE_QUERY"}
			case call.method == "POST":
				body = map[string]any{}
			}
			r := bob.do(call.method, call.path, body)
			require.Equal(t, http.StatusNotFound, r.Status, "%s %s: %s", call.method, call.path, r.Raw)
		}
		for _, verb := range []string{"pause", "resume", "cancel"} {
			r := bob.do("POST", "/v1/"+sess["name"].(string)+"/runs:"+verb, map[string]any{})
			require.Equal(t, http.StatusNotFound, r.Status, "bob %ss alice's session runs: %s", verb, r.Raw)
		}
		require.Empty(t, bob.ok("GET", "/v1/runs?sessionId="+sess["id"].(string), nil)["runs"])
		bobs, _ := bob.ok("GET", "/v1/runs?pageSize=100", nil)["runs"].([]any)
		for _, r := range bobs {
			require.NotEqual(t, name, r.(map[string]any)["name"])
		}
		require.Equal(t, "RUN_STATE_RUNNING", alice.ok("GET", "/v1/"+name, nil)["run"].(map[string]any)["state"],
			"nothing bob did reached the run")
		// The tenant's admin sees and stops it.
		require.Equal(t, name, c.ok("GET", "/v1/"+name, nil)["run"].(map[string]any)["name"])
		c.ok("POST", "/v1/"+name+":cancel", map[string]any{})
		require.Equal(t, "RUN_STATE_CANCELLED", alice.waitRun(name)["state"])
	})

	t.Run("pause, resume and cancel a run, a node and a session", func(t *testing.T) {
		sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "controls"})["session"].(map[string]any)
		sid := strings.TrimPrefix(sess["name"].(string), "sessions/")
		name := c.createRun(map[string]any{"sessionId": sid, "dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "command": "sleep 0.3"},
			map[string]any{"id": "b", "command": "true", "dependsOn": []string{"a"}},
			map[string]any{"id": "c", "command": "true", "dependsOn": []string{"a"}},
		}}})
		paused := c.ok("POST", "/v1/"+name+":pause", map[string]any{})["run"].(map[string]any)
		require.Equal(t, "RUN_STATE_PAUSED", paused["state"])
		c.ok("POST", "/v1/"+name+":cancel", map[string]any{"nodeId": "c"})
		require.Eventually(t, func() bool {
			r := c.ok("GET", "/v1/"+name, nil)["run"].(map[string]any)
			return nodeMap(r)["a"]["state"] == "NODE_STATE_SUCCEEDED"
		}, 30*time.Second, 50*time.Millisecond)
		r := c.ok("GET", "/v1/"+name, nil)["run"].(map[string]any)
		require.Equal(t, "RUN_STATE_PAUSED", r["state"])
		require.Equal(t, "NODE_STATE_PENDING", nodeMap(r)["b"]["state"], "a paused run dispatches nothing")
		resumed := c.ok("POST", "/v1/sessions/"+sid+"/runs:resume", map[string]any{})
		require.Equal(t, []any{name}, resumed["runs"])
		done := c.waitRun(name)
		require.Equal(t, "RUN_STATE_FAILED", done["state"], "a cancelled node fails the run")
		require.Equal(t, "NODE_STATE_SUCCEEDED", nodeMap(done)["b"]["state"])
		require.Equal(t, "NODE_STATE_CANCELLED", nodeMap(done)["c"]["state"])

		long := c.createRun(map[string]any{"sessionId": sid, "dag": map[string]any{"nodes": []any{map[string]any{"id": "z", "command": "sleep 30"}}}})
		cancelled := c.ok("POST", "/v1/sessions/"+sid+"/runs:cancel", map[string]any{})
		require.Equal(t, []any{long}, cancelled["runs"])
		require.Equal(t, "RUN_STATE_CANCELLED", c.waitRun(long)["state"])
		again := c.do("POST", "/v1/"+long+":resume", map[string]any{})
		require.Equal(t, http.StatusBadRequest, again.Status, again.Raw)
	})
}

func e2eRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.22\n",
		"calc.go":      "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"Add(1, 2) != 3\")\n\t}\n}\n",
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	gitCmd(t, dir, "init", "--quiet")
	gitCmd(t, dir, "add", "-A")
	gitCmd(t, dir, "commit", "--quiet", "-m", "init")
	return dir
}

// TestOrchestratorPipelines covers the pipeline loops (spec F section 4,
// 7-9), repository workspaces with patches and conflicts, and the git rules.
func TestOrchestratorPipelines(t *testing.T) {
	c := startMesh(t)
	repo := e2eRepo(t)
	edit := func(path, content string) []any { return []any{map[string]any{"path": path, "content": content}} }
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(repo), "maxConcurrency": 3, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "mul", "name": "add Mul", "pipeline": true,
			"edits": edit("mul.go", "package calc\n\n// Mul multiplies.\nfunc Mul(a, b int) int { return a * b }\n")},
		map[string]any{"id": "ugly", "pipeline": true, "edits": edit("calc.go", "package calc\nfunc Add(a, b int) int {return a+b}\n")},
		map[string]any{"id": "wrong", "pipeline": true, "edits": edit("calc.go", "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n")},
		map[string]any{"id": "push", "command": "git push origin HEAD"},
	}}}))
	require.Equal(t, "RUN_STATE_FAILED", run["state"])
	n := nodeMap(run)

	mul := n["mul"]
	require.Equal(t, "NODE_STATE_SUCCEEDED", mul["state"])
	p := mul["pipeline"].(map[string]any)
	require.Equal(t, "completed", p["state"])
	require.Equal(t, true, p["inspectorPassed"])
	require.Equal(t, true, p["testerPassed"], "completed only when both passed")
	require.Contains(t, mul["patch"], "+func Mul(a, b int) int")
	require.Equal(t, []any{"mul.go"}, mul["report"].(map[string]any)["filesChanged"])

	ugly := n["ugly"]["pipeline"].(map[string]any)
	require.Equal(t, "failed", ugly["state"])
	require.EqualValues(t, 3, ugly["loops"], "MaxLoops 3")
	require.Len(t, ugly["feedback"], 3, "the feedback history grows every loop")
	require.Contains(t, ugly["feedback"].([]any)[0], "not gofmt-formatted")
	require.Len(t, ugly["options"], 4)
	require.True(t, slices.Contains(ugly["options"].([]any), any("/task ugly ignore_inspector")))

	wrong := n["wrong"]["pipeline"].(map[string]any)
	require.Equal(t, "failed", wrong["state"])
	require.Equal(t, true, wrong["inspectorPassed"])
	require.NotEqual(t, true, wrong["testerPassed"], "omitted when false")
	require.EqualValues(t, 1, wrong["lastTestResult"].(map[string]any)["failed"])

	// Each finished pipeline's checks are in the Archivalist's history
	// (spec F-22 inspector_findings, tester_summary).
	search := func(category, title string) map[string]any {
		return c.archived(title, category, 1, func(e map[string]any) bool { return strings.HasPrefix(e["title"].(string), title) })[0]
	}
	runID := strings.TrimPrefix(run["name"].(string), "runs/")
	require.Contains(t, search("inspector_findings", "Inspector findings of "+runID+"/ugly#1")["content"], "Fixes remaining:\n- calc.go: format: not gofmt-formatted")
	require.Contains(t, search("tester_summary", "Tester summary of "+runID+"/wrong#1")["content"], "Last run: go-test, 0 passed, 1 failed")

	require.Equal(t, "NODE_STATE_FAILED", n["push"]["state"])
	require.Contains(t, n["push"]["stderr"], "git push is not allowed for agents")
	require.Contains(t, run["decisionLog"], "## Task mul")

	// A succeeded run merges its patches; a clash between independent nodes
	// is reported, not forced (a dependent starts from its dependency's
	// change, and so does not clash with it).
	merged := c.createRun(map[string]any{"repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "x", "edits": edit("calc.go", "package calc\n\n// Add adds x.\nfunc Add(a, b int) int { return a + b }\n")},
		map[string]any{"id": "y", "edits": edit("calc.go", "package calc\n\n// Add adds y.\nfunc Add(a, b int) int { return a + b }\n")},
		map[string]any{"id": "z", "edits": edit("z.txt", "z\n")},
	}}})
	require.Equal(t, "RUN_STATE_SUCCEEDED", c.waitRun(merged)["state"])
	var final map[string]any
	require.Eventually(t, func() bool {
		final = c.ok("GET", "/v1/"+merged, nil)["run"].(map[string]any)
		return final["resultPatch"] != nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, []any{"y"}, final["mergeConflicts"])
	require.Contains(t, final["resultPatch"], "+// Add adds x.")
	require.Contains(t, final["resultPatch"], "+z")
}

// pyRepo is a git repository holding a small Python project.
func pyRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	gitCmd(t, dir, "init", "--quiet")
	gitCmd(t, dir, "add", "-A")
	gitCmd(t, dir, "commit", "--quiet", "-m", "init")
	return dir
}

// TestOrchestratorTaskActions covers /task on a running pipeline (spec
// F-13) through the Guide and REST, the options after max_loops (F-11), the
// decision log (H-07) and the session-level checks whose failure asks the
// Architect for a fix DAG (F-06).
func TestOrchestratorTaskActions(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.MissingTool(t, "python3")
	}
	// The test's tester writes its signal where task commands may write.
	signals := taskWritableDir(t)
	c := startMesh(t, "-toolexec.confine-writable", signals)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "tasks"})["session"].(map[string]any)
	sname := sess["name"].(string)
	sid := strings.TrimPrefix(sname, "sessions/")
	ready := filepath.Join(signals, "ready")
	repo := pyRepo(t, map[string]string{
		"calc.py": "def add(a, b):\n    return a + b\n",
		"test_calc.py": "import pathlib, time, unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n" +
			"        p = pathlib.Path(\"" + ready + "\")\n" +
			"        if not p.exists():\n            p.touch()\n            time.sleep(60)\n        self.assertEqual(calc.add(1, 2), 3)\n",
	})
	edit := func(path, content string) []any { return []any{map[string]any{"path": path, "content": content}} }

	// A pipeline whose Tester hangs: the user queries it through the Guide,
	// then skips the Tester over REST.
	name := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "swap", "pipeline": true, "edits": edit("calc.py", "def add(a, b):\n    return b + a\n")},
	}}})
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 60*time.Second, 50*time.Millisecond)
	reply := c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": "/task swap query"})["reply"].(string)
	require.Contains(t, reply, "stage tester, loop 1 of 3", reply)
	// Guidance for the Engineer: recorded, and said plainly that no model
	// reads it (the mesh runs the offline provider).
	reply = c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": `/task swap prompt "Focus on error handling first"`})["reply"].(string)
	require.Contains(t, reply, "no language model is configured", reply)
	act := c.ok("POST", "/v1/"+name+":taskAction", map[string]any{"nodeId": "swap", "action": "TASK_ACTION_TYPE_IGNORE_TESTER"})
	require.Contains(t, act["detail"], "stopped and counts as passed")
	run := c.waitRun(name)
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
	require.Equal(t, []any{"prompt", "ignore_tester"}, nodeMap(run)["swap"]["pipeline"].(map[string]any)["overrides"])
	reply = c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": "/task swap interrupt"})["reply"].(string)
	require.Contains(t, reply, "is not running", reply)

	// Two tasks each fine alone whose merged result breaks the tests: the
	// session-level Tester fails and the Architect drafts a fix plan.
	bad := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(repo), "sessionChecks": true, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "rename", "edits": edit("calc.py", "def plus(a, b):\n    return a + b\n")},
		map[string]any{"id": "docs", "edits": edit("README.md", "calc\n")},
	}}})
	require.Equal(t, "RUN_STATE_SUCCEEDED", c.waitRun(bad)["state"])
	var chk map[string]any
	require.Eventually(t, func() bool {
		r := c.ok("GET", "/v1/"+bad, nil)["run"].(map[string]any)
		chk, _ = r["sessionCheck"].(map[string]any)
		return chk != nil && chk["state"] == "failed"
	}, 60*time.Second, 50*time.Millisecond)
	require.Equal(t, true, chk["fixRequested"])
	require.EqualValues(t, 1, chk["testResult"].(map[string]any)["failed"])
	var plans []any
	require.Eventually(t, func() bool {
		plans, _ = c.ok("GET", "/v1/"+sname+"/plans", nil)["plans"].([]any)
		return len(plans) > 0
	}, 60*time.Second, 50*time.Millisecond, "the Architect drafted no fix plan")
	require.Contains(t, plans[0].(map[string]any)["request"], "Fix DAG request")

	// A pipeline that ran out of loops runs again without its Tester; the
	// decision log keeps both attempts.
	failing := pyRepo(t, map[string]string{"calc.py": "def add(a, b):\n    return a - b\n",
		"test_calc.py": "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n"})
	again := c.createRun(map[string]any{"sessionId": sid, "repository": c.register(failing), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "doc", "pipeline": true, "maxLoops": 1, "edits": edit("README.md", "add\n")},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(again)["state"])
	reply = c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": "/task doc ignore_tester"})["reply"].(string)
	require.Contains(t, reply, "runs again without that stage", reply)
	require.Eventually(t, func() bool {
		return c.ok("GET", "/v1/"+again, nil)["run"].(map[string]any)["state"] == "RUN_STATE_SUCCEEDED"
	}, 60*time.Second, 50*time.Millisecond)
	d := c.ok("GET", "/v1/"+again+"/decisions", nil)
	require.Len(t, d["entries"], 2)
	require.True(t, strings.HasPrefix(d["log"].(string), "# Implementation Log"))

	// A failed node the user goes on without: what depends on it runs and
	// the run succeeds, the node staying skipped with the user's reason.
	skipped := c.createRun(map[string]any{"sessionId": sid, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "flaky", "command": "exit 3"},
		map[string]any{"id": "after-flaky", "command": "true", "dependsOn": []any{"flaky"}},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(skipped)["state"])
	reply = c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": "/task flaky skip done by hand"})["reply"].(string)
	require.Contains(t, reply, "goes on without the node", reply)
	require.Eventually(t, func() bool {
		return c.ok("GET", "/v1/"+skipped, nil)["run"].(map[string]any)["state"] == "RUN_STATE_SUCCEEDED"
	}, 60*time.Second, 50*time.Millisecond)
	nodes := nodeMap(c.ok("GET", "/v1/"+skipped, nil)["run"].(map[string]any))
	require.Equal(t, "NODE_STATE_SKIPPED", nodes["flaky"]["state"])
	require.Equal(t, "skipped by the user: done by hand", nodes["flaky"]["error"])
	require.Equal(t, "NODE_STATE_SUCCEEDED", nodes["after-flaky"]["state"])

	// A node cancelled after three lines of output keeps them, marked
	// partial (spec C-32, acceptance 12); the node stays cancelled.
	printed := filepath.Join(signals, "printed")
	partial := c.createRun(map[string]any{"sessionId": sid, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "part", "command": "echo l1; echo l2; echo l3 >&2; touch " + printed + "; sleep 60"},
	}}})
	require.Eventually(t, func() bool { _, err := os.Stat(printed); return err == nil }, 60*time.Second, 50*time.Millisecond)
	c.ok("POST", "/v1/"+partial+":cancel", map[string]any{"nodeId": "part"})
	require.Eventually(t, func() bool {
		n := nodeMap(c.ok("GET", "/v1/"+partial, nil)["run"].(map[string]any))["part"]
		return n["outputPartial"] == true
	}, 60*time.Second, 50*time.Millisecond, "the cancelled node's output arrives")
	n := nodeMap(c.ok("GET", "/v1/"+partial, nil)["run"].(map[string]any))["part"]
	require.Equal(t, "NODE_STATE_CANCELLED", n["state"])
	require.Equal(t, "l1\nl2\n", n["stdout"])
	require.Equal(t, "l3\n", n["stderr"])
}

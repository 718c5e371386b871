package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// TestRetryBriefing drives the retry briefing through REST (spec B-38): a
// node retried after failing gets its prior attempts' story, and the run's
// decision log records it for the retried attempt only.
func TestRetryBriefing(t *testing.T) {
	c := startMesh(t)
	run := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
		map[string]any{"id": "broken", "command": "exit 7", "retry": map[string]any{"max": 1, "backoff": "0.010s"}},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(run)["state"])
	d := c.ok("GET", "/v1/"+run+"/decisions", nil)
	require.Len(t, d["entries"], 2)
	log := d["log"].(string)
	require.Contains(t, log, "## Task broken (attempt 2): failed\n")
	require.Contains(t, log, "- Briefing: attempt 2 after 1 prior: Attempt 1 exited with 7.")
	require.Equal(t, 1, strings.Count(log, "- Briefing:"), "the first attempt is not briefed")
}

// TestSettlePartialWork drives the partial-failure choices through REST
// (spec B-37, B-39): a failed repository run's succeeded work is kept in
// its result patch, then rolled back, each time with a receipt.
func TestSettlePartialWork(t *testing.T) {
	c := startMesh(t)
	repo := e2eRepo(t)
	run := c.createRun(map[string]any{"repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "doc", "edits": []any{map[string]any{"path": "NOTES.md", "content": "partial\n"}}},
		map[string]any{"id": "bad", "command": "exit 4"},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(run)["state"])

	kept := c.ok("POST", "/v1/"+run+":settle", map[string]any{"action": "SETTLE_ACTION_KEEP"})
	rc := kept["receipt"].(map[string]any)
	require.Equal(t, []any{"doc"}, rc["keptNodes"])
	require.Equal(t, []any{"bad"}, rc["unfinishedNodes"])
	require.EqualValues(t, 1, rc["filesChanged"])
	require.Contains(t, kept["run"].(map[string]any)["resultPatch"], "+partial")

	back := c.ok("POST", "/v1/"+run+":settle", map[string]any{"action": "SETTLE_ACTION_ROLLBACK"})
	require.Equal(t, []any{"doc"}, back["receipt"].(map[string]any)["discardedNodes"])
	require.Empty(t, back["run"].(map[string]any)["resultPatch"])

	// The run's choices, with a default by error tier (spec B-37): a plain
	// non-zero exit is permanent, so rolling back is the default; retrying
	// from the failure runs the failed node again.
	pf := back["run"].(map[string]any)["partialFailure"].(map[string]any)
	require.Equal(t, []any{"bad"}, pf["failedNodes"])
	require.Equal(t, "permanent", pf["errorTier"])
	require.Equal(t, "SETTLE_ACTION_ROLLBACK", pf["defaultAction"])
	retried := c.ok("POST", "/v1/"+run+":settle", map[string]any{"action": "SETTLE_ACTION_RETRY"})
	require.Equal(t, []any{"bad"}, retried["receipt"].(map[string]any)["retriedNodes"])
	again := c.waitRun(run)
	require.Equal(t, "RUN_STATE_FAILED", again["state"])
	require.EqualValues(t, 2, nodeMap(again)["bad"]["attempt"])

	// Each time the run ended, its workflow's state went to the Archivalist
	// (spec F-22 architect_workflow).
	checkpoints := c.archived("workflow "+run, "architect_workflow", 2, func(e map[string]any) bool {
		return e["title"] == "Workflow of "+run+" (failed)"
	})
	require.Len(t, checkpoints, 2)
	for _, e := range checkpoints {
		require.Contains(t, e["content"], "- Completed nodes: 1\n")
		require.Contains(t, e["content"], "Blocked tasks (1):\n- bad: failed after")
		require.Contains(t, e["content"], ", exit code 4")
	}

	r := c.do("POST", "/v1/"+run+":settle", map[string]any{})
	require.Equal(t, 400, r.Status, r.Raw)
	ok := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{map[string]any{"id": "a", "command": "true"}}}})
	require.Equal(t, "RUN_STATE_SUCCEEDED", c.waitRun(ok)["state"])
	r = c.do("POST", "/v1/"+ok+":settle", map[string]any{"action": "SETTLE_ACTION_KEEP"})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "only a FAILED or CANCELLED run")
}

// TestPipelineHandoff drives a user-requested pipeline handoff through the
// Guide and REST (spec F-23): at the Engineer's next turn the running
// pipeline hands its state on; the Orchestrator closes it, starts a fresh
// pipeline of the node from its files and state, and stores the handoff in
// the Archivalist.
func TestPipelineHandoff(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.MissingTool(t, "python3")
	}
	// The test's tester writes its signals where task commands may write.
	dir := taskWritableDir(t)
	c := startMesh(t, "-toolexec.confine-writable", dir)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "handoff"})["session"].(map[string]any)
	sname := sess["name"].(string)
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	// The first test run waits for the test's word, then fails; later runs
	// pass.
	repo := pyRepo(t, map[string]string{
		"calc.py": "def add(a, b):\n    return a + b\n",
		"test_calc.py": "import pathlib, time, unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n" +
			"        ready, go = pathlib.Path(\"" + ready + "\"), pathlib.Path(\"" + goOn + "\")\n" +
			"        if not ready.exists():\n            ready.touch()\n            while not go.exists():\n                time.sleep(0.02)\n" +
			"            self.fail(\"the first run fails\")\n        self.assertEqual(calc.add(1, 2), 3)\n",
	})
	run := c.createRun(map[string]any{"sessionId": strings.TrimPrefix(sname, "sessions/"), "repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "swap", "pipeline": true, "edits": []any{map[string]any{"path": "calc.py", "content": "def add(a, b):\n    return b + a\n"}}},
	}}})
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 60*time.Second, 20*time.Millisecond)
	reply := c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": "/task swap handoff"})["reply"].(string)
	require.Contains(t, reply, "hands its state to a fresh pipeline at the Engineer's next turn", reply)
	require.NoError(t, os.WriteFile(goOn, nil, 0o600))

	done := c.waitRun(run)
	require.Equal(t, "RUN_STATE_SUCCEEDED", done["state"])
	n := nodeMap(done)["swap"]
	require.EqualValues(t, 2, n["attempt"], "the fresh pipeline is the node's second attempt")
	require.EqualValues(t, 1, n["handoffs"])
	ho := n["handoff"].(map[string]any)
	require.Equal(t, "user_request", ho["reason"])
	require.EqualValues(t, 1, ho["handoffIndex"])
	require.Equal(t, strings.TrimPrefix(run, "runs/")+"/swap#1", ho["oldPipelineId"])
	require.Equal(t, []any{"calc.py"}, ho["engineer"].(map[string]any)["filesChanged"])
	require.NotEmpty(t, ho["tester"].(map[string]any)["failureDescs"])
	require.Contains(t, n["stdout"], "carrying on from "+strings.TrimPrefix(run, "runs/")+"/swap#1")
	require.Equal(t, "completed", n["pipeline"].(map[string]any)["state"])
	// The fresh pipeline started from the old one's files.
	require.Contains(t, n["patch"], "+    return b + a")
	var final map[string]any
	require.Eventually(t, func() bool {
		final = c.ok("GET", "/v1/"+run, nil)["run"].(map[string]any)
		return final["resultPatch"] != nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, final["resultPatch"], "+    return b + a")

	// The decision log keeps the handed-off attempt, and the Archivalist
	// has the handoff.
	log := c.ok("GET", "/v1/"+run+"/decisions", nil)["log"].(string)
	require.Contains(t, log, "## Task swap (attempt 1): handed_off\n", log)
	c.archived("pipeline handoff swap", "pipeline_handoff", 1, nil)

	// A node that is not running has no pipeline to hand off.
	r := c.do("POST", "/v1/"+run+":taskAction", map[string]any{"nodeId": "swap", "action": "TASK_ACTION_TYPE_HANDOFF"})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "no pipeline to hand off")
}

// TestSettleInChat makes the partial-failure choice through the Guide (spec
// B-37): /settle shows a failed run's choices with the default for how it
// failed, and takes one.
func TestSettleInChat(t *testing.T) {
	c := startMesh(t)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "settle"})["session"].(map[string]any)
	sname := sess["name"].(string)
	say := func(text string) string {
		t.Helper()
		return c.ok("POST", "/v1/"+sname+"/messages", map[string]any{"text": text})["reply"].(string)
	}
	require.Contains(t, say("/settle"), "no failed or cancelled run")
	run := c.createRun(map[string]any{"sessionId": strings.TrimPrefix(sname, "sessions/"), "repository": c.register(e2eRepo(t)), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "doc", "edits": []any{map[string]any{"path": "NOTES.md", "content": "partial\n"}}},
		map[string]any{"id": "bad", "command": "exit 4"},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(run)["state"])
	id := strings.TrimPrefix(run, "runs/")

	choices := say("/settle")
	require.Contains(t, choices, run+" is failed. Failed: bad (permanent).", choices)
	require.Contains(t, choices, "Default: rollback, because the work itself failed", choices)
	require.Contains(t, choices, "/settle "+id+" retry (retry: run the failed nodes again from the failure)", choices)
	require.Contains(t, choices, "/settle "+id+" default", choices)

	kept := say("/settle " + id + " keep")
	require.Contains(t, kept, run+" settled (keep): 1 node(s) kept, 0 discarded, 1 unfinished; the result patch changes 1 file(s)", kept)
	require.Contains(t, c.ok("GET", "/v1/"+run, nil)["run"].(map[string]any)["resultPatch"], "+partial")
	back := say("/settle default")
	require.Contains(t, back, "settled (rollback): 0 node(s) kept, 1 discarded", back)
	require.Contains(t, say("/settle retry"), run+" settled (retry): bad run again")
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(run)["state"])
	require.Contains(t, say("/settle keep rollback"), "one choice at a time")
	require.Contains(t, say("/settle nosuchrun keep"), "/settle: ")
}

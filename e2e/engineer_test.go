package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
)

// The tool-using Engineer through the mesh, with a scripted model server
// speaking the OpenAI wire format to the mesh's real client (spec E,
// T-10, issue "the Engineer").

// scriptMesh starts the mesh with its model provider pointed at a script
// server. The Inspector's reviews find nothing unless a script given
// matches them first (their first message starts with review.Marker).
func scriptMesh(t *testing.T, extra []string, scripts ...scriptmodel.Script) (*client, *scriptmodel.Server) {
	t.Helper()
	srv, err := scriptmodel.New(append(scripts, review.PassingScript())...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c, _, _ := startLLMMesh(t, append([]string{"-llm.provider", "openai", "-llm.openai.base-url", srv.URL + "/v1",
		"-llm.openai.api-key", "sk-script", "-llm.openai.model-default", "scripted"}, extra...)...)
	return c, srv
}

// calcRepo is a Python repository whose add subtracts: its test fails.
func calcRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.MissingTool(t, "python3")
	}
	return pyRepo(t, map[string]string{"calc.py": "def add(a, b):\n    return a - b\n",
		"test_calc.py": "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n"})
}

func tool(name string, args map[string]any) scriptmodel.Turn { return scriptmodel.Tool(name, args) }

// resultPatch waits for the succeeded run's merged patch (merged once the
// run ended).
func (c *client) resultPatch(run string) string {
	c.t.Helper()
	var patch string
	require.Eventually(c.t, func() bool {
		p, ok := c.ok("GET", "/v1/"+run, nil)["run"].(map[string]any)["resultPatch"].(string)
		patch = p
		return ok
	}, 30*time.Second, 50*time.Millisecond, "no result patch for %s", run)
	return patch
}

// applies checks that the run's patch, applied to a clean clone of repo,
// makes its tests pass.
func applies(t *testing.T, repo, patch string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	gitCmd(t, "", "clone", "--quiet", repo, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.patch"), []byte(patch), 0o644))
	gitCmd(t, dir, "apply", "run.patch")
	cmd := exec.Command("python3", "-m", "unittest", "-q")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the tests fail with the run's patch applied:\n%s", out)
}

// The scripted Engineer reads, greps, edits, runs the tests and finishes;
// the Inspector and the Tester pass; the run's patch fixes a clean checkout.
// A person watching the session sees every tool call.
func TestEngineerFixesAFailingTest(t *testing.T) {
	c, srv := scriptMesh(t, nil, scriptmodel.Script{Match: "Make add return the sum", Turns: []scriptmodel.Turn{
		{Text: "Looking at the code.", Calls: []scriptmodel.Call{{Name: "list_files", Args: map[string]any{}}}},
		tool("grep", map[string]any{"pattern": "def add"}).Then("calc.py", "test_calc.py"),
		tool("read_file", map[string]any{"path": "calc.py"}).Then("calc.py:1: def add(a, b):"),
		tool("edit_file", map[string]any{"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}).Then("return a - b"),
		tool("run_tests", map[string]any{}).Then("edited calc.py"),
		tool("finish", map[string]any{"summary": "add returns the sum", "tested": "unittest: test_add passes"}).Then("1 passed, 0 failed"),
	}})
	repo := calcRepo(t)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "engineer"})["session"].(map[string]any)
	run := c.waitRun(c.createRun(map[string]any{"sessionId": sess["id"], "repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "fix", "pipeline": true, "prompt": "Make add return the sum of its arguments.", "doneWhen": "test_add passes"}}}}))
	require.Empty(t, srv.Failures())
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)
	n := run["nodes"].([]any)[0].(map[string]any)
	require.Equal(t, "completed", n["pipeline"].(map[string]any)["state"])
	act := n["report"].(map[string]any)["activity"].(map[string]any)
	require.EqualValues(t, 6, act["toolCallCount"])
	require.Equal(t, "finished", act["stopReason"])
	applies(t, repo, c.resultPatch(run["name"].(string)))

	var calls []string
	for _, e := range c.events(sess["name"].(string), 0) {
		if e["type"] == "EVENT_TYPE_TOOL_CALL" {
			tc := payload(e, "toolCall")
			if tc["status"] == "TOOL_CALL_STATUS_SUCCEEDED" {
				calls = append(calls, tc["tool"].(string))
			}
			require.Equal(t, run["name"], tc["run"])
		}
	}
	require.Equal(t, []string{"list_files", "grep", "read_file", "edit_file", "run_tests", "finish"}, calls)
}

// Three tool errors in a row revert the Engineer's changes and ask the
// user on the session's stream; the user answers in chat with /task <node>
// prompt, and the Engineer goes on from the answer.
func TestEngineerAsksForHelpAfterThreeStrikes(t *testing.T) {
	bad := tool("edit_file", map[string]any{"path": "calc.py", "old_string": "return a ** b", "new_string": "x"})
	c, srv := scriptMesh(t, nil, scriptmodel.Script{Match: "Make add return the sum", Turns: []scriptmodel.Turn{
		tool("write_file", map[string]any{"path": "notes.txt", "content": "scratch\n"}),
		bad, bad, bad.Then("FAILURE WARNING"),
		tool("read_file", map[string]any{"path": "calc.py"}).Then("reverted", "use a + b"),
		tool("edit_file", map[string]any{"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
		tool("finish", map[string]any{"summary": "summed, as the user said"}),
	}})
	repo := calcRepo(t)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "help"})["session"].(map[string]any)
	name := sess["name"].(string)
	runName := c.createRun(map[string]any{"sessionId": sess["id"], "repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "fix", "prompt": "Make add return the sum of its arguments."}}}})
	asked := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_TASK_HELP" })
	require.Contains(t, asked["text"], "Answer with /task fix prompt")
	require.Contains(t, asked["text"], "was not found")
	reverted := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_AGENT_REVERTED" })
	require.Equal(t, "fix", payload(reverted, "agent")["node"])

	reply := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": `/task fix prompt "use a + b"`})
	require.Contains(t, reply["reply"], "fix")
	run := c.waitRun(runName)
	require.Empty(t, srv.Failures())
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)
	n := run["nodes"].([]any)[0].(map[string]any)
	require.EqualValues(t, 1, n["report"].(map[string]any)["activity"].(map[string]any)["reverts"])
	require.NotContains(t, n["patch"], "notes.txt", "the write before the strikes was reverted")
	applies(t, repo, c.resultPatch(run["name"].(string)))
}

// A dependent task starts from its dependency's change (spec T-10): the
// second Engineer reads the first one's file.
func TestDependentTaskSeesItsDependencysChange(t *testing.T) {
	c, srv := scriptMesh(t, nil,
		scriptmodel.Script{Match: "Write the helper", Turns: []scriptmodel.Turn{
			tool("write_file", map[string]any{"path": "helper.py", "content": "def twice(x):\n    return 2 * x\n"}),
			tool("finish", map[string]any{"summary": "helper.py"}),
		}},
		scriptmodel.Script{Match: "Use the helper", Turns: []scriptmodel.Turn{
			tool("read_file", map[string]any{"path": "helper.py"}),
			tool("write_file", map[string]any{"path": "use.py", "content": "from helper import twice\n\nprint(twice(2))\n"}).Then("def twice(x):"),
			tool("finish", map[string]any{"summary": "use.py"}),
		}})
	repo := calcRepo(t)
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "helper", "prompt": "Write the helper twice(x) in helper.py."},
		map[string]any{"id": "use", "dependsOn": []string{"helper"}, "prompt": "Use the helper in use.py."}}}}))
	require.Empty(t, srv.Failures())
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)
	nodes := map[string]map[string]any{}
	for _, x := range run["nodes"].([]any) {
		nodes[x.(map[string]any)["nodeId"].(string)] = x.(map[string]any)
	}
	require.Contains(t, nodes["use"]["patch"], "use.py")
	require.NotContains(t, nodes["use"]["patch"], "helper.py", "the dependency's change is its own")
	patch := c.resultPatch(run["name"].(string))
	require.Contains(t, patch, "helper.py")
	require.Contains(t, patch, "use.py")
}

// With the offline provider nothing writes code: the run says so, and is
// not SUCCEEDED.
func TestOfflineEngineerEndsNoChanges(t *testing.T) {
	c := startMesh(t)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "offline"})["session"].(map[string]any)
	run := c.waitRun(c.createRun(map[string]any{"sessionId": sess["id"], "repository": c.register(calcRepo(t)), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "fix", "pipeline": true, "prompt": "Make add return the sum of its arguments."}}}}))
	require.Equal(t, "RUN_STATE_NO_CHANGES", run["state"], "run: %v", run)
	n := run["nodes"].([]any)[0].(map[string]any)
	require.Equal(t, "NODE_STATE_NO_CHANGES", n["state"])
	require.Contains(t, n["error"], "no language model is configured")
	done := c.waitEvent(sess["name"].(string), func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_RUN_COMPLETED" })
	require.Contains(t, strings.ToLower(done["text"].(string)), "no language model is configured")
}

// TestEngineerHandoffAtItsContextThreshold: a pipeline's Engineer whose
// prompt passes 95% of its context window hands off; the fresh pipeline is
// told what the old one did, starts from its files and finishes the task
// (spec F-21, F-23).
func TestEngineerHandoffAtItsContextThreshold(t *testing.T) {
	c, srv := scriptMesh(t, []string{"-worker.engineer-context-tokens", "400"},
		scriptmodel.Script{Match: "You carry on from an earlier pipeline", Turns: []scriptmodel.Turn{
			tool("read_file", map[string]any{"path": "calc.py"}),
			tool("edit_file", map[string]any{"path": "calc.py", "old_string": "a * b", "new_string": "a + b"}).Then("return a * b"),
			tool("finish", map[string]any{"summary": "summed"}),
		}},
		scriptmodel.Script{Match: "Make add return the sum", Turns: []scriptmodel.Turn{
			tool("edit_file", map[string]any{"path": "calc.py", "old_string": "a - b", "new_string": "a * b"}),
			tool("read_file", map[string]any{"path": "calc.py"}),
			tool("read_file", map[string]any{"path": "test_calc.py"}),
			tool("read_file", map[string]any{"path": "calc.py"}),
			tool("read_file", map[string]any{"path": "calc.py"}),
			tool("read_file", map[string]any{"path": "calc.py"}),
			tool("finish", map[string]any{"summary": "not reached"}),
		}})
	repo := calcRepo(t)
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(repo), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "fix", "pipeline": true, "prompt": "Make add return the sum of its arguments.", "doneWhen": "test_add passes"}}}}))
	require.Empty(t, srv.Failures())
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)
	n := run["nodes"].([]any)[0].(map[string]any)
	require.EqualValues(t, 2, n["attempt"])
	require.EqualValues(t, 1, n["handoffs"])
	ho := n["handoff"].(map[string]any)
	require.Equal(t, "engineer_context_95%", ho["reason"])
	require.EqualValues(t, "400", ho["contextWindowTokens"])
	require.GreaterOrEqual(t, ho["contextUsage"].(float64), 0.95)
	eng := ho["engineer"].(map[string]any)
	require.Equal(t, "Make add return the sum of its arguments.", eng["originalPrompt"])
	require.Contains(t, eng["remaining"], "done when: test_add passes")
	require.Contains(t, n["patch"], "+    return a + b")
	require.Equal(t, "completed", n["pipeline"].(map[string]any)["state"])
	applies(t, repo, c.resultPatch(run["name"].(string)))
}

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
)

// The whole flow of a change, through REST and chat, with a scripted model
// (issue: from a request in chat to a reviewed change delivered as a
// branch): a session bound to a registered repository; a request in chat
// routed to the Architect; a plan citing the file; revised once; approved;
// the Engineer fixes the code; the Inspector's review finds an issue; the
// Engineer fixes it; the Tester passes; the change is delivered as the
// branch sylk/<run> in the repository.

// goFixture is a Go module whose Add returns expr; "a - b" fails its test.
func goFixture(t *testing.T, expr string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		testenv.MissingTool(t, "go")
	}
	return nestedRepo(t, map[string]string{
		"go.mod":          "module example.com/flow\n\ngo 1.22\n",
		"pkg/x/x.go":      "package x\n\n// Add returns the sum of a and b.\nfunc Add(a, b int) int {\n\treturn " + expr + "\n}\n",
		"pkg/x/x_test.go": "package x\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"Add(1, 2) != 3\")\n\t}\n}\n",
		"README.md":       "# Flow\n\nA tiny modlue.\n",
	})
}

// nestedRepo is pyRepo with files in directories.
func nestedRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	gitCmd(t, dir, "init", "--quiet")
	gitCmd(t, dir, "add", "-A")
	gitCmd(t, dir, "commit", "--quiet", "-m", "init")
	return dir
}

func planJSON(t *testing.T, title string, nodes ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"title": title, "nodes": nodes})
	require.NoError(t, err)
	return string(b)
}

const fixPrompt = "Make Add in pkg/x/x.go return the sum of its arguments, so that TestAdd passes."

func TestChatRequestBecomesADeliveredBranch(t *testing.T) {
	fix := map[string]any{"id": "fix", "role": "engineer", "name": "Fix Add", "prompt": fixPrompt,
		"files": []string{"pkg/x/x.go"}, "done_when": "go test ./pkg/x passes"}
	docs := map[string]any{"id": "docs", "role": "engineer", "name": "Document Add", "prompt": "Say in README.md that Add sums.",
		"depends_on": []string{"fix"}}
	finding := map[string]any{"severity": "high", "file": "pkg/x/x.go", "line": 5, "category": "correctness",
		"message": "debug output left in Add", "suggestion": "remove the println"}
	c, srv := scriptMesh(t, []string{"-guide.llm-classifier=false"},
		scriptmodel.Script{Match: "You are the Architect", Turns: []scriptmodel.Turn{
			scriptmodel.Say(planJSON(t, "Fix the failing test in pkg/x", fix, docs)),
			scriptmodel.Say(planJSON(t, "Fix the failing test in pkg/x", fix)).Then("Revise the plan:", "drop step 2"),
		}},
		review.Script("Review this change: fix (loop 1)", finding),
		scriptmodel.Script{Match: fixPrompt, Turns: []scriptmodel.Turn{
			tool("read_file", map[string]any{"path": "pkg/x/x.go"}),
			tool("edit_file", map[string]any{"path": "pkg/x/x.go", "old_string": "\treturn a - b",
				"new_string": "\tprintln(\"debug\", a, b)\n\treturn a + b"}).Then("return a - b"),
			tool("finish", map[string]any{"summary": "Add sums"}),
			tool("edit_file", map[string]any{"path": "pkg/x/x.go", "old_string": "\tprintln(\"debug\", a, b)\n", "new_string": ""}).
				Then("pkg/x/x.go:5 high: debug output left in Add"),
			tool("run_tests", map[string]any{}),
			tool("finish", map[string]any{"summary": "Add sums, without debug output", "tested": "go test: TestAdd passes"}).Then("passed"),
		}})
	repo := goFixture(t, "a - b")
	registered := c.registerIndexed(map[string]any{"path": repo, "displayName": "flow"})
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "flow", "repository": registered["name"]})["session"].(map[string]any)
	name := sess["name"].(string)
	require.Equal(t, registered["name"], sess["repository"])

	// The request goes to the Architect, which plans from what the
	// Librarian found.
	sent := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "fix the failing test in pkg/x"})
	require.Equal(t, "architect", sent["route"].(map[string]any)["target"], "%v", sent)
	awaiting := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_PLAN_AWAITING_APPROVAL" })
	planName := payload(awaiting, "plan")["plan"].(string)
	plan := c.ok("GET", "/v1/"+planName, nil)["plan"].(map[string]any)
	require.Equal(t, registered["name"], plan["repository"])
	require.Contains(t, plan["consultation"].(map[string]any)["files"], "pkg/x/x.go", "the plan cites the file")
	require.Len(t, plan["dag"].(map[string]any)["nodes"], 2)

	// Revised once in chat, then approved.
	revised := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "change the plan: drop step 2, the README can wait"})
	require.Contains(t, revised["reply"], "now version 2", "%v", revised)
	approved := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "approve"})
	require.Contains(t, approved["reply"], "Approved")
	plan = c.ok("GET", "/v1/"+planName, nil)["plan"].(map[string]any)
	require.EqualValues(t, 2, plan["version"])
	require.Len(t, plan["versions"], 2)
	runName := plan["run"].(string)

	// The Engineer fixes it, the review finds the debug output, the Engineer
	// removes it, the Tester passes; the change is delivered.
	run := c.waitRun(runName)
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)
	n := run["nodes"].([]any)[0].(map[string]any)
	p := n["pipeline"].(map[string]any)
	require.EqualValues(t, 2, p["loops"])
	require.Contains(t, p["feedback"].([]any)[0], "debug output left in Add")
	delivered := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_RUN_DELIVERED" })
	d := payload(delivered, "run")["delivery"].(map[string]any)
	branch := d["branch"].(string)
	require.True(t, strings.HasPrefix(branch, "sylk/"), "%v", d)
	require.Empty(t, srv.Failures())

	diff := gitOut(t, repo, "diff", d["baseCommit"].(string)+".."+branch)
	require.Contains(t, diff, "+\treturn a + b")
	require.NotContains(t, diff, "println")
	require.Equal(t, "\treturn a - b", strings.Split(gitOut(t, repo, "show", "HEAD:pkg/x/x.go"), "\n")[4],
		"the repository's own branch is untouched")
}

// A trivial request becomes a one-task plan and, with auto-approval on,
// a branch.
func TestTrivialRequestIsDeliveredWithAutoApproval(t *testing.T) {
	c, srv := scriptMesh(t, []string{"-guide.llm-classifier=false"},
		scriptmodel.Script{Match: "fix typo in README", Turns: []scriptmodel.Turn{
			tool("edit_file", map[string]any{"path": "README.md", "old_string": "modlue", "new_string": "module"}),
			tool("finish", map[string]any{"summary": "fixed the typo"}),
		}})
	repo := goFixture(t, "a + b")
	registered := c.registerIndexed(map[string]any{"path": repo, "displayName": "typo"})
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "typo", "repository": registered["name"],
		"config": map[string]any{"autoApproveTrivial": true}})["session"].(map[string]any)
	name := sess["name"].(string)
	sent := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "fix typo in README"})
	require.Equal(t, "architect", sent["route"].(map[string]any)["target"], "%v", sent)
	approved := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_PLAN_APPROVED" })
	plan := c.ok("GET", "/v1/"+payload(approved, "plan")["plan"].(string), nil)["plan"].(map[string]any)
	require.Equal(t, true, plan["trivial"])
	require.Equal(t, true, plan["autoApproved"])
	run := c.waitRun(plan["run"].(string))
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)
	delivered := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_RUN_DELIVERED" })
	d := payload(delivered, "run")["delivery"].(map[string]any)
	require.Empty(t, srv.Failures())
	require.Contains(t, gitOut(t, repo, "diff", d["baseCommit"].(string)+".."+d["branch"].(string)), "+A tiny module.")
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

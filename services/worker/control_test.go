package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/testenv"
)

// waitFile polls for a file a task's command creates.
func waitFile(t *testing.T, path string) {
	t.Helper()
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, 60*time.Second, 20*time.Millisecond, "never created: %s", path)
}

// readyFile is a file a task's command creates to say it has started, and
// its directory, which confined commands must be let write
// (toolexec.Config.ConfineWritable).
func readyFile(t *testing.T) (file, dir string) {
	dir = t.TempDir()
	return filepath.Join(dir, "ready"), dir
}

// runAsync runs a task with a control and returns its outcome later.
func runAsync(s *Service, ctl *taskControl, role string, env *taskv1.TaskDispatch) <-chan taskOutcome {
	ch := make(chan taskOutcome, 1)
	go func() {
		out, cancelled := s.runTask(withControl(context.Background(), ctl), role, env)
		if cancelled {
			out = taskOutcome{}
		}
		ch <- out
	}()
	return ch
}

func TestInterruptStopsTheCommandKeepingPartialOutput(t *testing.T) {
	cfg := testConfig(t)
	ready, readyDir := readyFile(t)
	cfg.Tools.ConfineWritable = []string{readyDir}
	s := offlineService(t, cfg)
	ctl := newTaskControl(false)
	env := dispatch("echo partial-line; touch " + ready + "; sleep 60")
	done := runAsync(s, ctl, "engineer", env)
	waitFile(t, ready)

	detail, err := ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY, "")
	require.NoError(t, err)
	require.Contains(t, detail, "stage command")
	_, err = ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_INTERRUPT, "wrong approach")
	require.NoError(t, err)

	out := <-done
	require.NotNil(t, out.msg, "an interrupted task reports a result")
	require.Equal(t, int32(-1), out.msg.GetExitCode())
	require.Contains(t, out.msg.GetError(), "interrupted by the user during the command stage: wrong approach")
	require.Contains(t, out.msg.GetStdout(), "partial-line", "the output before the interrupt is kept")
}

// pyRepo makes a git repository holding a small Python project.
func pyRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.TrimSpace(string(out))
	}
	git("init", "--quiet")
	git("add", "-A")
	git("commit", "--quiet", "-m", "init")
	return dir, git("rev-parse", "HEAD")
}

func needPython(t *testing.T) {
	t.Helper()
	if detectTools().python == "" {
		testenv.MissingTool(t, "a python interpreter")
	}
}

func TestIgnoreTesterWhileTheTesterRuns(t *testing.T) {
	needPython(t)
	ready, readyDir := readyFile(t)
	repo, base := pyRepo(t, map[string]string{
		"calc.py": "def add(a, b):\n    return a + b\n",
		"test_calc.py": "import pathlib, time, unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n" +
			"        pathlib.Path(" + `"` + ready + `"` + ").touch()\n        time.sleep(60)\n        self.assertEqual(calc.add(1, 2), 3)\n",
	})
	s := pipelineService(t, readyDir)
	ctl := newTaskControl(false)
	done := runAsync(s, ctl, "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "p1", Pipeline: true,
		Edits: []*orchestratorv1.FileEdit{{Path: "calc.py", Content: "def add(a, b):\n    return b + a\n"}}}))
	waitFile(t, ready)

	detail, err := ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY, "")
	require.NoError(t, err)
	require.Equal(t, "stage tester, loop 1 of 3", detail)
	snap := ctl.snapshot()
	require.Equal(t, pipeTesting, snap.GetState())
	require.True(t, snap.GetInspectorPassed(), "the python syntax check passed")

	detail, err = ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_TESTER, "")
	require.NoError(t, err)
	require.Contains(t, detail, "stopped and counts as passed")

	out := <-done
	require.NotNil(t, out.msg)
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	p, r := pipelineOf(t, out)
	require.Equal(t, pipeCompleted, p.GetState())
	require.Equal(t, []string{"ignore_tester"}, p.GetOverrides())
	require.Contains(t, r.GetTested(), "ignored by the user")
	require.Contains(t, r.GetDeviations(), "ignore_tester")
	require.Contains(t, out.msg.GetPatch(), "return b + a", "the pipeline went on to commit")
}

func TestInterruptDuringTheTesterFailsThePipeline(t *testing.T) {
	needPython(t)
	ready, readyDir := readyFile(t)
	repo, base := pyRepo(t, map[string]string{
		"test_slow.py": "import pathlib, sys, time, unittest\n\nclass T(unittest.TestCase):\n    def test_slow(self):\n" +
			"        print('tester-partial', flush=True)\n        pathlib.Path(" + `"` + ready + `"` + ").touch()\n        time.sleep(60)\n",
	})
	s := pipelineService(t, readyDir)
	ctl := newTaskControl(false)
	done := runAsync(s, ctl, "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "p2", Pipeline: true}))
	waitFile(t, ready)
	_, err := ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_INTERRUPT, "")
	require.NoError(t, err)
	out := <-done
	require.NotNil(t, out.msg)
	require.Equal(t, int32(-1), out.msg.GetExitCode())
	require.Equal(t, "interrupted by the user during the tester stage", out.msg.GetError())
	require.Contains(t, out.msg.GetStdout(), "tester-partial", "the stage's partial output is kept")
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeFailed, p.GetState())
	require.Equal(t, []string{"interrupt"}, p.GetOverrides())
	require.Len(t, p.GetOptions(), 4)
}

func TestPythonTesterParsesUnittestFailures(t *testing.T) {
	needPython(t)
	repo, base := pyRepo(t, map[string]string{
		"calc.py":      "def add(a, b):\n    return a - b\n",
		"test_calc.py": "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n\n    def test_ok(self):\n        self.assertTrue(True)\n\n    @unittest.skip('later')\n    def test_later(self):\n        pass\n",
	})
	s := pipelineService(t)
	out, cancelled := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "py", Pipeline: true, MaxLoops: 1}))
	require.False(t, cancelled)
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeFailed, p.GetState())
	tr := p.GetLastTestResult()
	require.Equal(t, "python-unittest", tr.GetFrameworkId())
	require.Equal(t, int32(1), tr.GetPassed())
	require.Equal(t, int32(1), tr.GetFailed())
	require.Equal(t, int32(1), tr.GetSkipped())
	require.Len(t, tr.GetFailures(), 1)
	f := tr.GetFailures()[0]
	require.Equal(t, "test_calc.T.test_add", f.GetTestName())
	require.True(t, strings.HasSuffix(f.GetFilePath(), "test_calc.py"), f.GetFilePath())
	require.Equal(t, int32(6), f.GetLine())
	require.Contains(t, f.GetMessage(), "AssertionError: -1 != 3")
}

func TestPythonInspectorReportsSyntaxErrors(t *testing.T) {
	needPython(t)
	repo, base := pyRepo(t, map[string]string{"calc.py": "def add(a, b):\n    return a + b\n"})
	s := pipelineService(t)
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "py", Pipeline: true, MaxLoops: 1,
		Edits: []*orchestratorv1.FileEdit{{Path: "calc.py", Content: "def add(a, b)\n    return a + b\n"}}}))
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeFailed, p.GetState())
	require.False(t, p.GetInspectorPassed())
	require.Contains(t, p.GetFeedback()[0], "calc.py:1:")
	require.Contains(t, p.GetFeedback()[0], "syntax")
}

func TestNodeTesterParsesTAP(t *testing.T) {
	if detectTools().node == "" {
		testenv.MissingTool(t, "node")
	}
	repo, base := pyRepo(t, map[string]string{
		"package.json": `{"name": "calc", "version": "1.0.0"}`,
		"calc.js":      "exports.add = (a, b) => a - b;\n",
		"test/calc.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('../calc');\n" +
			"test('adds', () => { assert.strictEqual(add(1, 2), 3); });\ntest('truth', () => { assert.ok(true); });\n",
	})
	s := pipelineService(t)
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "js", Pipeline: true, MaxLoops: 1}))
	p, _ := pipelineOf(t, out)
	require.Equal(t, pipeFailed, p.GetState(), p.GetFeedback())
	tr := p.GetLastTestResult()
	require.Equal(t, "node-test", tr.GetFrameworkId())
	require.Equal(t, int32(1), tr.GetPassed())
	require.Equal(t, int32(1), tr.GetFailed())
	require.Equal(t, "adds", tr.GetFailures()[0].GetTestName())
	require.True(t, strings.HasSuffix(tr.GetFailures()[0].GetFilePath(), "calc.test.js"))
	require.Equal(t, int32(4), tr.GetFailures()[0].GetLine())
	require.Equal(t, "3", tr.GetFailures()[0].GetExpected())
}

// brokenRepo is gitRepo with Add broken (a - b) in its last commit, so that
// the Engineer has something to fix.
func brokenRepo(t testing.TB) (repo, base string) {
	t.Helper()
	repo, _ = gitRepo(t)
	require.NoError(t, os.WriteFile(filepath.Join(repo, "calc.go"), []byte("package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n"), 0o644))
	for _, args := range [][]string{{"add", "-A"}, {"commit", "--quiet", "-m", "break"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	return repo, strings.TrimSpace(string(out))
}

func TestEngineerWithoutAModelSaysNothingWasGenerated(t *testing.T) {
	s := offlineService(t, testConfig(t))
	spec := &orchestratorv1.Node{Id: "n1", Prompt: "write a parser"}
	out, _ := s.runTask(context.Background(), "engineer", &taskv1.TaskDispatch{RunId: "r", NodeId: "n1", Attempt: 1, Node: spec})
	require.Equal(t, NoModelOutput, out.msg.GetStdout())
	require.Equal(t, NoModelReason, out.msg.GetNoChangesReason(), "a prompt no model acted on changed nothing")

	ctl := newTaskControl(false)
	ctl.engineerReads = s.engineerReads(spec)
	detail, err := ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, "use a table")
	require.NoError(t, err)
	require.Contains(t, detail, "no language model is configured", "guidance nobody reads is reported as such")
}

func TestEngineerWithTheLocalProviderGeneratesNothing(t *testing.T) {
	lc := testenv.FromFlags[llm.Config](t)
	reg, err := provider.New(lc)
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	s := offlineService(t, testConfig(t))
	s.SetLLMGate(g)
	spec := &orchestratorv1.Node{Id: "n1", Prompt: "plan and write a parser"}
	out, cancelled := s.runTask(context.Background(), "engineer", &taskv1.TaskDispatch{TenantId: "t1", RunId: "r", NodeId: "n1", Attempt: 1, Node: spec})
	require.False(t, cancelled)
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Equal(t, NoModelOutput, out.msg.GetStdout())
	require.Equal(t, NoModelReason, out.msg.GetNoChangesReason())
	require.Contains(t, out.msg.GetReport().GetImplemented(), "nothing")
}

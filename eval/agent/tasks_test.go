package agenteval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/agent/codetools"
)

// commandTimeout bounds each command of the self-check.
const commandTimeout = 2 * time.Minute

// TestTasks checks every task: its repository's tests pass as given, its
// hidden tests fail on it, and each of its scripts, played with the tools it
// names, solves it, meeting its own expectations on the way.
func TestTasks(t *testing.T) {
	t.Parallel()
	tasks, err := LoadTasks("tasks")
	require.NoError(t, err)
	for _, task := range tasks {
		t.Run(task.ID, func(t *testing.T) {
			t.Parallel()
			requireRealProblem(t, task)
			t.Run("sylk", func(t *testing.T) {
				dir := copyRepo(t, task)
				playSylk(t, task, dir)
				requireSolved(t, task, dir)
			})
			t.Run("baseline", func(t *testing.T) {
				dir := copyRepo(t, task)
				playBaseline(t, task, dir)
				requireSolved(t, task, dir)
			})
		})
	}
}

// TestTaskMix checks the set's spread: at least eight tasks per language,
// with bugs and features in each.
func TestTaskMix(t *testing.T) {
	t.Parallel()
	tasks, err := LoadTasks("tasks")
	require.NoError(t, err)
	kinds := map[string]map[string]int{}
	for _, task := range tasks {
		if kinds[task.Language] == nil {
			kinds[task.Language] = map[string]int{}
		}
		kinds[task.Language][task.Kind]++
	}
	for _, lang := range []string{LanguageGo, LanguagePython, LanguageJavaScript} {
		k := kinds[lang]
		require.GreaterOrEqual(t, k[KindBug]+k[KindFeature], 8, "%s tasks", lang)
		require.Positive(t, k[KindBug], "%s bug tasks", lang)
		require.Positive(t, k[KindFeature], "%s feature tasks", lang)
	}
}

// requireRealProblem checks that the repository's own tests pass as given
// (the toolchain builds and runs them) and that the hidden tests fail on it.
func requireRealProblem(t *testing.T, task Task) {
	require.NotContains(t, strings.ToLower(task.Prompt), "hidden", "the prompt gives the hidden tests away")
	dir := copyRepo(t, task)
	res := runTests(t, task, dir)
	require.Zero(t, res.ExitCode, "the repository's visible tests fail as given:\n%s", codetools.FormatCommand(res))
	require.NoError(t, task.OverlayHidden(dir))
	res = runTests(t, task, dir)
	require.NotZero(t, res.ExitCode, "the hidden tests pass on the unchanged repository:\n%s", codetools.FormatCommand(res))
	require.NotContains(t, []int{126, 127}, res.ExitCode, "the test command did not run:\n%s", codetools.FormatCommand(res))
}

func requireSolved(t *testing.T, task Task, dir string) {
	require.NoError(t, task.OverlayHidden(dir))
	res := runTests(t, task, dir)
	require.Zero(t, res.ExitCode, "the hidden tests fail after the script:\n%s", codetools.FormatCommand(res))
}

func copyRepo(t *testing.T, task Task) string {
	dir := t.TempDir()
	require.NoError(t, task.CopyRepo(dir))
	return dir
}

func runTests(t *testing.T, task Task, dir string) codetools.CommandResult {
	res, err := task.RunTestCommand(context.Background(), dir, commandTimeout)
	require.NoError(t, err)
	require.False(t, res.TimedOut, "the test command timed out")
	return res
}

// playSylk runs the sylk script's calls with the workspace tools on dir,
// checking each turn's expectations against what the turn before got back.
// run_tests runs the visible tests, but its text is kept from the
// expectations: its format is the mesh's test runner's, not this one's.
func playSylk(t *testing.T, task Task, dir string) {
	ws, err := codetools.Open(codetools.Config{Dir: dir, Runner: ShellRunner{Dir: dir}, Tests: visibleTests{task: task, dir: dir}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.Close() })
	tools := map[string]agent.Tool{}
	for _, tool := range ws.Tools() {
		tools[tool.Def.Name] = tool
	}
	seen := task.Prompt
	for i, turn := range task.Scripts.Sylk {
		requireExpected(t, i, turn, seen)
		var outs []string
		for _, c := range turn.Calls {
			tool, ok := tools[c.Name]
			require.True(t, ok, "turn %d calls %q, which is not a workspace tool", i+1, c.Name)
			requireArgsFit(t, i, c, tool)
			raw, err := json.Marshal(c.Args)
			require.NoError(t, err)
			out, err := tool.Run(context.Background(), raw)
			require.NoError(t, err, "turn %d: %s failed", i+1, c.Name)
			if c.Name != "run_tests" {
				outs = append(outs, out)
			}
		}
		seen = strings.Join(outs, "\n")
	}
}

// requireArgsFit checks a call's arguments against its tool's schema: every
// required one given, none it does not name.
func requireArgsFit(t *testing.T, i int, c Call, tool agent.Tool) {
	props, _ := tool.Def.Schema["properties"].(map[string]any)
	for name := range c.Args {
		_, ok := props[name]
		require.True(t, ok, "turn %d: %s has no argument %q", i+1, c.Name, name)
	}
	required, _ := tool.Def.Schema["required"].([]string)
	for _, name := range required {
		_, ok := c.Args[name]
		require.True(t, ok, "turn %d: %s needs argument %q", i+1, c.Name, name)
	}
}

// playBaseline runs the baseline script's bash commands with sh -c in dir;
// what a command printed, stdout then stderr, is what the next turn sees.
func playBaseline(t *testing.T, task Task, dir string) {
	seen := task.Prompt
	for i, turn := range task.Scripts.Baseline {
		requireExpected(t, i, turn, seen)
		var outs []string
		for _, c := range turn.Calls {
			res, err := RunCommand(context.Background(), dir, c.Args["command"].(string), commandTimeout)
			require.NoError(t, err)
			require.False(t, res.TimedOut, "turn %d: the command timed out", i+1)
			outs = append(outs, res.Stdout+res.Stderr)
		}
		seen = strings.Join(outs, "\n")
	}
}

func requireExpected(t *testing.T, i int, turn Turn, seen string) {
	for _, e := range turn.Expect {
		require.Contains(t, seen, e, "turn %d expects %q in what came back", i+1, e)
	}
}

// visibleTests is run_tests for the self-check: the task's test command on
// the repository as it stands.
type visibleTests struct {
	task Task
	dir  string
}

func (v visibleTests) RunTests(ctx context.Context, filter string) (string, error) {
	if filter != "" {
		return "", fmt.Errorf("the self-check runs every test; filter %q is not supported", filter)
	}
	res, err := v.task.RunTestCommand(ctx, v.dir, commandTimeout)
	if err != nil {
		return "", err
	}
	return codetools.FormatCommand(res), nil
}

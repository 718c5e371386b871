package agenteval

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/scriptmodel"
)

func bash(command string) scriptmodel.Turn {
	return scriptmodel.Tool(BashTool, map[string]any{"command": command})
}

func runBaseline(t *testing.T, provider string, task Task, turns ...scriptmodel.Turn) (Outcome, *scriptmodel.Server) {
	t.Helper()
	srv, err := scriptmodel.New(scriptmodel.Script{Match: BaselineBrief(task.Prompt), Turns: turns})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	b, err := NewBaseline(BaselineConfig{Model: ScriptedModel(srv, provider), WorkDir: t.TempDir(), CommandTimeout: 2 * time.Second,
		MaxOutput: 200})
	require.NoError(t, err)
	return b.Run(t.Context(), task), srv
}

// The loop runs commands in the repository, one a turn, sees their exit
// code and output, and ends when the model's text holds the marker; the
// change it left is judged.
func TestBaselineSubmits(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{llm.OpenAI, llm.Anthropic} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			task := tinyTask(t)
			out, srv := runBaseline(t, provider, task,
				bash("cat README; ls missing"),
				bash("echo hello > out.txt").Then("exit code", "a repository", "missing"),
				scriptmodel.Say("Done. "+FinishMarker).Then("exit code 0"),
			)
			require.Empty(t, srv.Failures())
			require.True(t, out.Solved, "%+v", out)
			require.Equal(t, "SUBMITTED", out.State)
			require.Equal(t, 3, out.Turns)
			require.Equal(t, 2, out.ToolCalls)
			require.Positive(t, out.TokensIn)
			require.Empty(t, out.Error)

			// One tool, a system prompt that says how to finish, and the
			// task in the first message.
			first := srv.Requests()[0]
			require.Equal(t, []string{BashTool}, first.Tools)
			require.Contains(t, first.System, FinishMarker)
			require.Contains(t, first.Messages[0].Content, task.Prompt)
		})
	}
}

// Nothing is masked: the last turn sees every earlier result whole.
func TestBaselineHistoryIsLinear(t *testing.T) {
	t.Parallel()
	task := tinyTask(t)
	var turns []scriptmodel.Turn
	for i := range 12 {
		turns = append(turns, bash("echo output-"+strings.Repeat("x", i)))
	}
	turns = append(turns, scriptmodel.Say(FinishMarker))
	out, srv := runBaseline(t, llm.OpenAI, task, turns...)
	require.Empty(t, srv.Failures())
	require.Equal(t, "SUBMITTED", out.State)
	require.False(t, out.Solved)
	reqs := srv.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			require.Contains(t, m.Content, "output-")
		}
	}
}

// An echoed marker submits too, an answer with neither a command nor the
// marker gets the baseline's own reminder, and a limit ends the loop.
func TestBaselineEndings(t *testing.T) {
	t.Parallel()
	task := tinyTask(t)
	out, srv := runBaseline(t, llm.OpenAI, task,
		scriptmodel.Say("Let me think."),
		bash("echo hello > out.txt").Then("You answered without running a command", FinishMarker),
		bash("echo "+FinishMarker),
	)
	require.Empty(t, srv.Failures())
	require.Equal(t, "SUBMITTED", out.State)
	require.Equal(t, 1, out.ToolCalls, "the submitting command is not run")
	require.True(t, out.Solved)

	var turns []scriptmodel.Turn
	for range 61 {
		turns = append(turns, bash("true"))
	}
	out, _ = runBaseline(t, llm.OpenAI, task, turns...)
	require.Equal(t, "TOOL_LIMIT", out.State)
	require.Equal(t, 60, out.ToolCalls)
	require.False(t, out.Solved)
}

// The bash tool reports the exit code, cuts long output in the middle and
// stops a command at its timeout.
func TestBashTool(t *testing.T) {
	t.Parallel()
	tool := bashTool(t.TempDir(), time.Second, 100)
	run := func(command string) string {
		raw, err := json.Marshal(map[string]string{"command": command})
		require.NoError(t, err)
		out, err := tool.Run(context.Background(), raw)
		require.NoError(t, err)
		return out
	}
	require.Equal(t, "exit code 3\nout\nerr\n", run("echo out; echo err >&2; exit 3"))
	require.Equal(t, "exit code 0\n(no output)", run("true"))

	long := run("seq 1 1000")
	require.True(t, strings.HasPrefix(long, "exit code 0\n1\n2\n3\n"), long)
	require.True(t, strings.HasSuffix(long, "998\n999\n1000\n"), long)
	require.Contains(t, long, "bytes cut from the middle")
	require.Less(t, len(long), 300)

	start := time.Now()
	require.Contains(t, run("echo started; sleep 30"), "timed out after 1s and was killed; its output until then:\nstarted")
	require.Less(t, time.Since(start), 10*time.Second)

	_, err := tool.Run(context.Background(), json.RawMessage(`{"command": " "}`))
	require.ErrorContains(t, err, "empty")
}

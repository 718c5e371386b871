package agenteval

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func command(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = Command(t.Context(), args, &out, &errs, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	return code, out.String(), errs.String()
}

// Bad flags exit 2 and say what is wrong; flags not given come from
// SYLK_EVAL_* variables.
func TestCommandFlags(t *testing.T) {
	t.Parallel()
	code, _, stderr := command(t, nil, "-baseline-only", "-mesh-only", "-scripted")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "exclude each other")

	code, _, stderr = command(t, nil, "-provider", "anthropic")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "needs an API key")
	require.Contains(t, stderr, "no model named")

	code, _, stderr = command(t, map[string]string{"SYLK_EVAL_TASKS": "nope-*"}, "-scripted", "-baseline-only", "-tasks-dir", "tasks")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `task pattern "nope-*" matches no task`)
}

// A scripted run prints the table and writes it with the JSON report.
func TestCommandWritesTheReports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a task's commands and tests")
	}
	t.Parallel()
	out := t.TempDir()
	code, stdout, stderr := command(t, nil, "-scripted", "-baseline-only", "-tasks", "py-settings-bool", "-tasks-dir", "tasks", "-out", out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "| py-settings-bool | python | bug | **yes** | SUBMITTED | 4 | 3 |")
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	require.Equal(t, stdout, string(md))

	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	var report struct {
		Model    string `json:"model"`
		Scripted bool   `json:"scripted"`
		Tasks    []struct {
			ID       string         `json:"id"`
			Sylk     map[string]any `json:"sylk"`
			Baseline map[string]any `json:"baseline"`
		} `json:"tasks"`
		Totals map[string]map[string]any `json:"totals"`
	}
	require.NoError(t, json.Unmarshal(raw, &report))
	require.Equal(t, "openai/scripted", report.Model)
	require.True(t, report.Scripted)
	require.Len(t, report.Tasks, 1)
	require.Nil(t, report.Tasks[0].Sylk)
	for _, k := range []string{"solved", "state", "turns", "tool_calls", "tokens_in", "tokens_out", "cost", "wall_seconds"} {
		require.Contains(t, report.Tasks[0].Baseline, k)
	}
	require.Equal(t, true, report.Tasks[0].Baseline["solved"])
	require.InDelta(t, 1.0, report.Totals[PathBaseline]["solve_rate"], 1e-9)
	require.NotContains(t, report.Totals, PathSylk)
}

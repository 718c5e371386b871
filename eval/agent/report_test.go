package agenteval

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Totals sum each path over its tasks; the table sets the paths side by
// side and lists the problems under it.
func TestReport(t *testing.T) {
	t.Parallel()
	results := []TaskResult{
		{ID: "a", Language: LanguageGo, Kind: KindBug,
			Sylk:     &Outcome{Solved: true, State: "SUCCEEDED", Turns: 4, ToolCalls: 5, TokensIn: 1000, TokensOut: 100, Cost: 0.01, WallSeconds: 10},
			Baseline: &Outcome{Solved: true, State: "SUBMITTED", Turns: 6, ToolCalls: 5, TokensIn: 3000, TokensOut: 300, Cost: 0.03, WallSeconds: 20}},
		{ID: "b", Language: LanguagePython, Kind: KindFeature,
			Sylk:     &Outcome{State: "NO_CHANGES", Turns: 2, ToolCalls: 1, TokensIn: 500, TokensOut: 50, WallSeconds: 4, Error: "the model finished\nwithout an edit"},
			Baseline: &Outcome{Solved: true, State: "SUBMITTED", Turns: 2, ToolCalls: 1, TokensIn: 1000, TokensOut: 100, Cost: 0.01, WallSeconds: 6}},
	}
	r := NewReport("anthropic/claude-sonnet-4-5", false, time.Now(), results)
	require.Equal(t, Totals{Tasks: 2, Solved: 1, SolveRate: 0.5, Turns: 6, ToolCalls: 6, TokensIn: 1500, TokensOut: 150, Cost: 0.01,
		WallSeconds: 14, Mean: Means{Turns: 3, ToolCalls: 3, TokensIn: 750, TokensOut: 75, Cost: 0.005, WallSeconds: 7}}, r.Totals[PathSylk])
	require.Equal(t, 2, r.Totals[PathBaseline].Solved)
	require.False(t, r.AllSolved())

	var md bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&md))
	require.Contains(t, md.String(), "| task | lang | kind | sylk | state | turns | tools | tokens in/out | cost $ | wall s | baseline | state |")
	require.Contains(t, md.String(), "| a | go | bug | **yes** | SUCCEEDED | 4 | 5 | 1000/100 | 0.0100 | 10.0 | **yes** | SUBMITTED | 6 | 5 | 3000/300 | 0.0300 | 20.0 |")
	require.Contains(t, md.String(), "| **total** |  |  | **1/2 (50%)** |  | 6 | 6 | 1500/150 | 0.0100 | 14.0 | **2/2 (100%)** |")
	require.Contains(t, md.String(), "- b, sylk: the model finished without an edit")
}

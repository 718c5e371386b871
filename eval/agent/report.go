package agenteval

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// The two paths a task runs through.
const (
	// PathSylk is the mesh: a run with an engineer pipeline node.
	PathSylk = "sylk"
	// PathBaseline is the bash-only loop.
	PathBaseline = "baseline"
)

// Outcome is what one run of a task did.
type Outcome struct {
	// Solved: the hidden tests pass on the run's change.
	Solved bool `json:"solved"`
	// State is how the run ended: the mesh run's state (SUCCEEDED,
	// NO_CHANGES, FAILED, CANCELLED), or the baseline's (SUBMITTED, or
	// the limit that ended it: TOOL_LIMIT, TIME_LIMIT, NO_TOOL_CALL,
	// MODEL_ERROR, CANCELLED).
	State string `json:"state"`
	// Stop is why the agent loop stopped, in pkg/agent's words
	// ("finished", "tool_limit"...; "submitted" for the baseline's marker).
	Stop      string `json:"stop,omitempty"`
	Turns     int    `json:"turns"`
	ToolCalls int    `json:"tool_calls"`
	TokensIn  int64  `json:"tokens_in"`
	TokensOut int64  `json:"tokens_out"`
	// Cost is in USD, from the model catalogue's list prices.
	Cost        float64 `json:"cost"`
	WallSeconds float64 `json:"wall_seconds"`
	// Error says what went wrong with the run itself (not a failing test).
	Error string `json:"error,omitempty"`
	// TestOutput is the end of the hidden tests' output when they failed.
	TestOutput string `json:"test_output,omitempty"`
}

// TaskResult is a task's outcome on each path it ran through.
type TaskResult struct {
	ID       string   `json:"id"`
	Language string   `json:"language"`
	Kind     string   `json:"kind"`
	Sylk     *Outcome `json:"sylk,omitempty"`
	Baseline *Outcome `json:"baseline,omitempty"`
}

func (r TaskResult) outcome(path string) *Outcome {
	if path == PathSylk {
		return r.Sylk
	}
	return r.Baseline
}

// Totals sum a path's outcomes over the tasks.
type Totals struct {
	Tasks       int     `json:"tasks"`
	Solved      int     `json:"solved"`
	SolveRate   float64 `json:"solve_rate"`
	Turns       int     `json:"turns"`
	ToolCalls   int     `json:"tool_calls"`
	TokensIn    int64   `json:"tokens_in"`
	TokensOut   int64   `json:"tokens_out"`
	Cost        float64 `json:"cost"`
	WallSeconds float64 `json:"wall_seconds"`
	// Means are per task.
	Mean Means `json:"mean"`
}

// Means are per-task averages.
type Means struct {
	Turns       float64 `json:"turns"`
	ToolCalls   float64 `json:"tool_calls"`
	TokensIn    float64 `json:"tokens_in"`
	TokensOut   float64 `json:"tokens_out"`
	Cost        float64 `json:"cost"`
	WallSeconds float64 `json:"wall_seconds"`
}

// Report is a whole evaluation.
type Report struct {
	// Model is "provider/model"; Scripted marks a run of the scripts.
	Model    string       `json:"model"`
	Scripted bool         `json:"scripted"`
	Start    time.Time    `json:"start"`
	Tasks    []TaskResult `json:"tasks"`
	// Totals by path ("sylk", "baseline"), for the paths that ran.
	Totals map[string]Totals `json:"totals"`
	// ScriptFailures are what went against the scripts, in scripted mode.
	ScriptFailures []string `json:"script_failures,omitempty"`
}

// NewReport totals results.
func NewReport(model string, scripted bool, start time.Time, results []TaskResult) Report {
	r := Report{Model: model, Scripted: scripted, Start: start, Tasks: results, Totals: map[string]Totals{}}
	for _, path := range []string{PathSylk, PathBaseline} {
		var t Totals
		for _, res := range results {
			o := res.outcome(path)
			if o == nil {
				continue
			}
			t.Tasks++
			if o.Solved {
				t.Solved++
			}
			t.Turns += o.Turns
			t.ToolCalls += o.ToolCalls
			t.TokensIn += o.TokensIn
			t.TokensOut += o.TokensOut
			t.Cost += o.Cost
			t.WallSeconds += o.WallSeconds
		}
		if t.Tasks == 0 {
			continue
		}
		n := float64(t.Tasks)
		t.SolveRate = float64(t.Solved) / n
		t.Mean = Means{Turns: float64(t.Turns) / n, ToolCalls: float64(t.ToolCalls) / n, TokensIn: float64(t.TokensIn) / n,
			TokensOut: float64(t.TokensOut) / n, Cost: t.Cost / n, WallSeconds: t.WallSeconds / n}
		r.Totals[path] = t
	}
	return r
}

// AllSolved says whether every task solved on every path that ran.
func (r Report) AllSolved() bool {
	for _, t := range r.Totals {
		if t.Solved != t.Tasks {
			return false
		}
	}
	return len(r.Totals) > 0
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report as a markdown table, a row per task with
// each path's columns side by side, then the totals and means, then the
// errors.
func (r Report) WriteMarkdown(w io.Writer) error {
	paths := r.paths()
	var b strings.Builder
	mode := ""
	if r.Scripted {
		mode = " (scripted)"
	}
	fmt.Fprintf(&b, "Model: %s%s, %d tasks\n\n", r.Model, mode, len(r.Tasks))
	head := []string{"task", "lang", "kind"}
	for _, p := range paths {
		head = append(head, p, "state", "turns", "tools", "tokens in/out", "cost $", "wall s")
	}
	row(&b, head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
	}
	row(&b, sep)
	for _, t := range r.Tasks {
		cells := []string{t.ID, t.Language, t.Kind}
		for _, p := range paths {
			cells = append(cells, outcomeCells(t.outcome(p))...)
		}
		row(&b, cells)
	}
	total, mean := []string{"**total**", "", ""}, []string{"**mean**", "", ""}
	for _, p := range paths {
		t := r.Totals[p]
		total = append(total, fmt.Sprintf("**%d/%d (%.0f%%)**", t.Solved, t.Tasks, 100*t.SolveRate), "",
			fmt.Sprint(t.Turns), fmt.Sprint(t.ToolCalls), fmt.Sprintf("%d/%d", t.TokensIn, t.TokensOut),
			fmt.Sprintf("%.4f", t.Cost), fmt.Sprintf("%.1f", t.WallSeconds))
		m := t.Mean
		mean = append(mean, "", "", fmt.Sprintf("%.1f", m.Turns), fmt.Sprintf("%.1f", m.ToolCalls),
			fmt.Sprintf("%.0f/%.0f", m.TokensIn, m.TokensOut), fmt.Sprintf("%.4f", m.Cost), fmt.Sprintf("%.1f", m.WallSeconds))
	}
	row(&b, total)
	row(&b, mean)
	r.writeProblems(&b, paths)
	_, err := io.WriteString(w, b.String())
	return err
}

// paths are the paths that ran, Sylk first.
func (r Report) paths() []string {
	var out []string
	for _, p := range []string{PathSylk, PathBaseline} {
		if _, ok := r.Totals[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

func (r Report) writeProblems(b *strings.Builder, paths []string) {
	var lines []string
	for _, t := range r.Tasks {
		for _, p := range paths {
			if o := t.outcome(p); o != nil && o.Error != "" {
				lines = append(lines, fmt.Sprintf("- %s, %s: %s", t.ID, p, oneLine(o.Error)))
			}
		}
	}
	for _, f := range r.ScriptFailures {
		lines = append(lines, "- script: "+oneLine(f))
	}
	if len(lines) > 0 {
		b.WriteString("\nProblems:\n\n" + strings.Join(lines, "\n") + "\n")
	}
}

func outcomeCells(o *Outcome) []string {
	if o == nil {
		return []string{"", "", "", "", "", "", ""}
	}
	solved := "no"
	if o.Solved {
		solved = "**yes**"
	}
	return []string{solved, o.State, fmt.Sprint(o.Turns), fmt.Sprint(o.ToolCalls), fmt.Sprintf("%d/%d", o.TokensIn, o.TokensOut),
		fmt.Sprintf("%.4f", o.Cost), fmt.Sprintf("%.1f", o.WallSeconds)}
}

func row(b *strings.Builder, cells []string) {
	b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// oneLine is s on one line, at most 300 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 300 {
		return string(r[:297]) + "..."
	}
	return s
}

package agenteval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
)

// The baseline is a bash-only loop with one tool and a linear history: the
// simplest agent that does well on coding tasks, for Sylk to be measured
// against. It runs on pkg/agent's loop with everything else turned off: no
// masking of old results, no failure protocol, no checkpoint, no help.

// baselineSystem is the baseline's system prompt.
const baselineSystem = `You are a software engineer working in a git repository, which is your current directory. You solve the task you are given by running shell commands with the bash tool.

- Call bash with one command per turn. Each command runs in a new sh -c in the repository root: cd and variables do not carry over, so chain commands with && when you need to.
- Commands cannot be interactive and must finish within %s. Long output is cut in the middle: narrow it with head, tail, grep or sed -n.
- A good way to work: find and read the relevant code, reproduce the problem, change the code (sed -i, cat <<'EOF' > file, or a small python3 script), then run the tests and check that your change works.
- When you are done, answer with a message that contains ` + FinishMarker + ` and no command. The changes in the repository are your submission; you cannot go on after it.`

// baselineNudge answers a turn with neither a command nor the marker.
const baselineNudge = "You answered without running a command. Call the bash tool with your next command or, if the task is done, answer with " + FinishMarker + "."

// BaselineBrief is the baseline's first message for a task prompt. It
// holds the prompt, so a script matched on the prompt alone matches it too
// (see Scripts).
func BaselineBrief(prompt string) string {
	return "Solve this task in the repository in your current directory.\n\n<task>\n" + strings.TrimSpace(prompt) +
		"\n</task>\n\nWork with the bash tool, one command per turn. When the task is done, answer with " + FinishMarker + "."
}

// BaselineConfig configures the baseline.
type BaselineConfig struct {
	Model ModelConfig
	// ToolCalls and WallTime bound each task, as the mesh's Engineer is
	// bounded (60 calls, 10 minutes).
	ToolCalls int
	WallTime  time.Duration
	// CommandTimeout bounds each command (2 minutes).
	CommandTimeout time.Duration
	// MaxOutput is the most of a command's output the model sees, in
	// bytes (10,000): its head and tail.
	MaxOutput int
	// TestTimeout bounds the hidden tests' run (2 minutes).
	TestTimeout time.Duration
	// WorkDir holds the tasks' working directories ("" is the system's
	// temporary directory).
	WorkDir string
}

func (c BaselineConfig) withDefaults() BaselineConfig {
	if c.ToolCalls <= 0 {
		c.ToolCalls = 60
	}
	if c.WallTime <= 0 {
		c.WallTime = 10 * time.Minute
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = 2 * time.Minute
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = 10_000
	}
	if c.TestTimeout <= 0 {
		c.TestTimeout = 2 * time.Minute
	}
	return c
}

// Baseline runs tasks through the bash-only loop.
type Baseline struct {
	cfg    BaselineConfig
	client llm.Provider
}

// NewBaseline makes the baseline, with a client of the configured model.
func NewBaseline(cfg BaselineConfig) (*Baseline, error) {
	client, err := cfg.Model.client()
	if err != nil {
		return nil, fmt.Errorf("baseline model: %w", err)
	}
	return &Baseline{cfg: cfg.withDefaults(), client: client}, nil
}

// Run runs task in a working copy of its repository and judges the change
// the loop left there.
func (b *Baseline) Run(ctx context.Context, task Task) Outcome {
	dir, err := os.MkdirTemp(b.cfg.WorkDir, "baseline-"+task.ID+"-")
	if err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	repo := filepath.Join(dir, "repo")
	if err := Checkout(ctx, task, repo); err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}

	model := &submitter{client: b.client, model: b.cfg.Model}
	loop := agent.New(agent.Config{
		Limits:    agent.Limits{ToolCalls: b.cfg.ToolCalls, WallTime: b.cfg.WallTime},
		System:    fmt.Sprintf(baselineSystem, b.cfg.CommandTimeout),
		Model:     b.cfg.Model.Model,
		MaxTokens: b.cfg.Model.maxTokens(),
		// A linear history: every result stays whole, and failed calls
		// are only results.
		KeepResults:    math.MaxInt32,
		MaxResultBytes: 2 * b.cfg.MaxOutput,
		Strikes:        math.MaxInt32,
		Nudge:          baselineNudge,
		Stop:           model.stop,
	}, model, []agent.Tool{bashTool(repo, b.cfg.CommandTimeout, b.cfg.MaxOutput)}, nil, nil, nil)
	start := time.Now()
	res, runErr := loop.Run(ctx, llm.Message{Role: llm.RoleUser, Content: BaselineBrief(task.Prompt)})
	out := Outcome{
		State: strings.ToUpper(string(res.Stop)), Stop: string(res.Stop),
		Turns: res.Turns, ToolCalls: res.ToolCalls,
		TokensIn: int64(res.Usage.InputTokens), TokensOut: int64(res.Usage.OutputTokens),
		Cost: model.cost, WallSeconds: time.Since(start).Seconds(),
	}
	if res.Stop == agent.StopHook && res.Detail == submitted {
		out.State, out.Stop = "SUBMITTED", submitted
	}
	if runErr != nil {
		out.Error = runErr.Error()
	}
	judge(ctx, task, dir, b.cfg.TestTimeout, &out, func() (string, error) { return Diff(ctx, repo) })
	return out
}

// judge judges the change patch returns, recording the verdict or what
// went wrong in out.
func judge(ctx context.Context, task Task, dir string, timeout time.Duration, out *Outcome, patch func() (string, error)) {
	p, err := patch()
	if err == nil {
		var v Verdict
		v, err = Judge(ctx, task, p, dir, timeout)
		out.Solved, out.TestOutput = v.Solved, v.Output
	}
	if err != nil {
		out.Error = strings.TrimSpace(out.Error + "; " + err.Error())
		out.Error = strings.TrimPrefix(out.Error, "; ")
	}
}

// submitted is the stop detail of a baseline that submitted.
const submitted = "submitted"

// submitter is the baseline's model: the provider's client, with the
// mesh's retries of transient failures and rate limits, noting the cost
// and whether an answer submits. An answer submits when its text holds
// FinishMarker, or a command does (the marker echoed, as some models do):
// that ends the loop, through Config.Stop, before the answer's commands
// run.
type submitter struct {
	client llm.Provider
	model  ModelConfig
	done   bool
	cost   float64
}

func (s *submitter) Turn(ctx context.Context, req *llm.Request, _ llm.Handler) (*llm.Response, error) {
	var resp *llm.Response
	err := llm.Retry(ctx, llm.DefaultClassifier(), llm.DefaultRetryPolicies(), func(ctx context.Context) error {
		r, err := s.client.Complete(ctx, req)
		resp = r
		return err
	}, nil)
	if err != nil {
		return nil, err
	}
	s.cost += s.model.cost(resp.Usage)
	s.done = strings.Contains(resp.Content, FinishMarker)
	for _, c := range resp.ToolCalls {
		s.done = s.done || strings.Contains(c.Arguments, FinishMarker)
	}
	return resp, nil
}

func (s *submitter) stop(agent.Result, llm.Usage) string {
	if s.done {
		return submitted
	}
	return ""
}

// bashTool runs a command with sh -c in dir and returns its exit code and
// output, stdout and stderr interleaved, its middle cut beyond maxOutput.
func bashTool(dir string, timeout time.Duration, maxOutput int) agent.Tool {
	return agent.Tool{
		Def: llm.Tool{Name: BashTool,
			Description: "Run a shell command with sh -c in the repository root. Returns its exit code and its output (stdout and stderr together).",
			Schema: map[string]any{"type": "object", "required": []string{"command"}, "additionalProperties": false,
				"properties": map[string]any{"command": map[string]any{"type": "string", "description": "The command to run."}}},
		},
		Writes: true,
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var args struct {
				Command string `json:"command"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return "", fmt.Errorf("arguments do not match the tool's schema: %v", err)
			}
			if strings.TrimSpace(args.Command) == "" {
				return "", errors.New("the command is empty")
			}
			out := &headTail{max: maxOutput}
			code, timedOut, err := runShell(ctx, dir, args.Command, timeout, out, out)
			if err != nil {
				return "", err
			}
			return formatBash(code, timedOut, timeout, out.String()), nil
		},
	}
}

func formatBash(code int, timedOut bool, timeout time.Duration, output string) string {
	if output == "" {
		output = "(no output)"
	}
	if timedOut {
		return fmt.Sprintf("the command timed out after %s and was killed; its output until then:\n%s", timeout, output)
	}
	return fmt.Sprintf("exit code %d\n%s", code, output)
}

// headTail keeps the first and last max/2 bytes written to it and counts
// the rest, so that a command printing without end costs no memory.
type headTail struct {
	max        int
	head, tail []byte
	cut        int
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	if room := h.max/2 - len(h.head); room > 0 {
		take := min(room, len(p))
		h.head = append(h.head, p[:take]...)
		p = p[take:]
	}
	h.tail = append(h.tail, p...)
	if over := len(h.tail) - h.max/2; over > 0 {
		h.cut += over
		h.tail = append(h.tail[:0], h.tail[over:]...)
	}
	return n, nil
}

func (h *headTail) String() string {
	if h.cut == 0 {
		return string(h.head) + string(h.tail)
	}
	tail := h.tail
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return fmt.Sprintf("%s\n[... %d bytes cut from the middle: narrow the command (head, tail, grep, sed -n) to see them ...]\n%s",
		bytes.ToValidUTF8(h.head, nil), h.cut, tail)
}

// Package agent is the tool-using loop of Sylk's coding agents: each turn
// asks the model (through whatever Model the caller gives, the LLM gate in
// the mesh), runs the tool calls it made, and sends their results back,
// until the model calls a tool that ends the task or a limit ends it.
//
// The loop keeps its context bounded by observation masking: tool results
// older than the newest few are shown to the model as a one-line stub (the
// full text stays in the history). It recovers from repeated failure as spec
// E-14 asks: the workspace is checkpointed before the first write, two tool
// errors in a row add a warning to what the model reads next, and the third
// reverts the workspace and asks a person for help.
//
// A Loop belongs to one task. Run may be called again with more messages
// (an Inspector's findings, a Tester's failures): the limits count across
// every Run of the loop.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/llm"
)

// Model makes one turn of a conversation. h, when not nil, receives the
// answer's chunks as they arrive.
type Model interface {
	Turn(ctx context.Context, req *llm.Request, h llm.Handler) (*llm.Response, error)
}

// ModelFunc adapts a function to Model.
type ModelFunc func(ctx context.Context, req *llm.Request, h llm.Handler) (*llm.Response, error)

// Turn calls f.
func (f ModelFunc) Turn(ctx context.Context, req *llm.Request, h llm.Handler) (*llm.Response, error) {
	return f(ctx, req, h)
}

// Tool is one tool the model may call.
type Tool struct {
	// Def is what the model sees: name, a concise description, and the
	// JSON schema of the arguments.
	Def llm.Tool
	// Run runs a call with its JSON arguments. The text goes back to the
	// model; an error is a failed call (its message goes back instead, and
	// it counts toward the failure protocol).
	Run func(ctx context.Context, args json.RawMessage) (string, error)
	// Writes marks a tool that changes the workspace: a checkpoint comes
	// before the first call of one.
	Writes bool
	// Ends marks the tool that ends the task (finish): the loop stops once
	// a call of it succeeds.
	Ends bool
}

// Workspace checkpoints and reverts the files the tools change.
type Workspace interface {
	Checkpoint(ctx context.Context) error
	Revert(ctx context.Context) error
}

// Helper asks a person for help and waits for the answer ("" when none
// came).
type Helper interface {
	AskHelp(ctx context.Context, question string) (string, error)
}

// Limits bound one task's loop; zero values have the defaults below.
type Limits struct {
	// ToolCalls is the most tool calls (60).
	ToolCalls int
	// Tokens is the most model tokens, in and out, over every turn (no
	// bound when 0; the gate's budgets apply besides).
	Tokens int64
	// WallTime is the most time over every Run (no bound when 0; the
	// context's deadline applies besides).
	WallTime time.Duration
}

// Config configures a Loop.
type Config struct {
	Limits
	// System is the system prompt.
	System string
	// Model and MaxTokens go into every request ("" is the default model).
	Model     string
	MaxTokens int
	// KeepResults is how many of the newest tool results the model sees
	// whole (8); older ones are masked.
	KeepResults int
	// MaxResultBytes caps a tool result the model sees (16 KiB): its head
	// and tail are kept, with a line saying how much was cut.
	MaxResultBytes int
	// Strikes is the number of tool errors in a row that reverts the
	// workspace and asks for help (3); one fewer adds a warning.
	Strikes int
	// NudgeLimit is how many answers without a tool call in a row the loop
	// answers with a reminder before it stops (2).
	NudgeLimit int
	// Nudge is that reminder (one that names the finish tool when empty):
	// a loop whose tools end differently says how.
	Nudge string
	// Attribution is set on every request.
	Attribution llm.Attribution
	Priority    int
	// Stop, when set, is asked after every turn with the loop's totals so
	// far and the turn's usage; a reason it returns ends the loop (a
	// context handoff, say). The turn's tool calls are then not made.
	Stop func(sofar Result, turn llm.Usage) string
	// Interject, when set, is asked before every turn for what a person
	// said meanwhile (guidance); a text it returns is added as a user
	// message.
	Interject func() string
}

func (c Config) withDefaults() Config {
	if c.ToolCalls <= 0 {
		c.ToolCalls = 60
	}
	if c.KeepResults <= 0 {
		c.KeepResults = 8
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = 16 << 10
	}
	if c.Strikes <= 0 {
		c.Strikes = 3
	}
	if c.NudgeLimit <= 0 {
		c.NudgeLimit = 2
	}
	if c.Nudge == "" {
		c.Nudge = nudgeText
	}
	return c
}

// Stop says why a Run ended.
type Stop string

// Why a Run ends.
const (
	// StopFinished: the model called the ending tool.
	StopFinished Stop = "finished"
	// StopToolLimit, StopTokenLimit, StopTimeLimit: a limit was reached.
	StopToolLimit  Stop = "tool_limit"
	StopTokenLimit Stop = "token_limit"
	StopTimeLimit  Stop = "time_limit"
	// StopNoToolCall: the model kept answering without calling a tool.
	StopNoToolCall Stop = "no_tool_call"
	// StopStrikes: tool errors in a row reverted the workspace, and no
	// help came.
	StopStrikes Stop = "strikes"
	// StopModelError: the model could not be called.
	StopModelError Stop = "model_error"
	// StopCancelled: the context ended.
	StopCancelled Stop = "cancelled"
	// StopHook: Config.Stop ended it.
	StopHook Stop = "stopped"
)

// Result is what a Run did.
type Result struct {
	Stop Stop
	// Detail says more about Stop, for a person.
	Detail string
	// Final is the ending call's arguments, when the model finished.
	Final json.RawMessage
	// The loop's totals so far, over every Run.
	ToolCalls, Turns int
	Usage            llm.Usage
	// Wrote says whether a writing tool succeeded (since the last revert).
	Wrote bool
	// Reverts counts the failure protocol's reverts.
	Reverts int
}

// EventKind is what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventText: a chunk of the model's text for the current turn.
	EventText EventKind = iota + 1
	// EventToolStart and EventToolEnd: a tool call began and ended.
	EventToolStart
	EventToolEnd
	// EventWarning: the failure protocol's warning was added.
	EventWarning
	// EventRevert: the workspace was reverted to its checkpoint.
	EventRevert
	// EventTurn: a model turn ended (Usage is set).
	EventTurn
)

// Event is what the loop tells its observer as it works.
type Event struct {
	Kind EventKind
	Turn int
	// Tool, CallID and Args (the arguments, shortened) of a tool event.
	Tool, CallID, Args string
	// Err is set on a failed tool call.
	Err bool
	// Duration of a tool call.
	Duration time.Duration
	// Text is a text chunk, or a tool result's first line, or a warning.
	Text  string
	Usage llm.Usage
}

// Loop is one task's agent loop.
type Loop struct {
	cfg     Config
	model   Model
	tools   []Tool
	defs    []llm.Tool
	ws      Workspace
	help    Helper
	observe func(Event)

	msgs       []llm.Message
	res        Result
	started    time.Time
	elapsed    time.Duration
	checkpoint bool
	strikes    int
	warning    string
}

// New makes a loop. ws and help may be nil (no checkpoint, no help);
// observe may be nil.
func New(cfg Config, model Model, tools []Tool, ws Workspace, help Helper, observe func(Event)) *Loop {
	l := &Loop{cfg: cfg.withDefaults(), model: model, tools: tools, ws: ws, help: help, observe: observe}
	for _, t := range tools {
		l.defs = append(l.defs, t.Def)
	}
	if l.observe == nil {
		l.observe = func(Event) {}
	}
	return l
}

// Messages is the whole conversation so far, unmasked.
func (l *Loop) Messages() []llm.Message { return l.msgs }

// Run adds msgs to the conversation and runs turns until the model ends
// the task or a limit does. A model error is returned as well as reported
// in the Result.
func (l *Loop) Run(ctx context.Context, msgs ...llm.Message) (Result, error) {
	l.msgs = append(l.msgs, msgs...)
	start := time.Now()
	defer func() { l.elapsed += time.Since(start) }()
	if l.cfg.WallTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.WallTime-l.elapsed)
		defer cancel()
	}
	nudges := 0
	for {
		if stop, detail := l.limitReached(ctx); stop != "" {
			return l.end(stop, detail), nil
		}
		if l.cfg.Interject != nil {
			if text := l.cfg.Interject(); text != "" {
				l.msgs = append(l.msgs, llm.Message{Role: llm.RoleUser, Content: text})
			}
		}
		resp, err := l.turn(ctx)
		if err != nil {
			if stop, detail := l.limitReached(ctx); stop != "" {
				return l.end(stop, detail), nil
			}
			return l.end(StopModelError, err.Error()), err
		}
		if why := l.hook(resp.Usage); why != "" {
			return l.end(StopHook, why), nil
		}
		if len(resp.ToolCalls) == 0 {
			if nudges++; nudges > l.cfg.NudgeLimit {
				return l.end(StopNoToolCall, "the model answered without calling a tool "+fmt.Sprint(nudges)+" times in a row"), nil
			}
			l.msgs = append(l.msgs, llm.Message{Role: llm.RoleUser, Content: l.cfg.Nudge})
			continue
		}
		nudges = 0
		if done, stop, detail := l.callTools(ctx, resp.ToolCalls); done {
			return l.end(stop, detail), nil
		}
	}
}

const nudgeText = "You answered without calling a tool. Work only through the tools: call one to go on, or call finish when the task is done."

func (l *Loop) hook(u llm.Usage) string {
	if l.cfg.Stop == nil {
		return ""
	}
	return l.cfg.Stop(l.res, u)
}

func (l *Loop) end(stop Stop, detail string) Result {
	l.res.Stop, l.res.Detail = stop, detail
	return l.res
}

// limitReached says which limit, if any, ends the loop now.
func (l *Loop) limitReached(ctx context.Context) (Stop, string) {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return StopTimeLimit, "the task's time ran out"
	case ctx.Err() != nil:
		return StopCancelled, "cancelled"
	case l.res.ToolCalls >= l.cfg.ToolCalls:
		return StopToolLimit, fmt.Sprintf("reached the limit of %d tool calls", l.cfg.ToolCalls)
	case l.cfg.Tokens > 0 && int64(l.res.Usage.Total()) >= l.cfg.Tokens:
		return StopTokenLimit, fmt.Sprintf("used %d of the task's %d model tokens", l.res.Usage.Total(), l.cfg.Tokens)
	}
	return "", ""
}

// turn asks the model for its next step and adds the answer to the
// conversation.
func (l *Loop) turn(ctx context.Context) (*llm.Response, error) {
	req := &llm.Request{Model: l.cfg.Model, System: l.cfg.System, Messages: l.masked(), Tools: l.defs,
		MaxTokens: l.cfg.MaxTokens, Attribution: l.cfg.Attribution, Priority: l.cfg.Priority}
	l.res.Turns++
	turn := l.res.Turns
	resp, err := l.model.Turn(ctx, req, func(c llm.Chunk) error {
		if c.Type == llm.ChunkText && c.Text != "" {
			l.observe(Event{Kind: EventText, Turn: turn, Text: c.Text})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	l.res.Usage.InputTokens += resp.Usage.InputTokens
	l.res.Usage.OutputTokens += resp.Usage.OutputTokens
	l.observe(Event{Kind: EventTurn, Turn: turn, Usage: resp.Usage})
	l.msgs = append(l.msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
	return resp, nil
}

// callTools runs a turn's calls in order (an ending call last) and adds
// their results. done is set when the loop ends.
func (l *Loop) callTools(ctx context.Context, calls []llm.ToolCall) (done bool, stop Stop, detail string) {
	var final *llm.ToolCall
	for i := range calls {
		c := calls[i]
		if t := l.tool(c.Name); t != nil && t.Ends && final == nil {
			final = &calls[i]
			continue
		}
		l.call(ctx, c)
	}
	if final != nil {
		if l.call(ctx, *final) {
			l.res.Final = json.RawMessage(final.Arguments)
			return true, StopFinished, "the model finished the task"
		}
	}
	if l.strikes >= l.cfg.Strikes {
		return l.recover(ctx)
	}
	return false, "", ""
}

func (l *Loop) tool(name string) *Tool {
	for i := range l.tools {
		if l.tools[i].Def.Name == name {
			return &l.tools[i]
		}
	}
	return nil
}

// call runs one tool call and adds its result; it reports success.
func (l *Loop) call(ctx context.Context, c llm.ToolCall) bool {
	l.res.ToolCalls++
	args := shortArgs(c.Arguments)
	l.observe(Event{Kind: EventToolStart, Turn: l.res.Turns, Tool: c.Name, CallID: c.ID, Args: args})
	start := time.Now()
	out, err := l.execute(ctx, c)
	ok := err == nil
	text := out
	if !ok {
		text = "error: " + err.Error()
	}
	text = capText(text, l.cfg.MaxResultBytes)
	l.observe(Event{Kind: EventToolEnd, Turn: l.res.Turns, Tool: c.Name, CallID: c.ID, Args: args, Err: !ok,
		Duration: time.Since(start), Text: firstLine(text)})
	if ok {
		l.strikes = 0
	} else {
		l.strikes++
	}
	if l.strikes == l.cfg.Strikes-1 && l.warning == "" {
		l.warning = failureWarning
		text += "\n\n" + failureWarning
		l.observe(Event{Kind: EventWarning, Turn: l.res.Turns, Text: failureWarning})
	} else if l.strikes == 0 {
		l.warning = ""
	}
	l.msgs = append(l.msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: text, IsError: !ok})
	return ok
}

// execute checks a call's arguments and runs its tool, checkpointing the
// workspace before the first write.
func (l *Loop) execute(ctx context.Context, c llm.ToolCall) (string, error) {
	if msg, ok := llm.CheckToolCall(c, l.defs); !ok {
		return "", errors.New(strings.TrimPrefix(msg.Content, "error: "))
	}
	t := l.tool(c.Name)
	if t.Writes && !l.checkpoint && l.ws != nil {
		if err := l.ws.Checkpoint(ctx); err != nil {
			return "", fmt.Errorf("could not checkpoint the workspace before the first change: %w", err)
		}
		l.checkpoint = true
	}
	args := json.RawMessage(c.Arguments)
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	out, err := t.Run(ctx, args)
	if err == nil && t.Writes {
		l.res.Wrote = true
	}
	return out, err
}

// failureWarning is added after two failed calls in a row (spec E-14).
const failureWarning = `FAILURE WARNING: your last tool calls failed in a row. One more failure reverts every change you made and stops the task to ask a person for help. Do not retry the same call with small tweaks. Re-read the files involved, check your assumptions (paths, exact text to replace), and change approach. Never silence errors, skip or delete tests, or use type escapes (any, @ts-ignore, @ts-expect-error) to get past them.`

// recover carries out the failure protocol's third strike: revert the
// workspace, then ask for help; the loop goes on with the answer, or ends.
func (l *Loop) recover(ctx context.Context) (bool, Stop, string) {
	reverted := ""
	if l.checkpoint && l.ws != nil {
		if err := l.ws.Revert(ctx); err != nil {
			return true, StopStrikes, fmt.Sprintf("%d tool errors in a row, and reverting the workspace failed: %v", l.strikes, err)
		}
		l.res.Reverts++
		l.res.Wrote = false
		reverted = " Every change was reverted to the state before your first edit."
		l.observe(Event{Kind: EventRevert, Turn: l.res.Turns, Text: "workspace reverted to its checkpoint"})
	}
	why := fmt.Sprintf("%d tool calls failed in a row.%s", l.strikes, reverted)
	if l.help == nil {
		return true, StopStrikes, why + " No one can be asked for help."
	}
	answer, err := l.help.AskHelp(ctx, l.helpQuestion())
	if err != nil || strings.TrimSpace(answer) == "" {
		detail := why + " No help came"
		if err != nil {
			detail += ": " + err.Error()
		}
		return true, StopStrikes, detail
	}
	l.strikes, l.warning = 0, ""
	l.msgs = append(l.msgs, llm.Message{Role: llm.RoleUser, Content: why + " A person answered your request for help:\n\n" + answer})
	return false, "", ""
}

// helpQuestion is what the person is asked: the failing calls.
func (l *Loop) helpQuestion() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The Engineer's last %d tool calls failed; its changes were reverted. How should it go on?\n", l.strikes)
	n := 0
	for i := len(l.msgs) - 1; i >= 0 && n < l.strikes; i-- {
		if m := l.msgs[i]; m.Role == llm.RoleTool && m.IsError {
			fmt.Fprintf(&b, "- %s\n", firstLine(m.Content))
			n++
		}
	}
	return b.String()
}

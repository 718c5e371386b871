package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// model serves scripts through the real OpenAI-compatible client, streamed.
func model(t *testing.T, scripts ...scriptmodel.Script) (agent.Model, *scriptmodel.Server) {
	t.Helper()
	srv, err := scriptmodel.New(scripts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	p := openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: srv.URL + "/v1", Name: "ollama",
		Aliases: llm.Aliases{llm.AliasDefault: "scripted"}})
	return agent.ModelFunc(func(ctx context.Context, req *llm.Request, h llm.Handler) (*llm.Response, error) {
		acc := llm.NewAccumulator("ollama", "scripted")
		if err := p.Stream(ctx, req, acc.Handler(h)); err != nil {
			return nil, err
		}
		return acc.Response(), nil
	}), srv
}

// files is an in-memory workspace with a checkpoint.
type files struct {
	mu          sync.Mutex
	m, saved    map[string]string
	checkpoints int
	reverts     int
}

func newFiles() *files {
	return &files{m: map[string]string{"a.go": "package a\n\nfunc Add(a, b int) int { return a - b }\n"}}
}

func (f *files) Checkpoint(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checkpoints++
	f.saved = map[string]string{}
	for k, v := range f.m {
		f.saved[k] = v
	}
	return nil
}

func (f *files) Revert(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reverts++
	f.m = f.saved
	return nil
}

func (f *files) tools() []agent.Tool {
	obj := func(req ...string) map[string]any {
		props := map[string]any{}
		for _, r := range req {
			props[r] = map[string]any{"type": "string"}
		}
		return map[string]any{"type": "object", "properties": props, "required": req}
	}
	var args struct{ Path, Old, New string }
	return []agent.Tool{
		{Def: llm.Tool{Name: "read_file", Description: "read", Schema: obj("path")},
			Run: func(_ context.Context, raw json.RawMessage) (string, error) {
				_ = json.Unmarshal(raw, &args)
				f.mu.Lock()
				defer f.mu.Unlock()
				s, ok := f.m[args.Path]
				if !ok {
					return "", errors.New("no such file: " + args.Path)
				}
				return s, nil
			}},
		{Def: llm.Tool{Name: "edit_file", Description: "edit", Schema: obj("path", "old", "new")}, Writes: true,
			Run: func(_ context.Context, raw json.RawMessage) (string, error) {
				_ = json.Unmarshal(raw, &args)
				f.mu.Lock()
				defer f.mu.Unlock()
				s := f.m[args.Path]
				if strings.Count(s, args.Old) != 1 {
					return "", errors.New("old text not found once in " + args.Path)
				}
				f.m[args.Path] = strings.Replace(s, args.Old, args.New, 1)
				return "edited " + args.Path, nil
			}},
		{Def: llm.Tool{Name: "finish", Description: "done", Schema: obj("summary")}, Ends: true,
			Run: func(context.Context, json.RawMessage) (string, error) { return "done", nil }},
	}
}

type helper struct{ answer string }

func (h helper) AskHelp(context.Context, string) (string, error) { return h.answer, nil }

func TestLoopFixesAndFinishes(t *testing.T) {
	t.Parallel()
	m, srv := model(t, scriptmodel.Script{Match: "fix Add", Turns: []scriptmodel.Turn{
		{Text: "Let me look.", Calls: []scriptmodel.Call{{Name: "read_file", Args: map[string]any{"path": "a.go"}}}},
		scriptmodel.Tool("edit_file", map[string]any{"path": "a.go", "old": "a - b", "new": "a + b"}).Then("return a - b"),
		scriptmodel.Tool("finish", map[string]any{"summary": "Add adds"}).Then("edited a.go"),
	}})
	ws := newFiles()
	var mu sync.Mutex
	var events []agent.Event
	l := agent.New(agent.Config{System: "engineer"}, m, ws.tools(), ws, nil, func(e agent.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	res, err := l.Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "fix Add in a.go"})
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, agent.StopFinished, res.Stop)
	require.JSONEq(t, `{"summary":"Add adds"}`, string(res.Final))
	require.Equal(t, 3, res.ToolCalls)
	require.Equal(t, 3, res.Turns)
	require.True(t, res.Wrote)
	require.Positive(t, res.Usage.InputTokens)
	require.Contains(t, ws.m["a.go"], "a + b")
	require.Equal(t, 1, ws.checkpoints, "one checkpoint, before the first write")

	var text string
	var ends []agent.Event
	for _, e := range events {
		switch e.Kind {
		case agent.EventText:
			text += e.Text
		case agent.EventToolEnd:
			ends = append(ends, e)
		}
	}
	require.Equal(t, "Let me look.", text, "the model's text streams as it arrives")
	require.Len(t, ends, 3)
	require.Equal(t, "read_file", ends[0].Tool)
	require.Equal(t, `{"path":"a.go"}`, ends[0].Args)
	require.Equal(t, "package a", ends[0].Text)
	require.False(t, ends[0].Err)
}

// Tool results older than the newest KeepResults reach the model as a stub.
func TestOldResultsAreMasked(t *testing.T) {
	t.Parallel()
	read := scriptmodel.Tool("read_file", map[string]any{"path": "a.go"})
	m, srv := model(t, scriptmodel.Script{Match: "look", Turns: []scriptmodel.Turn{read, read, read,
		scriptmodel.Tool("finish", map[string]any{"summary": "x"})}})
	ws := newFiles()
	res, err := agent.New(agent.Config{KeepResults: 1}, m, ws.tools(), ws, nil, nil).
		Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "look at a.go"})
	require.NoError(t, err)
	require.Equal(t, agent.StopFinished, res.Stop)
	last := srv.Requests()[3]
	var tools []string
	for _, msg := range last.Messages {
		if msg.Role == "tool" {
			tools = append(tools, msg.Content)
		}
	}
	require.Len(t, tools, 3)
	require.Equal(t, `[output of read_file({"path":"a.go"}) elided: 4 lines; call it again if you need it]`, tools[0])
	require.Contains(t, tools[1], "elided")
	require.Contains(t, tools[2], "package a", "the newest result stays whole")
}

func failingEdit() scriptmodel.Turn {
	return scriptmodel.Tool("edit_file", map[string]any{"path": "a.go", "old": "nowhere", "new": "x"})
}

// Two tool errors in a row add a warning; the third reverts the workspace
// and asks for help, and the loop goes on with the answer.
func TestThreeStrikesRevertAndAskForHelp(t *testing.T) {
	t.Parallel()
	good := scriptmodel.Tool("edit_file", map[string]any{"path": "a.go", "old": "a - b", "new": "a * b"})
	m, srv := model(t, scriptmodel.Script{Match: "fix", Turns: []scriptmodel.Turn{
		good,
		failingEdit(),
		failingEdit().Then("not found once"),
		failingEdit().Then("FAILURE WARNING"),
		scriptmodel.Tool("finish", map[string]any{"summary": "asked"}).Then("reverted", "use a + b"),
	}})
	ws := newFiles()
	res, err := agent.New(agent.Config{}, m, ws.tools(), ws, helper{answer: "use a + b"}, nil).
		Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "fix Add"})
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, agent.StopFinished, res.Stop)
	require.Equal(t, 1, res.Reverts)
	require.False(t, res.Wrote, "the revert undid the only write")
	require.Contains(t, ws.m["a.go"], "a - b", "the good edit before the strikes is reverted too")

	// Without anyone to ask, the third strike ends the task.
	m, _ = model(t, scriptmodel.Script{Match: "fix", Turns: []scriptmodel.Turn{good, failingEdit(), failingEdit(), failingEdit()}})
	ws = newFiles()
	res, err = agent.New(agent.Config{}, m, ws.tools(), ws, nil, nil).Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "fix Add"})
	require.NoError(t, err)
	require.Equal(t, agent.StopStrikes, res.Stop)
	require.Contains(t, res.Detail, "3 tool calls failed in a row")
	require.Equal(t, 1, ws.reverts)
}

func TestLimits(t *testing.T) {
	t.Parallel()
	read := scriptmodel.Tool("read_file", map[string]any{"path": "a.go"})
	m, _ := model(t, scriptmodel.Script{Match: "loop", Turns: []scriptmodel.Turn{read, read, read, read}})
	ws := newFiles()
	l := agent.New(agent.Config{Limits: agent.Limits{ToolCalls: 2}}, m, ws.tools(), ws, nil, nil)
	res, err := l.Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "loop"})
	require.NoError(t, err)
	require.Equal(t, agent.StopToolLimit, res.Stop)
	require.Equal(t, 2, res.ToolCalls)
	require.Equal(t, "reached the limit of 2 tool calls", res.Detail)

	m, _ = model(t, scriptmodel.Script{Match: "loop", Turns: []scriptmodel.Turn{read, read, read, read}})
	res, err = agent.New(agent.Config{Limits: agent.Limits{Tokens: 1}}, m, ws.tools(), ws, nil, nil).
		Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "loop"})
	require.NoError(t, err)
	require.Equal(t, agent.StopTokenLimit, res.Stop)
	require.Equal(t, 1, res.Turns)

	m, _ = model(t, scriptmodel.Script{Match: "chat", Turns: []scriptmodel.Turn{
		scriptmodel.Say("I think it is done."), scriptmodel.Say("Done."), scriptmodel.Say("Really done.")}})
	res, err = agent.New(agent.Config{}, m, ws.tools(), ws, nil, nil).Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "chat"})
	require.NoError(t, err)
	require.Equal(t, agent.StopNoToolCall, res.Stop)
	require.Equal(t, 3, res.Turns)
}

// An answer without a tool call gets the reminder the loop is configured
// with.
func TestNudge(t *testing.T) {
	t.Parallel()
	m, srv := model(t, scriptmodel.Script{Match: "x", Turns: []scriptmodel.Turn{
		scriptmodel.Say("Thinking."),
		scriptmodel.Tool("finish", map[string]any{"summary": "x"}).Then("run one command"),
	}})
	ws := newFiles()
	res, err := agent.New(agent.Config{Nudge: "run one command"}, m, ws.tools(), ws, nil, nil).
		Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "x"})
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, agent.StopFinished, res.Stop)
}

// A call with malformed or missing arguments fails without running.
func TestArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	m, srv := model(t, scriptmodel.Script{Match: "x", Turns: []scriptmodel.Turn{
		scriptmodel.Tool("read_file", map[string]any{}),
		scriptmodel.Tool("nope", map[string]any{}).Then(`missing required argument "path"`),
		scriptmodel.Tool("finish", map[string]any{"summary": "x"}).Then(`unknown tool "nope"`),
	}})
	ws := newFiles()
	res, err := agent.New(agent.Config{}, m, ws.tools(), ws, nil, nil).Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "x"})
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, agent.StopFinished, res.Stop)
}

// A second Run goes on from the conversation so far (feedback from an
// Inspector), and the limits count across both.
func TestRunContinues(t *testing.T) {
	t.Parallel()
	m, srv := model(t, scriptmodel.Script{Match: "fix", Turns: []scriptmodel.Turn{
		scriptmodel.Tool("finish", map[string]any{"summary": "first"}),
		scriptmodel.Tool("finish", map[string]any{"summary": "second"}).Then("vet failed"),
	}})
	ws := newFiles()
	l := agent.New(agent.Config{}, m, ws.tools(), ws, nil, nil)
	res, err := l.Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "fix"})
	require.NoError(t, err)
	require.JSONEq(t, `{"summary":"first"}`, string(res.Final))
	res, err = l.Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "The Inspector found: vet failed"})
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.JSONEq(t, `{"summary":"second"}`, string(res.Final))
	require.Equal(t, 2, res.ToolCalls)
}

// What a person says while the agent works reaches the model before its
// next turn.
func TestInterjectAddsGuidance(t *testing.T) {
	t.Parallel()
	m, srv := model(t, scriptmodel.Script{Match: "fix", Turns: []scriptmodel.Turn{
		scriptmodel.Tool("read_file", map[string]any{"path": "a.go"}),
		scriptmodel.Tool("finish", map[string]any{"summary": "x"}).Then("package a", "keep the signature"),
	}})
	ws := newFiles()
	said := []string{"", "keep the signature"}
	cfg := agent.Config{Interject: func() string {
		s := said[0]
		said = said[1:]
		return s
	}}
	res, err := agent.New(cfg, m, ws.tools(), ws, nil, nil).Run(t.Context(), llm.Message{Role: llm.RoleUser, Content: "fix"})
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, agent.StopFinished, res.Stop)
}

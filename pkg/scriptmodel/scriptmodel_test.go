package scriptmodel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider/anthropic"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// provider is the part of an llm.Provider the tests drive.
type provider interface {
	Complete(ctx context.Context, req *llm.Request) (*llm.Response, error)
	Stream(ctx context.Context, req *llm.Request, h llm.Handler) error
}

func clients(t *testing.T, srv *scriptmodel.Server) map[string]provider {
	t.Helper()
	return map[string]provider{
		"openai": openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: srv.URL + "/v1", Name: "ollama",
			Aliases: llm.Aliases{llm.AliasDefault: "scripted"}}),
		"anthropic": anthropic.New(llm.ProviderOptions{APIKey: "k", BaseURL: srv.URL,
			Aliases: llm.Aliases{llm.AliasDefault: "scripted"}}),
	}
}

var tools = []llm.Tool{
	{Name: "read_file", Description: "read", Schema: map[string]any{"type": "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []string{"path"}}},
	{Name: "finish", Description: "done", Schema: map[string]any{"type": "object"}},
}

func script() scriptmodel.Script {
	return scriptmodel.Script{Match: "fix the bug", Turns: []scriptmodel.Turn{
		{Text: "Reading first.", Calls: []scriptmodel.Call{{Name: "read_file", Args: map[string]any{"path": "a.go"}}}},
		scriptmodel.Tool("finish", map[string]any{"summary": "fixed"}).Then("package a"),
	}}
}

// call runs one turn through p, streamed or not.
func call(t *testing.T, p provider, stream bool, msgs []llm.Message) *llm.Response {
	t.Helper()
	req := &llm.Request{System: "you are an engineer", Messages: msgs, Tools: tools, MaxTokens: 100}
	if !stream {
		r, err := p.Complete(t.Context(), req)
		require.NoError(t, err)
		return r
	}
	acc := llm.NewAccumulator("p", "scripted")
	require.NoError(t, p.Stream(t.Context(), req, acc.Handler(nil)))
	return acc.Response()
}

// The real clients play a script turn by turn, streamed and not: tool
// calls come back with their arguments, and the second turn sees the tool
// result of the first.
func TestClientsPlayAScript(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		srv, err := scriptmodel.New(script())
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close() })
		for name, p := range clients(t, srv) {
			msgs := []llm.Message{{Role: llm.RoleUser, Content: "please fix the bug in a.go"}}
			r := call(t, p, stream, msgs)
			require.Equal(t, "Reading first.", r.Content, name)
			require.Len(t, r.ToolCalls, 1, name)
			require.Equal(t, "read_file", r.ToolCalls[0].Name)
			require.JSONEq(t, `{"path":"a.go"}`, r.ToolCalls[0].Arguments)
			require.Positive(t, r.Usage.InputTokens)

			msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: r.Content, ToolCalls: r.ToolCalls},
				llm.Message{Role: llm.RoleTool, ToolCallID: r.ToolCalls[0].ID, Content: "1\tpackage a\n"})
			r = call(t, p, stream, msgs)
			require.Len(t, r.ToolCalls, 1, name)
			require.Equal(t, "finish", r.ToolCalls[0].Name)
		}
		require.Empty(t, srv.Failures())
		reqs := srv.Requests()
		require.Len(t, reqs, 4)
		require.Equal(t, stream, reqs[0].Stream)
		require.Equal(t, []string{"read_file", "finish"}, reqs[0].Tools)
		require.Equal(t, "you are an engineer", reqs[0].System)
	}
}

// What goes against the script is recorded and answered with a text that
// says so, which ends an agent's loop.
func TestFailuresAreRecorded(t *testing.T) {
	t.Parallel()
	srv, err := scriptmodel.New(script())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	p := clients(t, srv)["openai"]

	r := call(t, p, false, []llm.Message{{Role: llm.RoleUser, Content: "write a poem"}})
	require.Contains(t, r.Content, "no script matches")
	require.Empty(t, r.ToolCalls)

	msgs := []llm.Message{{Role: llm.RoleUser, Content: "fix the bug"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"path":"a.go"}`}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Content: "no such file"}}
	r = call(t, p, false, msgs)
	require.Contains(t, r.Content, `expected "package a"`)

	msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: "x"}, llm.Message{Role: llm.RoleUser, Content: "more"})
	r = call(t, p, false, msgs)
	require.Contains(t, r.Content, "has 2 turns")
	require.Len(t, srv.Failures(), 3)
}

// A prompt over a script's MaxPromptTokens is rejected as a provider
// rejects one over its context window: the clients' error reads as a
// context overflow, and a shorter prompt then plays the script's turn.
func TestPromptOverTheLimitIsRejected(t *testing.T) {
	t.Parallel()
	sc := script()
	sc.MaxPromptTokens = 40
	srv, err := scriptmodel.New(sc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	for name, p := range clients(t, srv) {
		long := "fix the bug " + strings.Repeat("in this long text ", 20)
		_, err := p.Complete(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: long}}, MaxTokens: 100})
		require.Error(t, err, name)
		require.True(t, llm.IsContextOverflow(err), "%s: %v", name, err)
		r, err := p.Complete(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "fix the bug"}}, MaxTokens: 100})
		require.NoError(t, err, name)
		require.Equal(t, "Reading first.", r.Content, name)
	}
	require.Empty(t, srv.Failures())
}

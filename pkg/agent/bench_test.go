package agent_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
)

// BenchmarkLoopOverheadPerToolCall measures what the loop itself costs per
// tool call (masking, argument checks, events, bookkeeping), with a model
// that answers at once and a tool that does nothing: a task of 60 calls,
// the default limit, with a result of 4 KiB each.
func BenchmarkLoopOverheadPerToolCall(b *testing.B) {
	result := string(make([]byte, 4<<10))
	tools := []agent.Tool{
		{Def: llm.Tool{Name: "read_file", Schema: map[string]any{"type": "object", "required": []string{"path"}}},
			Run: func(context.Context, json.RawMessage) (string, error) { return result, nil }},
		{Def: llm.Tool{Name: "finish", Schema: map[string]any{"type": "object"}}, Ends: true,
			Run: func(context.Context, json.RawMessage) (string, error) { return "done", nil }},
	}
	const calls = 60
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		m := agent.ModelFunc(func(_ context.Context, _ *llm.Request, _ llm.Handler) (*llm.Response, error) {
			n++
			name := "read_file"
			if n == calls {
				name = "finish"
			}
			return &llm.Response{ToolCalls: []llm.ToolCall{{ID: "c" + strconv.Itoa(n), Name: name, Arguments: `{"path":"a.go"}`}},
				Usage: llm.Usage{InputTokens: 1000, OutputTokens: 20}}, nil
		})
		l := agent.New(agent.Config{}, m, tools, nil, nil, func(agent.Event) {})
		if _, err := l.Run(context.Background(), llm.Message{Role: llm.RoleUser, Content: "go"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls)/1e3, "µs/toolcall")
}

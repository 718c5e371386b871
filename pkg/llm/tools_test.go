package llm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
)

func TestCheckToolCall(t *testing.T) {
	t.Parallel()
	tools := []llm.Tool{{Name: "read", Schema: map[string]any{"type": "object", "required": []string{"path"}}}}
	tests := []struct {
		name, tool, args string
		ok               bool
		want             string
	}{
		{"valid", "read", `{"path":"a.go"}`, true, ""},
		{"truncated JSON", "read", `{"path":"a.g`, false, "not a valid JSON object"},
		{"not an object", "read", `["a.go"]`, false, "not a valid JSON object"},
		{"missing required", "read", `{}`, false, `missing required argument "path"`},
		{"unknown tool", "write", `{}`, false, `unknown tool "write"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, ok := llm.CheckToolCall(llm.ToolCall{ID: "c1", Name: tt.tool, Arguments: tt.args}, tools)
			require.Equal(t, tt.ok, ok)
			if !ok {
				require.Equal(t, llm.RoleTool, msg.Role)
				require.Equal(t, "c1", msg.ToolCallID)
				require.True(t, msg.IsError)
				require.Contains(t, msg.Content, tt.want)
			}
		})
	}
}

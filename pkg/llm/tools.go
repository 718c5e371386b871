package llm

import (
	"encoding/json"
	"fmt"
	"slices"
)

// CheckToolCall validates a tool call's arguments against its tool before
// it runs (B-12 case 4). When they are not a JSON object, or miss a
// required property, or name an unknown tool, it returns ok false and the
// tool-result message to send back to the model in place of running it.
func CheckToolCall(tc ToolCall, tools []Tool) (Message, bool) {
	fail := func(format string, a ...any) (Message, bool) {
		return Message{Role: RoleTool, ToolCallID: tc.ID, IsError: true,
			Content: "tool call rejected before running: " + fmt.Sprintf(format, a...) + "; fix the arguments and call again"}, false
	}
	i := slices.IndexFunc(tools, func(t Tool) bool { return t.Name == tc.Name })
	if i < 0 {
		return fail("unknown tool %q", tc.Name)
	}
	args := map[string]any{}
	if tc.Arguments != "" {
		if err := json.Unmarshal([]byte(tc.Arguments), &args); err != nil {
			return fail("arguments are not a valid JSON object (%v)", err)
		}
	}
	switch req := tools[i].Schema["required"].(type) {
	case []string:
		for _, k := range req {
			if _, ok := args[k]; !ok {
				return fail("missing required argument %q", k)
			}
		}
	case []any:
		for _, k := range req {
			if s, ok := k.(string); ok {
				if _, ok := args[s]; !ok {
					return fail("missing required argument %q", s)
				}
			}
		}
	}
	return Message{}, true
}

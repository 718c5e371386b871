package orchestrator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// A report too large to store loses its oldest tool calls first, then the
// middle of its texts; what is stored always decodes.
func TestReportJSONStaysWhole(t *testing.T) {
	t.Parallel()
	act := &orchestratorv1.AgentActivity{Model: "m", Turns: 50, ToolCallCount: 1000}
	for i := range 1000 {
		act.ToolCalls = append(act.ToolCalls, &orchestratorv1.ToolCallRecord{CallId: fmt.Sprintf("c%d", i), Tool: "grep",
			Args: strings.Repeat("a", 200), Summary: strings.Repeat("s", 100), Ok: true})
	}
	rep := &orchestratorv1.TaskReport{Implemented: "the parser", Activity: act}
	out := reportJSON(rep, maxStoredReportBytes)
	require.LessOrEqual(t, len(out), maxStoredReportBytes)
	var got orchestratorv1.TaskReport
	require.NoError(t, protojson.Unmarshal([]byte(out), &got))
	calls := got.GetActivity().GetToolCalls()
	require.NotEmpty(t, calls)
	require.Equal(t, "c999", calls[len(calls)-1].GetCallId(), "the latest calls are kept")
	require.Equal(t, int32(1000), got.GetActivity().GetToolCallCount())
	require.Equal(t, "the parser", got.GetImplemented())
	require.Len(t, act.GetToolCalls(), 1000, "the report itself is left as it was")

	huge := &orchestratorv1.TaskReport{Implemented: strings.Repeat("i", 100<<10), Decisions: strings.Repeat("d", 100<<10)}
	out = reportJSON(huge, maxStoredReportBytes)
	require.LessOrEqual(t, len(out), maxStoredReportBytes)
	require.NoError(t, protojson.Unmarshal([]byte(out), &got))

	small := &orchestratorv1.TaskReport{Tested: "yes", Activity: &orchestratorv1.AgentActivity{StopReason: "finished"}}
	require.NoError(t, protojson.Unmarshal([]byte(reportJSON(small, maxStoredReportBytes)), &got))
	require.True(t, proto.Equal(small, &got))
}

// The decision log gives a task's agent activity in a line.
func TestActivityLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "p/m, 4 turn(s), 9 tool call(s), 100 tokens in, 7 out, 1 revert(s); stopped: tool_limit (60 calls: the limit)",
		activityLine(&orchestratorv1.AgentActivity{Model: "p/m", Turns: 4, ToolCallCount: 9, InputTokens: 100, OutputTokens: 7, Reverts: 1,
			StopReason: "tool_limit", StopDetail: "60 calls:\n the limit"}))
	require.Equal(t, "0 turn(s), 0 tool call(s), 0 tokens in, 0 out; stopped: unknown", activityLine(&orchestratorv1.AgentActivity{}))
}

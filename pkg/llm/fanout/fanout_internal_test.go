package fanout

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/llm"
)

// Every chunk kind has a wire type of its own, and a chunk keeps what it
// carries on the wire.
func TestWireChunk(t *testing.T) {
	t.Parallel()
	seen := map[llmv1.ChunkType]bool{}
	for _, ct := range []llm.ChunkType{llm.ChunkStart, llm.ChunkText, llm.ChunkToolStart, llm.ChunkToolDelta, llm.ChunkToolEnd, llm.ChunkEnd, llm.ChunkError} {
		w := wireChunk(llm.Chunk{Type: ct}).GetType()
		require.NotEqual(t, llmv1.ChunkType_CHUNK_TYPE_UNSPECIFIED, w, ct)
		require.False(t, seen[w], ct)
		seen[w] = true
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	c := wireChunk(llm.Chunk{Index: 4, Type: llm.ChunkEnd, Usage: &llm.Usage{InputTokens: 10, OutputTokens: 3}, StopReason: "stop",
		ToolCall: &llm.ToolCallDelta{ID: "t1", Name: "grep", ArgumentsDelta: "{}"}, Err: errors.New("boom"), Timestamp: now})
	require.EqualValues(t, 4, c.GetIndex())
	require.EqualValues(t, 10, c.GetUsage().GetInputTokens())
	require.EqualValues(t, 3, c.GetUsage().GetOutputTokens())
	require.Equal(t, "stop", c.GetStopReason())
	require.Equal(t, "grep", c.GetToolCall().GetName())
	require.Equal(t, "boom", c.GetError())
	require.Equal(t, now, c.GetCreateTime().AsTime())
}

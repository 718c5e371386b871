package anthropic_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/anthropic"
)

func newProvider(t *testing.T, h http.HandlerFunc) *anthropic.Provider {
	srv := fake.Server(t, h)
	return anthropic.New(llm.ProviderOptions{APIKey: "test-key", BaseURL: srv.URL, HTTPClient: srv.Client()})
}

func userReq() *llm.Request {
	return &llm.Request{ID: "r1", Model: "fast", System: "be brief", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
		Tools: []llm.Tool{{Name: "read", Description: "read a file", Schema: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}}}
}

func TestComplete(t *testing.T) {
	t.Parallel()
	var body map[string]any
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1/messages", r.URL.Path)
		require.Equal(t, "test-key", r.Header.Get("X-Api-Key"))
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5",
			"content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"tu_1","name":"read","input":{"path":"a.go"}}],
			"stop_reason":"tool_use","usage":{"input_tokens":12,"output_tokens":7}}`)
	})
	r, err := p.Complete(t.Context(), userReq())
	require.NoError(t, err)
	require.Equal(t, "claude-haiku-4-5", body["model"], "the fast alias is resolved")
	require.Equal(t, "Reading.", r.Content)
	require.Equal(t, []llm.ToolCall{{ID: "tu_1", Name: "read", Arguments: `{"path":"a.go"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 12, OutputTokens: 7}, r.Usage)
	require.Equal(t, "tool_use", r.FinishReason)
}

func streamEvents(s *fake.SSE) {
	s.Event("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1}}}`)
	s.Event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	s.Event("ping", `{"type":"ping"}`)
	s.Event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`)
	s.Event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}`)
	s.Event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	s.Event("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu_1","name":"read","input":{}}}`)
	s.Event("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}`)
	s.Event("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"a.go\"}"}}`)
	s.Event("content_block_stop", `{"type":"content_block_stop","index":1}`)
	s.Event("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu_2","name":"read","input":{}}}`)
	s.Event("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"b.go\"}"}}`)
	s.Event("content_block_stop", `{"type":"content_block_stop","index":2}`)
}

func TestStream(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		s := fake.NewSSE(w)
		streamEvents(s)
		s.Event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":15}}`)
		s.Event("message_stop", `{"type":"message_stop"}`)
	})
	acc := llm.NewAccumulator(llm.Anthropic, "m")
	var kinds []llm.ChunkType
	require.NoError(t, p.Stream(t.Context(), userReq(), acc.Handler(func(c llm.Chunk) error {
		kinds = append(kinds, c.Type)
		require.Equal(t, "r1", c.CorrelationID)
		return nil
	})))
	r := acc.Response()
	require.Equal(t, "Hello", r.Content)
	require.Equal(t, []llm.ToolCall{{ID: "tu_1", Name: "read", Arguments: `{"path":"a.go"}`}, {ID: "tu_2", Name: "read", Arguments: `{"path":"b.go"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 25, OutputTokens: 15}, r.Usage)
	require.Equal(t, "tool_use", r.FinishReason)
	require.Equal(t, llm.ChunkStart, kinds[0])
	require.Equal(t, llm.ChunkEnd, kinds[len(kinds)-1])
}

func TestErrors(t *testing.T) {
	t.Parallel()
	c := llm.DefaultClassifier()
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		tier      llm.Tier
		status    int
		retry     time.Duration
		partial   string
		streamErr bool
	}{
		{"429 with Retry-After", func(w http.ResponseWriter, r *http.Request) {
			fake.JSONError(w, 429, "7", `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`)
		}, llm.TierRateLimit, 429, 7 * time.Second, "", false},
		{"500", func(w http.ResponseWriter, r *http.Request) {
			fake.JSONError(w, 500, "", `{"type":"error","error":{"type":"api_error","message":"boom"}}`)
		}, llm.TierDegrading, 500, 0, "", false},
		{"401", func(w http.ResponseWriter, r *http.Request) {
			fake.JSONError(w, 401, "", `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		}, llm.TierUserFixable, 401, 0, "", false},
		{"network drop mid-stream", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			streamEvents(s)
			fake.Drop(w)
		}, llm.TierTransient, 0, 0, "Hello", true},
		{"429 mid-stream", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			streamEvents(s)
			s.Event("error", `{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}`)
		}, llm.TierRateLimit, 429, 0, "Hello", true},
		{"overloaded mid-stream", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			s.Event("error", `{"type":"error","error":{"type":"overloaded_error","message":"overloaded"}}`)
		}, llm.TierDegrading, 503, 0, "", true},
		{"malformed payload", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			streamEvents(s)
			s.Event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{`)
		}, llm.TierPermanent, 0, 0, "Hello", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, tt.handler)
			if !tt.streamErr {
				_, err := p.Complete(t.Context(), userReq())
				require.Error(t, err)
				require.Equal(t, tt.tier, c.Classify(err), err.Error())
				require.Equal(t, tt.status, llm.StatusOf(err))
				require.Equal(t, tt.retry, llm.RetryAfterOf(err))
				require.NotContains(t, err.Error(), "test-key")
			}
			acc := llm.NewAccumulator(llm.Anthropic, "m")
			var last llm.Chunk
			err := p.Stream(t.Context(), userReq(), acc.Handler(func(c llm.Chunk) error { last = c; return nil }))
			require.Error(t, err)
			require.Equal(t, llm.ChunkError, last.Type)
			require.Equal(t, tt.tier, c.Classify(err), err.Error())
			require.Equal(t, tt.status, llm.StatusOf(err))
			r := acc.Response()
			require.True(t, r.Partial)
			require.Equal(t, tt.partial, r.Content)
		})
	}
}

func TestIdleWatchdog(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		s := fake.NewSSE(w)
		streamEvents(s)
		<-r.Context().Done()
	})
	chunks, errs := llm.StreamToChannel(t.Context(), p, userReq(), llm.StreamOptions{Idle: 100 * time.Millisecond})
	acc := llm.NewAccumulator(llm.Anthropic, "m")
	for c := range chunks {
		acc.Add(c)
	}
	err := <-errs
	require.ErrorIs(t, err, llm.ErrStreamIdle)
	require.Equal(t, "Hello", acc.Response().Content)
}

func TestCountTokensAndVerify(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/messages/count_tokens":
			_, _ = io.WriteString(w, `{"input_tokens":42}`)
		case "/v1/models":
			if r.Header.Get("X-Api-Key") != "test-key" {
				fake.JSONError(w, 401, "", `{"type":"error","error":{"type":"authentication_error","message":"bad key"}}`)
				return
			}
			_, _ = io.WriteString(w, `{"data":[{"id":"claude-haiku-4-5","type":"model","display_name":"Haiku","created_at":"2025-01-01T00:00:00Z"}],"has_more":false,"first_id":"a","last_id":"a"}`)
		default:
			http.NotFound(w, r)
		}
	})
	n, err := p.CountTokens(t.Context(), userReq())
	require.NoError(t, err)
	require.Equal(t, 42, n)
	require.NoError(t, p.Verify(t.Context()))
}

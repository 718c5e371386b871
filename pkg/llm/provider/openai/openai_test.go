package openai_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/openai"
)

func newProvider(t *testing.T, h http.HandlerFunc) *openai.Provider {
	srv := fake.Server(t, h)
	return openai.New(llm.ProviderOptions{APIKey: "test-key", BaseURL: srv.URL + "/v1", HTTPClient: srv.Client(), Name: "ollama",
		Aliases: llm.Aliases{llm.AliasDefault: "qwen2.5-coder"}})
}

func userReq() *llm.Request {
	return &llm.Request{ID: "r1", System: "be brief", Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "hi"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c0", Name: "read", Arguments: `{"path":"x"}`}}},
		{Role: llm.RoleTool, ToolCallID: "c0", Content: "contents"},
	}, Tools: []llm.Tool{{Name: "read", Schema: map[string]any{"type": "object"}}}}
}

func TestComplete(t *testing.T) {
	t.Parallel()
	var body map[string]any
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1/chat/completions", r.URL.Path)
		require.Equal(t, "Bearer test-key", r.Header.Get("Authorization"))
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"qwen2.5-coder",
			"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Reading.",
			"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}}]}}],
			"usage":{"prompt_tokens":11,"completion_tokens":6,"total_tokens":17}}`)
	})
	r, err := p.Complete(t.Context(), userReq())
	require.NoError(t, err)
	require.Equal(t, "qwen2.5-coder", body["model"])
	require.Len(t, body["messages"], 4)
	require.Contains(t, body, "max_tokens", "compatible servers get max_tokens")
	require.Equal(t, "Reading.", r.Content)
	require.Equal(t, "ollama", r.Provider)
	require.Equal(t, []llm.ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a.go"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 11, OutputTokens: 6}, r.Usage)
}

func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

func streamStart(s *fake.SSE) {
	s.Event("", chunk(`{"role":"assistant","content":""}`, ""))
	s.Event("", chunk(`{"content":"Hel"}`, ""))
	s.Event("", chunk(`{"content":"lo"}`, ""))
	s.Event("", chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}`, ""))
	s.Event("", chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"q\":"}}]}`, ""))
	s.Event("", chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a.go\"}"}}]}`, ""))
	s.Event("", chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]}`, ""))
}

func TestStreamParallelToolCalls(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		s := fake.NewSSE(w)
		streamStart(s)
		s.Event("", chunk(`{}`, "tool_calls"))
		s.Event("", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}`)
		s.Event("", "[DONE]")
	})
	acc := llm.NewAccumulator("ollama", "m")
	var kinds []llm.ChunkType
	require.NoError(t, p.Stream(t.Context(), userReq(), acc.Handler(func(c llm.Chunk) error { kinds = append(kinds, c.Type); return nil })))
	r := acc.Response()
	require.Equal(t, "Hello", r.Content)
	require.Equal(t, []llm.ToolCall{{ID: "call_a", Name: "read", Arguments: `{"path":"a.go"}`}, {ID: "call_b", Name: "grep", Arguments: `{"q":"x"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 20, OutputTokens: 9}, r.Usage)
	require.Equal(t, "tool_calls", r.FinishReason)
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
			fake.JSONError(w, 429, "7", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		}, llm.TierRateLimit, 429, 7 * time.Second, "", false},
		{"503", func(w http.ResponseWriter, r *http.Request) {
			fake.JSONError(w, 503, "", `{"error":{"message":"overloaded","type":"server_error"}}`)
		}, llm.TierDegrading, 503, 0, "", false},
		{"network drop mid-stream", func(w http.ResponseWriter, r *http.Request) {
			streamStart(fake.NewSSE(w))
			fake.Drop(w)
		}, llm.TierTransient, 0, 0, "Hello", true},
		{"429 mid-stream", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			streamStart(s)
			s.Event("", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		}, llm.TierRateLimit, 429, 0, "Hello", true},
		{"malformed payload", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			streamStart(s)
			s.Event("", `{"id":"c1","choices":[{"delta":`)
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
			acc := llm.NewAccumulator("ollama", "m")
			var last llm.Chunk
			err := p.Stream(t.Context(), userReq(), acc.Handler(func(c llm.Chunk) error { last = c; return nil }))
			require.Error(t, err)
			require.Equal(t, llm.ChunkError, last.Type)
			require.Equal(t, tt.tier, c.Classify(err), err.Error())
			require.Equal(t, tt.status, llm.StatusOf(err))
			require.True(t, acc.Response().Partial)
			require.Equal(t, tt.partial, acc.Response().Content)
		})
	}
}

func TestIdleWatchdogAndVerify(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"qwen2.5-coder","object":"model","created":1,"owned_by":"me"}]}`)
			return
		}
		streamStart(fake.NewSSE(w))
		<-r.Context().Done()
	})
	require.NoError(t, p.Verify(t.Context()))
	chunks, errs := llm.StreamToChannel(t.Context(), p, userReq(), llm.StreamOptions{Idle: 100 * time.Millisecond})
	acc := llm.NewAccumulator("ollama", "m")
	for c := range chunks {
		acc.Add(c)
	}
	require.ErrorIs(t, <-errs, llm.ErrStreamIdle)
	require.Equal(t, "Hello", acc.Response().Content)
}

package gemini_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/gemini"
)

func newProvider(t *testing.T, h http.HandlerFunc) *gemini.Provider {
	srv := fake.Server(t, h)
	return gemini.New(llm.ProviderOptions{APIKey: "test-key", BaseURL: srv.URL, HTTPClient: srv.Client()})
}

func userReq() *llm.Request {
	return &llm.Request{ID: "r1", Model: "powerful", System: "be brief", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
		Tools: []llm.Tool{{Name: "read", Schema: map[string]any{"type": "object"}}}}
}

func TestComplete(t *testing.T) {
	t.Parallel()
	var body map[string]any
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1beta/models/gemini-2.5-pro:generateContent", r.URL.Path)
		require.Equal(t, "test-key", r.Header.Get("X-Goog-Api-Key"))
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"Reading."},{"functionCall":{"name":"read","args":{"path":"a.go"}}}]},"finishReason":"STOP"}],
			"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4,"totalTokenCount":13}}`)
	})
	r, err := p.Complete(t.Context(), userReq())
	require.NoError(t, err)
	require.Contains(t, body, "systemInstruction")
	require.Equal(t, "Reading.", r.Content)
	require.Equal(t, []llm.ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a.go"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 9, OutputTokens: 4}, r.Usage)
	require.Equal(t, "STOP", r.FinishReason)
}

func streamStart(s *fake.SSE) {
	s.Event("", `{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}]}`)
	s.Event("", `{"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]}}]}`)
	s.Event("", `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"f1","name":"read","args":{"path":"a.go"}}},{"functionCall":{"id":"f2","name":"read","args":{"path":"b.go"}}}]}}]}`)
}

func TestStream(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request) {
		require.True(t, strings.HasSuffix(r.URL.Path, ":streamGenerateContent"))
		require.Equal(t, "sse", r.URL.Query().Get("alt"))
		s := fake.NewSSE(w)
		streamStart(s)
		s.Event("", `{"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":8}}`)
	})
	acc := llm.NewAccumulator(llm.Gemini, "m")
	require.NoError(t, p.Stream(t.Context(), userReq(), acc.Handler(nil)))
	r := acc.Response()
	require.Equal(t, "Hello", r.Content)
	require.Equal(t, []llm.ToolCall{{ID: "f1", Name: "read", Arguments: `{"path":"a.go"}`}, {ID: "f2", Name: "read", Arguments: `{"path":"b.go"}`}}, r.ToolCalls)
	require.Equal(t, llm.Usage{InputTokens: 20, OutputTokens: 8}, r.Usage)
	require.False(t, r.Partial)
}

const quota = `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}`

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
		{"429 with retry delay", func(w http.ResponseWriter, r *http.Request) { fake.JSONError(w, 429, "7", quota) },
			llm.TierRateLimit, 429, 7 * time.Second, "", false},
		{"500", func(w http.ResponseWriter, r *http.Request) {
			fake.JSONError(w, 500, "", `{"error":{"code":500,"message":"internal","status":"INTERNAL"}}`)
		}, llm.TierDegrading, 500, 0, "", false},
		{"network drop mid-stream", func(w http.ResponseWriter, r *http.Request) {
			streamStart(fake.NewSSE(w))
			fake.Drop(w)
		}, llm.TierTransient, 0, 0, "Hello", true},
		{"malformed payload", func(w http.ResponseWriter, r *http.Request) {
			s := fake.NewSSE(w)
			streamStart(s)
			s.Event("", `{"candidates":[{"content":`)
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
			acc := llm.NewAccumulator(llm.Gemini, "m")
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

func TestNoKey(t *testing.T) {
	t.Parallel()
	p := gemini.New(llm.ProviderOptions{})
	err := p.Verify(t.Context())
	require.ErrorIs(t, err, llm.ErrNoCredentials)
	require.Equal(t, llm.TierUserFixable, llm.DefaultClassifier().Classify(err))
}

package gate_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/fanout"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/testenv"
)

func TestStreamFanOutAndControlCancel(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	hs := fake.Server(t, func(w http.ResponseWriter, r *http.Request) {
		s := fake.NewSSE(w)
		s.Event("", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"thinking "},"finish_reason":null}]}`)
		<-r.Context().Done()
	})
	reg, err := llm.NewRegistry(llm.Local, local.New(), openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client()}))
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), StreamBus: bus})
	require.NoError(t, err)
	t.Cleanup(g.Close)

	// Every chunk of a generation is published, in order, under its correlation id.
	var mu sync.Mutex
	var got []*llmv1.StreamMessage
	sub, err := fanout.Subscribe(bus, "t1", "gen-1", func(m *llmv1.StreamMessage) { mu.Lock(); got = append(got, m); mu.Unlock() })
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	r := req("plan the work", "architect", false)
	r.ID, r.AgentID = "gen-1", "architect-1"
	acc := llm.NewAccumulator(llm.Local, local.Model)
	require.NoError(t, g.Stream(t.Context(), r, acc.Handler(nil)))
	want := acc.Response().ChunkCount
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == want }, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	for i, m := range got {
		require.Equal(t, "gen-1", m.GetCorrelationId())
		require.Equal(t, "t1", m.GetTenantId())
		require.Equal(t, llm.Local, m.GetSource())
		require.Equal(t, "architect-1", m.GetAgentId())
		require.NotEmpty(t, m.GetModel())
		require.EqualValues(t, i, m.GetChunk().GetIndex())
		require.NotEqual(t, llmv1.ChunkType_CHUNK_TYPE_UNSPECIFIED, m.GetChunk().GetType())
	}
	require.Equal(t, llmv1.ChunkType_CHUNK_TYPE_START, got[0].GetChunk().GetType())
	require.Equal(t, llmv1.ChunkType_CHUNK_TYPE_END, got[len(got)-1].GetChunk().GetType())
	require.NotNil(t, got[len(got)-1].GetChunk().GetUsage())
	mu.Unlock()

	// A control message stops a running generation; the partial answer stays.
	r = req("go", "engineer", false)
	r.Provider, r.ID = llm.OpenAI, "gen-2"
	acc = llm.NewAccumulator(llm.OpenAI, "m")
	done := make(chan error, 1)
	go func() { done <- g.Stream(t.Context(), r, acc.Handler(nil)) }()
	require.Eventually(t, func() bool { return acc.Response().Content == "thinking " }, 5*time.Second, 10*time.Millisecond)
	// Another tenant's cancel for the same correlation id reaches nothing.
	require.NoError(t, fanout.Cancel(bus, "t2", "gen-2", "not yours"))
	require.NoError(t, fanout.Cancel(bus, "t1", "gen-2", "unsafe output"))
	err = <-done
	require.ErrorIs(t, err, fanout.ErrCancelled)
	require.ErrorContains(t, err, "unsafe output")
	require.Equal(t, "thinking ", acc.Response().Content)
	require.True(t, acc.Response().Partial)
}

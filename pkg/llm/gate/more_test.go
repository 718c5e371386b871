package gate_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/breaker"
	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/llm/ratelimit"
	"sylk.dev/sylk/pkg/testenv"
)

// A 429 in the middle of a stream: the handler gets the error chunk and
// keeps the partial answer, the call is not replayed, and the provider is
// paused for every caller.
func TestStream429MidStream(t *testing.T) {
	t.Parallel()
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		s := fake.NewSSE(w)
		s.Event("", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"partial "},"finish_reason":null}]}`)
		s.Event("", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
	}}
	g := newGate(t, testenv.Redis(t), nil, srv, gate.DefaultConfig(), nil)
	acc := llm.NewAccumulator(llm.OpenAI, "m")
	var last llm.Chunk
	err := g.Stream(t.Context(), req("s", "engineer", false), acc.Handler(func(c llm.Chunk) error { last = c; return nil }))
	require.Equal(t, 429, llm.StatusOf(err))
	require.Equal(t, llm.ChunkError, last.Type)
	require.Equal(t, "partial ", acc.Response().Content)
	require.Len(t, srv.order(), 1, "content was delivered, so it is not replayed")
	st, err := g.Limiter().State(t.Context(), llm.OpenAI)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Exceeded, st.State)
}

type tenantKeys struct{ p llm.Provider }

func (tk tenantKeys) Get(_ context.Context, tenant, provider string) (llm.Provider, bool, error) {
	if strings.HasPrefix(tenant, "t-own") && provider == llm.Local {
		return tk.p, true, nil
	}
	return nil, false, nil
}

// A tenant with its own key is served by its own client.
func TestTenantProvider(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	hs := fake.Server(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		require.Equal(t, "Bearer tenant-key", r.Header.Get("Authorization"))
		ok(w, "tenant")
	})
	own := openai.New(llm.ProviderOptions{APIKey: "tenant-key", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client(), Name: llm.Local})
	reg, err := llm.NewRegistry(llm.Local, local.New())
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), Tenants: tenantKeys{own}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	r := req("hi", "engineer", false)
	r.TenantID = "t-own"
	resp, err := g.Complete(t.Context(), r)
	require.NoError(t, err)
	require.Equal(t, "done tenant", resp.Content)
	r.TenantID = "t-other"
	resp, err = g.Complete(t.Context(), r)
	require.NoError(t, err)
	require.Contains(t, resp.Content, "local provider")
	require.EqualValues(t, 1, calls.Load())
}

// The answers of a tenant's own key or endpoint (a 429 with a long
// Retry-After, 5xx) pause and trip that client only: the provider's shared
// state, which every other tenant's calls read, is untouched.
func TestTenantProviderStateIsTheTenants(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	hs := fake.Server(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			fake.JSONError(w, 429, "300", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		fake.JSONError(w, 503, "", `{"error":{"message":"overloaded","type":"server_error"}}`)
	})
	own := openai.New(llm.ProviderOptions{APIKey: "tenant-key", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client(), Name: llm.Local})
	reg, err := llm.NewRegistry(llm.Local, local.New())
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), Tenants: tenantKeys{own},
		Retry: llm.RetryPolicies{llm.TierRateLimit: {}}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ctx := t.Context()
	r := req("hi", "engineer", false)
	r.TenantID = "t-own"
	_, err = g.Complete(ctx, r)
	require.Equal(t, 429, llm.StatusOf(err))
	st, err := g.Limiter().State(ctx, gate.TenantState(llm.Local, "t-own"))
	require.NoError(t, err)
	require.Equal(t, ratelimit.Exceeded, st.State, "the tenant's own state")
	st, err = g.Limiter().State(ctx, llm.Local)
	require.NoError(t, err)
	require.Equal(t, ratelimit.OK, st.State, "the provider's shared state")

	// Another tenant's own key is not paused by the first one's 429.
	r.TenantID = "t-own-too"
	for range 5 {
		_, err = g.Complete(ctx, r)
		require.Equal(t, 503, llm.StatusOf(err))
	}
	cb, err := g.Breakers().State(ctx, llm.Local)
	require.NoError(t, err)
	require.Equal(t, breaker.Closed, cb, "the provider's shared breaker")

	r.TenantID = "t-other"
	resp, err := g.Complete(ctx, r)
	require.NoError(t, err, "another tenant is neither paused nor cut off")
	require.Contains(t, resp.Content, "local provider")
}

// A prompt the provider rejects as too long is fitted into 85% of the
// window and tried once more (P-07).
func TestRefitOnContextOverflow(t *testing.T) {
	t.Parallel()
	var sizes []int
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {}}
	srv.handle = func(w http.ResponseWriter, r *http.Request, text string, n int) {
		sizes = append(sizes, int(r.ContentLength))
		if len(sizes) == 1 {
			fake.JSONError(w, 400, "", `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`)
			return
		}
		ok(w, text)
	}
	hs := fake.Server(t, srv.serve)
	p := openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client(), Name: "ollama", Aliases: llm.Aliases{llm.AliasDefault: "small"}})
	reg, err := llm.NewRegistry("ollama", p)
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), MaxTokens: 64,
		Fitter: &llm.Fitter{Reserve: 512, Summarize: func(_ context.Context, ms []llm.Message) (string, error) { return "earlier talk", nil }}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	r := &llm.Request{Attribution: llm.Attribution{TenantID: "t"}}
	for i := range 70 {
		r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, Content: strings.Repeat("x", 400) + time.Duration(i).String()})
	}
	r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, Content: "last"})
	_, err = g.Complete(t.Context(), r)
	require.NoError(t, err)
	require.Len(t, sizes, 2)
	require.Less(t, sizes[1], sizes[0], "the second try is smaller")
}

// Calls through a tenant's own key are charged to that key's own provider
// budget: they neither use up nor are refused by the configured client's,
// which every other tenant's calls draw on.
func TestTenantProviderBudgetIsTheTenants(t *testing.T) {
	t.Parallel()
	hs := fake.Server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"long"}}],"usage":{"prompt_tokens":10,"completion_tokens":990,"total_tokens":1000}}`))
	})
	own := openai.New(llm.ProviderOptions{APIKey: "tenant-key", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client(), Name: llm.Local})
	reg, err := llm.NewRegistry(llm.Local, local.New())
	require.NoError(t, err)
	cfg := gate.DefaultConfig()
	cfg.ProviderTokens = 500
	g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: testenv.Redis(t), Tenants: tenantKeys{own}, MaxTokens: 64})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ctx := t.Context()
	r := req("hi", "engineer", false)
	r.TenantID = "t-own"
	_, err = g.Complete(ctx, r)
	require.NoError(t, err)
	_, err = g.Complete(ctx, r)
	require.ErrorIs(t, err, budget.ErrProviderBudgetExceeded, "the tenant's key has used up its own provider budget")

	r.TenantID = "t-other"
	resp, err := g.Complete(ctx, r)
	require.NoError(t, err, "the configured client's provider budget is untouched")
	require.Contains(t, resp.Content, "local provider")
}

// A request whose answer limit is enormous is refused by a tenant's budget
// as the most it could cost, not admitted as costing nothing when the
// estimate wraps round.
func TestEnormousAnswerLimitIsOverBudget(t *testing.T) {
	t.Parallel()
	reg, err := llm.NewRegistry(llm.Local, local.New())
	require.NoError(t, err)
	cfg := gate.DefaultConfig()
	cfg.TenantTokens = 1000
	g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	r := req("hi", "engineer", false)
	r.TenantID = "t-huge"
	r.MaxTokens = math.MaxInt
	_, err = g.Complete(t.Context(), r)
	require.ErrorIs(t, err, budget.ErrTenantBudgetExceeded)
}

package embed

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/testenv"
)

var (
	awsID = "AKIA" + "Q7ZP2LK3XW4RT6VN"
	pat   = "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
)

// inputsServer is an embeddings endpoint that keeps the inputs it got and
// reports 7 prompt tokens per input.
func inputsServer(t *testing.T, dims int) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req embeddingRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen = append(seen, req.Input...)
		mu.Unlock()
		data := make([]map[string]any, len(req.Input))
		for i := range req.Input {
			v := make([]float32, dims)
			v[i%dims] = 1
			data[i] = map[string]any{"object": "embedding", "index": i, "embedding": v}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": req.Model, "data": data,
			"usage": map[string]int{"prompt_tokens": 7 * len(req.Input), "total_tokens": 7 * len(req.Input)}})
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

type records struct {
	mu  sync.Mutex
	all []llm.UsageRecord
}

func (r *records) Record(_ context.Context, rec llm.UsageRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec)
	return nil
}

func (r *records) get() []llm.UsageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]llm.UsageRecord(nil), r.all...)
}

// TestEmbeddingsGoThroughTheGate: embedding inputs are redacted by the
// gate's secrets policy and the call is recorded as usage with its tokens
// and cost, attributed to the caller's tenant.
func TestEmbeddingsGoThroughTheGate(t *testing.T) {
	t.Parallel()
	srv, seen := inputsServer(t, 8)
	reg, err := llm.NewRegistry(llm.Local, local.New())
	require.NoError(t, err)
	rec := &records{}
	metrics := prometheus.NewRegistry()
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), Usage: rec, Registerer: metrics})
	require.NoError(t, err)
	t.Cleanup(g.Close)

	o, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "text-embedding-3-small", Dims: 8, Agent: "librarian"})
	require.NoError(t, err)
	o.SetGate(g)
	ctx := identity.NewContext(context.Background(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember})
	vecs, err := o.Embed(ctx, []string{"func deploy() { key := \"" + awsID + "\" }", "push with " + pat, "plain"})
	require.NoError(t, err)
	require.Len(t, vecs, 3)

	got := strings.Join(seen(), "\n")
	require.NotContains(t, got, awsID)
	require.NotContains(t, got, pat)
	require.Contains(t, got, "[REDACTED:aws-access-token]")
	require.Contains(t, got, "plain")
	require.InDelta(t, 1, testutil.ToFloat64(secretsCounter(t, metrics, "redacted", "aws-access-token")), 0)

	require.Eventually(t, func() bool { return len(rec.get()) == 1 }, 10*time.Second, 5*time.Millisecond)
	u := rec.get()[0]
	require.Equal(t, "openai", u.Provider)
	require.Equal(t, "text-embedding-3-small", u.Model)
	require.Equal(t, 21, u.InputTokens)
	require.Equal(t, "ok", u.Outcome)
	require.Equal(t, "t1", u.TenantID)
	require.Equal(t, "librarian", u.AgentType)
	require.InDelta(t, 21*0.02/1e6, u.CostUSD, 1e-12)
}

// TestEmbeddingsWithoutAGateAreRedacted: a client with no gate redacts its
// inputs itself.
func TestEmbeddingsWithoutAGateAreRedacted(t *testing.T) {
	t.Parallel()
	srv, seen := inputsServer(t, 8)
	o, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m", Dims: 8})
	require.NoError(t, err)
	_, err = o.Embed(context.Background(), []string{"token " + pat})
	require.NoError(t, err)
	require.Equal(t, []string{"token [REDACTED:github-fine-grained-pat]"}, seen())
}

func secretsCounter(t *testing.T, reg *prometheus.Registry, action, rule string) prometheus.Counter {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sylk_llm_secrets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["action"] == action && labels["rule"] == rule {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no sylk_llm_secrets_total{action=%q,rule=%q}", action, rule)
	return nil
}

package mesh

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/testenv"
)

// gated is a service that makes model calls (as the Architect, Guide and
// Engineer do): it only keeps the gate the mesh gives it.
type gated struct{ g *gate.Gate }

func (*gated) Register(*grpc.Server)         {}
func (*gated) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *gated) SetLLMGate(g *gate.Gate)     { s.g = g }
func (s *gated) ask(t *testing.T, tenant string) {
	t.Helper()
	_, err := s.g.Complete(t.Context(), &llm.Request{Provider: llm.OpenAI,
		Messages:    []llm.Message{{Role: llm.RoleUser, Content: "draft a plan"}},
		Attribution: llm.Attribution{TenantID: tenant, SessionID: "s1", AgentType: "architect"}})
	require.NoError(t, err)
}

// TestGateUsesTenantKeys: a gate built by the mesh calls an OpenAI-compatible
// server with the calling tenant's stored key, other tenants with the
// configured key, and follows keys stored or deleted afterwards at once
// (the cache TTL is an hour here, so only the change notification can).
func TestGateUsesTenantKeys(t *testing.T) {
	var mu sync.Mutex
	var auths []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m",
			"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"plan"}}],
			"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(fake.Close)
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(auths) == 0 {
			return ""
		}
		return auths[len(auths)-1]
	}

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	prefix := "mesh" + testenv.ID() + "_"
	common := testenv.FromFlags[Common](t,
		"-postgres.dsn", testenv.PostgresDSN(), "-postgres.schema-prefix", prefix,
		"-llm.openai.base-url", fake.URL+"/v1", "-llm.openai.api-key", "sk-server",
		"-llm.credentials.key", base64.StdEncoding.EncodeToString(key), "-llm.credentials.cache-ttl", "1h",
	)
	ctx := t.Context()
	t.Cleanup(func() { testenv.DropSchema(t, Schema(prefix, LLMSchema)) })

	// The archivalist's side: the store behind the credentials API.
	pool, err := OpenSchema(ctx, common.Postgres, prefix, LLMSchema)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := creds.New(common.LLMCredentials, pool)
	require.NoError(t, err)
	_, err = store.Set(ctx, "t-own", llm.OpenAI, creds.Secret{APIKey: "sk-tenant-own"}, "u1")
	require.NoError(t, err)

	svc := &gated{}
	logs := &strings.Builder{}
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	closeLLM, err := attachLLM(ctx, mustLookup(t, Architect), svc, common, app.Deps{
		Redis: testenv.Redis(t), Bus: testenv.NATS(t), Registerer: prometheus.NewRegistry(), Log: log}, log)
	require.NoError(t, err)
	t.Cleanup(closeLLM)
	require.NotNil(t, svc.g)

	svc.ask(t, "t-own")
	require.Equal(t, "Bearer sk-tenant-own", last())
	svc.ask(t, "t-other")
	require.Equal(t, "Bearer sk-server", last(), "a tenant without a stored key uses the configured one")

	// Stored and deleted keys take effect in a running gate.
	_, err = store.Set(ctx, "t-other", llm.OpenAI, creds.Secret{APIKey: "sk-tenant-other"}, "u1")
	require.NoError(t, err)
	eventually(t, func() bool { svc.ask(t, "t-other"); return last() == "Bearer sk-tenant-other" })
	deleted, err := store.Delete(ctx, "t-own", llm.OpenAI)
	require.NoError(t, err)
	require.True(t, deleted)
	eventually(t, func() bool { svc.ask(t, "t-own"); return last() == "Bearer sk-server" })

	logMu.Lock()
	defer logMu.Unlock()
	for _, k := range []string{"sk-tenant-own", "sk-tenant-other", "sk-server"} {
		require.NotContains(t, logs.String(), k, "keys are never logged")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// optionalGated is a service that wants a gate only for a real model.
type optionalGated struct{ gated }

func (optionalGated) NeedsLLMGate(defaultProvider string) bool { return defaultProvider != llm.Local }

// A service that has no use for the offline provider gets no gate (and no
// pool for one) unless a model provider is configured.
func TestGateOnlyWhereItIsUsed(t *testing.T) {
	offline := testenv.FromFlags[Common](t)
	need, err := needsGate(&optionalGated{}, offline)
	require.NoError(t, err)
	require.False(t, need)
	need, err = needsGate(&gated{}, offline)
	require.NoError(t, err)
	require.True(t, need, "a service that takes any gate gets one")
	need, err = needsGate(&optionalGated{}, testenv.FromFlags[Common](t, "-llm.openai.api-key", "sk-x"))
	require.NoError(t, err)
	require.True(t, need)
}

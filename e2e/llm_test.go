package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/llm/usage"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
)

// startLLMMesh is startMesh with a credentials encryption key, returning
// the schema prefix too.
func startLLMMesh(t *testing.T, extra ...string) (*client, string, *redisx.Client) {
	t.Helper()
	id := testenv.ID()
	prefix := "e2e" + id + "_"
	natsPrefix := "e" + id
	redisPrefix := "sylktest:" + id
	cfg := testenv.FromFlags[mesh.DevConfig](t, append([]string{
		"-postgres.dsn", testenv.PostgresDSN(),
		"-postgres.schema-prefix", prefix,
		"-redis.url", testenv.RedisURL(),
		"-redis.prefix", redisPrefix,
		"-nats.url", testenv.NATSURL(),
		"-nats.prefix", natsPrefix,
		"-gateway.listen-address", "127.0.0.1:0",
		"-log.level", "warn",
		// Tests register their temporary directories.
		"-librarian.allowed-roots", os.TempDir(),
		// Task commands run as in production (startMesh).
		"-toolexec.task-init", testenv.TaskInit(t),
	}, extra...)...)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	d, err := mesh.StartDev(ctx, cfg, logs)
	require.NoError(t, err)
	rc, err := redisx.Open(ctx, redisx.Config{URL: testenv.RedisURL(), Prefix: redisPrefix})
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, d.Wait())
		if t.Failed() {
			t.Logf("mesh logs:\n%s", logs.String())
		}
		dropSchemas(t, prefix)
		bus, err := natsx.Connect(context.Background(), natsx.Config{URL: testenv.NATSURL(), Prefix: natsPrefix}, logx.Discard(), "e2e-cleanup")
		if err == nil {
			testenv.CleanupStreams(t, bus)
			bus.Conn.Close()
		}
		keys, _ := rc.Keys(context.Background(), redisPrefix+":*").Result()
		if len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
		_ = rc.Close()
	})
	return &client{t: t, base: d.GatewayURL, key: d.AdminKey, http: &http.Client{Timeout: 30 * time.Second}}, prefix, rc
}

func TestLLMProvidersAndUsage(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	// The fake provider below listens on loopback, which a tenant's base URL
	// may lead to only with -llm.credentials.private-base-urls
	// (TestLLMTenantKeyPlanning shows the refusal without it).
	c, prefix, rc := startLLMMesh(t, "-llm.credentials.key", base64.StdEncoding.EncodeToString(key),
		"-llm.credentials.private-base-urls")

	// Nothing configured: the offline local provider is the default.
	body := c.ok("GET", "/v1/providers", nil)
	provs := body["providers"].([]any)
	require.Len(t, provs, 4)
	local := provs[3].(map[string]any)
	require.Equal(t, "local", local["name"])
	require.Equal(t, true, local["isDefault"])
	require.Equal(t, "offline", local["credentialSource"])
	require.Equal(t, "none", provs[0].(map[string]any)["credentialSource"])

	// A fake Anthropic endpoint that accepts one key.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Api-Key") != "sk-good" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"data":[],"has_more":false,"first_id":"","last_id":""}`)
	}))
	t.Cleanup(fake.Close)

	v := c.ok("POST", "/v1/providers/anthropic:verify", map[string]any{"apiKey": "sk-bad", "baseUrl": fake.URL})
	require.Equal(t, nil, v["valid"], "false is omitted")
	require.Contains(t, v["message"], "Invalid API key for Anthropic")
	require.NotContains(t, v["message"], "sk-bad")

	r := c.do("PUT", "/v1/providers/anthropic/credentials", map[string]any{"apiKey": "sk-bad", "baseUrl": fake.URL})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	require.NotContains(t, r.Raw, "sk-bad")

	set := c.ok("PUT", "/v1/providers/anthropic/credentials", map[string]any{"apiKey": "sk-good", "baseUrl": fake.URL})
	require.NotContains(t, set, "apiKey")
	require.Equal(t, "tenant", set["provider"].(map[string]any)["credentialSource"])
	v = c.ok("POST", "/v1/providers/anthropic:verify", map[string]any{})
	require.Equal(t, true, v["valid"], "the stored key is verified")

	list := c.ok("GET", "/v1/providers", nil)
	require.NotContains(t, c.do("GET", "/v1/providers", nil).Raw, "sk-good", "keys are never returned")
	require.Equal(t, "tenant", list["providers"].([]any)[0].(map[string]any)["credentialSource"])

	r = c.do("PUT", "/v1/providers/local/credentials", map[string]any{"apiKey": "x"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	c.ok("DELETE", "/v1/providers/anthropic/credentials", nil)
	require.Equal(t, http.StatusNotFound, c.do("DELETE", "/v1/providers/anthropic/credentials", nil).Status)

	// Calls through a gate land in the usage report of the caller's tenant.
	ctx := t.Context()
	pool, err := pgstore.Open(ctx, pgstore.Config{DSN: testenv.PostgresDSN(), MaxConns: 2}, mesh.Schema(prefix, mesh.LLMSchema))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reg, err := provider.New(testenv.FromFlags[llm.Config](t))
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: rc, Usage: usage.New(pool)})
	require.NoError(t, err)
	for _, agent := range []string{"architect", "engineer", "engineer"} {
		_, err := g.Complete(ctx, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "plan a /version endpoint"}},
			Attribution: llm.Attribution{TenantID: "default", SessionID: "s1", AgentType: agent}})
		require.NoError(t, err)
	}
	_, err = g.Complete(ctx, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}, Attribution: llm.Attribution{TenantID: "other"}})
	require.NoError(t, err)
	g.Close()

	rep := c.ok("GET", "/v1/usage?groupBy=agent&groupBy=provider", nil)
	require.Equal(t, "USD", rep["currency"])
	require.Equal(t, "3", rep["total"].(map[string]any)["requests"], "only the caller's tenant")
	rows := rep["rows"].([]any)
	require.Len(t, rows, 2)
	require.Equal(t, map[string]any{"agent": "architect", "provider": "local"}, rows[0].(map[string]any)["group"])
	require.Equal(t, "2", rows[1].(map[string]any)["requests"])

	r = c.do("GET", "/v1/usage?groupBy=colour", nil)
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)

	// The Architect drafts a plan through its gate (the local provider's
	// rules); the call is in the report, attributed to the plan's session.
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "llm"})["session"].(map[string]any)
	plan := c.ok("POST", "/v1/"+sess["name"].(string)+"/plans", map[string]any{"request": "fix the crash in the invoice total"})["plan"].(map[string]any)
	require.Equal(t, "local", plan["planner"])
	require.Len(t, plan["dag"].(map[string]any)["nodes"], 4)
	require.Eventually(t, func() bool {
		rep := c.ok("GET", "/v1/usage?groupBy=agent&sessionId="+sess["id"].(string), nil)
		rows, _ := rep["rows"].([]any) // none yet: the call is recorded after the answer
		return len(rows) == 1 && rows[0].(map[string]any)["group"].(map[string]any)["agent"] == "architect" && rows[0].(map[string]any)["requests"] == "1"
	}, 10*time.Second, 50*time.Millisecond, "the planning call is recorded for the session")
}

// writeChatCompletion answers as an OpenAI-compatible chat completions
// endpoint does, with content as the assistant's message.
func writeChatCompletion(w http.ResponseWriter, model, content string) {
	out, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion", "created": 1, "model": model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}})
	_, _ = w.Write(out)
}

// TestLLMTenantKeyPlanning: a tenant stores a key for an OpenAI-compatible
// provider through the API; the Architect's plan drafting for that tenant
// reaches the provider with the stored key, another tenant's with the
// configured one, and no key appears in the mesh's logs or answers.
func TestLLMTenantKeyPlanning(t *testing.T) {
	answer, err := json.Marshal(map[string]any{"title": "version endpoint", "nodes": []map[string]any{
		{"id": "change", "role": "engineer", "name": "add the endpoint", "prompt": "add a /version endpoint"},
		{"id": "check", "role": "tester", "name": "test it", "prompt": "test the /version endpoint", "depends_on": []string{"change"}},
	}})
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string]string{} // request text -> Authorization
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"x"}]}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		for _, req := range []string{"plan for the first tenant", "plan for the second tenant"} {
			if strings.Contains(string(body), req) {
				seen[req] = r.Header.Get("Authorization")
			}
		}
		mu.Unlock()
		writeChatCompletion(w, "m", string(answer))
	}))
	t.Cleanup(fake.Close)

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	c, prefix, _ := startLLMMesh(t, "-llm.credentials.key", base64.StdEncoding.EncodeToString(key),
		"-llm.openai.base-url", fake.URL+"/v1", "-llm.openai.api-key", "sk-server-key")
	c.schemaPrefix = prefix
	other := c.asUser("other", "carol")

	// A tenant's base URL may not lead to the service's own networks: the
	// server's configured one may.
	r := c.do("PUT", "/v1/providers/openai/credentials", map[string]any{"apiKey": "sk-first-tenant-key", "baseUrl": "http://127.0.0.1:1/v1"})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	require.Contains(t, r.Raw, "own networks")
	v := c.ok("POST", "/v1/providers/openai:verify", map[string]any{"apiKey": "sk-x", "baseUrl": "http://169.254.169.254/v1"})
	require.Contains(t, v["message"], "own networks: 169.254.169.254")

	set := c.ok("PUT", "/v1/providers/openai/credentials", map[string]any{"apiKey": "sk-first-tenant-key"})
	require.Equal(t, "tenant", set["provider"].(map[string]any)["credentialSource"])

	for _, x := range []struct {
		c        *client
		req, key string
	}{{c, "plan for the first tenant", "sk-first-tenant-key"}, {other, "plan for the second tenant", "sk-server-key"}} {
		sess := x.c.ok("POST", "/v1/sessions", map[string]any{"displayName": "keys"})["session"].(map[string]any)
		r := x.c.do("POST", "/v1/"+sess["name"].(string)+"/plans", map[string]any{"request": x.req})
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		require.NotContains(t, r.Raw, "sk-", "no key in an answer")
		mu.Lock()
		got := seen[x.req]
		mu.Unlock()
		require.Equal(t, "Bearer "+x.key, got, x.req)
	}
}

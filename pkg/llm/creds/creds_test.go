package creds_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/testenv"
)

func newKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func TestEncryptedAtRest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	s, err := creds.New(creds.Config{Key: newKey()}, pool)
	require.NoError(t, err)
	const secret = "sk-ant-very-secret-value"
	info, err := s.Set(ctx, "t1", "anthropic", creds.Secret{APIKey: secret}, "u1")
	require.NoError(t, err)
	require.Equal(t, "anthropic", info.Provider)

	var raw []byte
	require.NoError(t, pool.QueryRow(ctx, "SELECT ciphertext FROM provider_credentials WHERE tenant_id='t1'").Scan(&raw))
	require.NotContains(t, string(raw), secret, "only ciphertext is stored")

	got, ok, err := s.Get(ctx, "t1", "anthropic")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, secret, got.APIKey)
	_, ok, err = s.Get(ctx, "t2", "anthropic")
	require.NoError(t, err)
	require.False(t, ok, "tenant scoped")

	// A row moved to another tenant does not decrypt (bound by associated data).
	_, err = pool.Exec(ctx, "UPDATE provider_credentials SET tenant_id='t2'")
	require.NoError(t, err)
	_, _, err = s.Get(ctx, "t2", "anthropic")
	require.ErrorIs(t, err, creds.ErrWrongKey)

	other, err := creds.New(creds.Config{Key: newKey()}, pool)
	require.NoError(t, err)
	_, _, err = other.Get(ctx, "t2", "anthropic")
	require.ErrorIs(t, err, creds.ErrWrongKey)

	list, err := s.List(ctx, "t2")
	require.NoError(t, err)
	require.Len(t, list, 1)
	deleted, err := s.Delete(ctx, "t2", "anthropic")
	require.NoError(t, err)
	require.True(t, deleted)
}

func TestNoKeyAndProviders(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	none, err := creds.New(creds.Config{}, pool)
	require.NoError(t, err)
	_, err = none.Set(ctx, "t1", "openai", creds.Secret{APIKey: "x"}, "u")
	require.ErrorIs(t, err, creds.ErrNoKey)
	require.Error(t, creds.Config{Key: "short", VerifyTimeout: 1}.Validate())

	s, err := creds.New(creds.Config{Key: newKey()}, pool)
	require.NoError(t, err)
	_, err = s.Set(ctx, "t1", "openai", creds.Secret{APIKey: "k", BaseURL: "http://127.0.0.1:11434/v1"}, "u")
	require.NoError(t, err)
	ps := creds.NewProviders(s, provider.Build, func(string) llm.ProviderOptions { return llm.ProviderOptions{} }, creds.Config{})
	p, ok, err := ps.Get(ctx, "t1", "openai")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "openai", p.Name())
	_, ok, err = ps.Get(ctx, "t1", "gemini")
	require.NoError(t, err)
	require.False(t, ok)
}

// A tenant's client reaches its stored base URL only when that leads out
// of the service's own networks, or with PrivateBaseURLs; the configured
// base URL is the operator's, and reached wherever it leads.
func TestTenantBaseURLMustBePublic(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}]}`))
	}))
	t.Cleanup(hs.Close)
	s, err := creds.New(creds.Config{Key: newKey()}, pool)
	require.NoError(t, err)
	_, err = s.Set(ctx, "t1", "openai", creds.Secret{APIKey: "k", BaseURL: hs.URL + "/v1"}, "u")
	require.NoError(t, err)
	_, err = s.Set(ctx, "t2", "openai", creds.Secret{APIKey: "k"}, "u")
	require.NoError(t, err)
	configured := func(string) llm.ProviderOptions { return llm.ProviderOptions{BaseURL: hs.URL + "/v1"} }
	complete := func(ps *creds.Providers, tenant string) error {
		p, ok, err := ps.Get(ctx, tenant, "openai")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = p.Complete(ctx, &llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
		return err
	}

	err = complete(creds.NewProviders(s, provider.Build, configured, creds.Config{}), "t1")
	require.ErrorIs(t, err, llm.ErrPrivateAddress)
	require.Equal(t, llm.TierUserFixable, llm.DefaultClassifier().Classify(err), "the tenant must fix its URL: no retry")
	require.NoError(t, complete(creds.NewProviders(s, provider.Build, configured, creds.Config{}), "t2"),
		"the tenant's key on the configured URL")
	require.NoError(t, complete(creds.NewProviders(s, provider.Build, configured, creds.Config{PrivateBaseURLs: true}), "t1"))
}

// TestProvidersFollowChanges: resolvers in two processes (each with its own
// listener and an hour's cache) follow a key stored, replaced and deleted
// in a third, through the change notification.
func TestProvidersFollowChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	s, err := creds.New(creds.Config{Key: newKey()}, pool)
	require.NoError(t, err)
	// The built client's name shows which key it was built with (test only).
	build := func(name string, o llm.ProviderOptions) (llm.Provider, error) {
		o.Name = "built-with:" + o.APIKey
		return provider.Build(name, o)
	}
	var procs []*creds.Providers
	for range 2 {
		ps := creds.NewProviders(s, build, func(string) llm.ProviderOptions { return llm.ProviderOptions{} }, creds.Config{CacheTTL: time.Hour})
		stop, err := ps.Listen(ctx, pool.Config().ConnConfig, nil)
		require.NoError(t, err)
		t.Cleanup(stop)
		procs = append(procs, ps)
	}
	resolved := func(ps *creds.Providers) string {
		p, ok, err := ps.Get(ctx, "t1", llm.OpenAI)
		require.NoError(t, err)
		if !ok {
			return "none"
		}
		return p.Name()
	}
	expect := func(want string) {
		t.Helper()
		for _, ps := range procs {
			require.Eventually(t, func() bool { return resolved(ps) == want }, 10*time.Second, 10*time.Millisecond, want)
		}
	}
	expect("none")
	for _, k := range []string{"k1", "k2"} {
		_, err = s.Set(ctx, "t1", llm.OpenAI, creds.Secret{APIKey: k}, "u")
		require.NoError(t, err)
		expect("built-with:" + k)
	}
	_, err = s.Delete(ctx, "t1", llm.OpenAI)
	require.NoError(t, err)
	expect("none")
}

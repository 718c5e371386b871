package creds_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"

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
	ps := creds.NewProviders(s, provider.Build, func(string) llm.ProviderOptions { return llm.ProviderOptions{} }, 0)
	p, ok, err := ps.Get(ctx, "t1", "openai")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "openai", p.Name())
	_, ok, err = ps.Get(ctx, "t1", "gemini")
	require.NoError(t, err)
	require.False(t, ok)
}

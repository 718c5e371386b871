package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/testenv"
)

// Storing and deleting a provider key is recorded in the audit log, without
// the key.
func TestCredentialsAudited(t *testing.T) {
	t.Parallel()
	_, providers, s := setupServer(t, true)
	pool, schema := testenv.Postgres(t, "audit", migrations.FS(audit.Schema))
	log, err := audit.New(pool, schema)
	require.NoError(t, err)
	s.SetAudit(log)
	_, err = providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "openai", ApiKey: "sk-secret-value", SkipVerify: true})
	require.NoError(t, err)
	_, err = providers.DeleteProviderCredentials(as(t, "admin"), &llmv1.DeleteProviderCredentialsRequest{Provider: "openai"})
	require.NoError(t, err)
	es, _, err := log.List(t.Context(), "t1", audit.Filter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, audit.ActionCredentialsDeleted, es[0].Action)
	require.Equal(t, audit.ActionCredentialsStored, es[1].Action)
	require.Equal(t, "u1", es[1].Actor)
	require.Equal(t, "providers/openai/credentials", es[1].Target)
	require.NotContains(t, es[1].Details, "sk-secret-value")
	for _, v := range es[1].Details {
		require.NotContains(t, v, "secret")
	}
}

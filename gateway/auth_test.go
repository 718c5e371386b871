package gateway

import (
	"context"
	"crypto/sha256"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/testenv"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		k, err := NewKey()
		require.NoError(t, err)
		require.Regexp(t, `^sylk_[A-Za-z0-9]{40}$`, k)
		require.NoError(t, checkKeyFormat(k))
		require.False(t, seen[k])
		seen[k] = true
	}
}

func TestCheckKeyFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"generated form", "sylk_" + strings.Repeat("a1B", 13) + "x", true},
		{"shortest", "sylk_" + strings.Repeat("a", 27), true},
		{"too short", "sylk_" + strings.Repeat("a", 26), false},
		{"wrong prefix", "sk_" + strings.Repeat("a", 40), false},
		{"bad character", "sylk_" + strings.Repeat("a", 30) + " ", false},
		{"too long", "sylk_" + strings.Repeat("a", 300), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkKeyFormat(tt.key)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidKey)
			require.NotContains(t, err.Error(), tt.key, "errors never echo the key")
		})
	}
}

func TestCreateAPIKeyStoresOnlyTheHash(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "auth", migrations.FS("auth"))
	ctx := context.Background()
	key, err := CreateAPIKey(ctx, db, "acme", "alice", identity.RoleMember, "laptop")
	require.NoError(t, err)
	require.Regexp(t, `^sylk_[A-Za-z0-9]{40}$`, key)

	var (
		hash                           []byte
		id, tenant, user, prefix, desc string
		role, tenantName               string
	)
	require.NoError(t, db.QueryRow(ctx, `SELECT k.id, k.tenant_id, k.user_id, k.key_hash, k.prefix, k.description, u.role, t.name
		FROM api_keys k JOIN users u ON u.tenant_id = k.tenant_id AND u.id = k.user_id JOIN tenants t ON t.id = k.tenant_id`).
		Scan(&id, &tenant, &user, &hash, &prefix, &desc, &role, &tenantName))
	sum := sha256.Sum256([]byte(key))
	require.Equal(t, sum[:], hash)
	require.Equal(t, key[:12], prefix)
	require.Equal(t, "acme", tenant)
	require.Equal(t, "alice", user)
	require.Equal(t, "member", role)
	require.Equal(t, "laptop", desc)
	require.Equal(t, "acme", tenantName)

	// The raw key appears in no column of any auth table.
	var hits int
	require.NoError(t, db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM api_keys k WHERE k::text LIKE '%' || $1 || '%' OR encode(k.key_hash, 'escape') LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM users u WHERE u::text LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM tenants t WHERE t::text LIKE '%' || $1 || '%')`, key).Scan(&hits))
	require.Zero(t, hits)

	// A second key for the same user keeps the user's role.
	_, err = CreateAPIKey(ctx, db, "acme", "alice", identity.RoleAdmin, "")
	require.NoError(t, err)
	keys, err := ListAPIKeys(ctx, db, "acme")
	require.NoError(t, err)
	require.Len(t, keys, 2)
	for _, k := range keys {
		require.Equal(t, identity.RoleMember, k.Role)
		require.Nil(t, k.RevokedAt)
	}
	require.NoError(t, EnsureTenantUser(ctx, db, "acme", "erin", identity.RoleViewer))
	require.NoError(t, EnsureTenantUser(ctx, db, "acme", "erin", identity.RoleAdmin))
	require.NoError(t, db.QueryRow(ctx, `SELECT role FROM users WHERE tenant_id = 'acme' AND id = 'erin'`).Scan(&role))
	require.Equal(t, identity.RoleViewer, role)
	other, err := ListAPIKeys(ctx, db, "other")
	require.NoError(t, err)
	require.Empty(t, other)
}

func TestCreateAPIKeyRejectsBadInput(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "auth", migrations.FS("auth"))
	tests := []struct {
		name, tenant, user, role, desc, want string
	}{
		{"empty tenant", "", "u", "admin", "", "tenant"},
		{"bad user", "t", "a b", "admin", "", "user"},
		{"service role", "t", "u", identity.RoleService, "", "role"},
		{"long description", "t", "u", "member", strings.Repeat("x", 600), "description"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CreateAPIKey(context.Background(), db, tt.tenant, tt.user, tt.role, tt.desc)
			require.ErrorContains(t, err, tt.want)
		})
	}
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM api_keys) + (SELECT count(*) FROM users) + (SELECT count(*) FROM tenants)`).Scan(&n))
	require.Zero(t, n, "nothing written for rejected input")
}

func TestEnsureBootstrapKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	key := "sylk_bootstrap_" + strings.Repeat("Z", 30)

	// An existing non-admin user becomes the admin the bootstrap key names.
	require.NoError(t, EnsureTenantUser(ctx, h.db, "default", "admin", identity.RoleViewer))
	require.NoError(t, EnsureBootstrapKey(ctx, h.db, "default", "admin", key))
	require.NoError(t, EnsureBootstrapKey(ctx, h.db, "default", "admin", key), "idempotent")
	var n int
	require.NoError(t, h.db.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE tenant_id = 'default'`).Scan(&n))
	require.Equal(t, 1, n)
	var role string
	require.NoError(t, h.db.QueryRow(ctx, `SELECT role FROM users WHERE tenant_id = 'default' AND id = 'admin'`).Scan(&role))
	require.Equal(t, identity.RoleAdmin, role)

	r := h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"x"}`, bearer(key))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, `"tenantId":"default"`)

	require.ErrorIs(t, EnsureBootstrapKey(ctx, h.db, "default", "mallory", key), ErrKeyOwned)
	require.ErrorIs(t, EnsureBootstrapKey(ctx, h.db, "default", "admin", "sylk_short"), ErrInvalidKey)
	require.ErrorIs(t, EnsureBootstrapKey(ctx, h.db, "default", "admin", "key_"+strings.Repeat("a", 40)), ErrInvalidKey)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	revoked, err := CreateAPIKey(ctx, h.db, "acme", "dave", identity.RoleMember, "to revoke")
	require.NoError(t, err)
	keys, err := ListAPIKeys(ctx, h.db, "acme")
	require.NoError(t, err)
	for _, k := range keys {
		if k.UserID == "dave" {
			require.NoError(t, RevokeAPIKey(ctx, h.db, "acme", k.ID))
			require.NoError(t, RevokeAPIKey(ctx, h.db, "acme", k.ID), "revoking twice is a no-op")
		}
	}
	require.ErrorIs(t, RevokeAPIKey(ctx, h.db, "other", keys[0].ID), ErrKeyNotFound, "revocation is tenant-scoped")

	tests := []struct {
		name    string
		headers []string
		code    int
		reason  string
		msg     string
	}{
		{"no key", nil, http.StatusUnauthorized, ReasonAPIKeyMissing, "missing API key"},
		{"empty bearer", []string{"Authorization: Bearer "}, http.StatusUnauthorized, ReasonAPIKeyMissing, "missing API key"},
		{"wrong key", []string{bearer("sylk_" + strings.Repeat("x", 40))}, http.StatusUnauthorized, ReasonAPIKeyInvalid, "invalid API key"},
		{"malformed key", []string{bearer("hunter2")}, http.StatusUnauthorized, ReasonAPIKeyInvalid, "invalid API key"},
		{"revoked key", []string{bearer(revoked)}, http.StatusUnauthorized, ReasonAPIKeyInvalid, "invalid API key"},
		{"basic scheme", []string{"Authorization: Basic YWxpY2U6cHc="}, http.StatusUnauthorized, ReasonAuthSchemeUnsupported, "unsupported authorization scheme"},
		{"bearer", []string{bearer(h.member)}, http.StatusOK, "", ""},
		{"lower-case bearer", []string{"Authorization: bearer " + h.member}, http.StatusOK, "", ""},
		{"x-api-key", []string{"X-API-Key: " + h.member}, http.StatusOK, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := h.do(t, http.MethodGet, "/v1/sessions", "", tt.headers...)
			if tt.code == http.StatusOK {
				require.Equal(t, http.StatusOK, r.code, r.body)
				return
			}
			requireError(t, r, tt.code, codes.Unauthenticated, tt.reason, tt.msg)
			require.Equal(t, `Bearer realm="sylk"`, r.header.Get("WWW-Authenticate"))
		})
	}
}

func TestUnauthenticatedRequestsNeverReachServices(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"x"}`)
	requireError(t, r, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyMissing, "missing API key")
	require.Empty(t, h.fake.callsOf("CreateSession"))
	require.Equal(t, 1.0, h.counter(t, "sylk_gateway_auth_failures_total", map[string]string{"reason": "missing"}))
}

func TestLastUsedUpdatedAtMostOnceAMinute(t *testing.T) {
	t.Parallel()
	// Every request asks the key store, as a cached key's would once its
	// cache entry expired.
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = 0 })
	ctx := context.Background()
	lastUsed := func() *time.Time {
		var ts *time.Time
		require.NoError(t, h.db.QueryRow(ctx, `SELECT last_used_at FROM api_keys WHERE user_id = 'bob'`).Scan(&ts))
		return ts
	}
	require.Nil(t, lastUsed())
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)).code)
	first := lastUsed()
	require.NotNil(t, first)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)).code)
	require.Equal(t, *first, *lastUsed(), "not rewritten within a minute")

	_, err := h.db.Exec(ctx, `UPDATE api_keys SET last_used_at = now() - interval '2 minutes' WHERE user_id = 'bob'`)
	require.NoError(t, err)
	old := lastUsed()
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)).code)
	require.True(t, lastUsed().After(*old), "rewritten after a minute")
}

func TestRawKeyNeverLeavesTheGateway(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.admin), "X-API-Key: "+h.admin)
	require.Equal(t, http.StatusOK, r.code, r.body)
	calls := h.fake.callsOf("ListSessions")
	require.Len(t, calls, 1)
	keyPattern := regexp.MustCompile(regexp.QuoteMeta(h.admin))
	for k, vs := range calls[0] {
		require.NotEqual(t, "authorization", k)
		require.NotEqual(t, "x-api-key", k)
		for _, v := range vs {
			require.False(t, keyPattern.MatchString(v), "metadata %s carries the key", k)
		}
	}
}

// TestAuthCache: a resolved key is trusted for the cache TTL without asking
// the key store again, so a revocation takes effect within the TTL; an
// unknown or revoked key is never cached.
func TestAuthCache(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = time.Hour })
	ctx := context.Background()
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)).code)
	_, err := h.db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE user_id = 'bob'`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)).code,
		"trusted from the cache within the TTL")

	// The viewer's key is revoked before its first use: refused, and not
	// remembered as valid.
	_, err = h.db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE user_id = 'carol'`)
	require.NoError(t, err)
	for range 2 {
		r := h.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.viewer))
		requireError(t, r, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "invalid API key")
	}
}

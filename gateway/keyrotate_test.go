package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/audit"
)

type rotateJSON struct {
	APIKey     keyJSON `json:"apiKey"`
	Key        string  `json:"key"`
	RotatedKey keyJSON `json:"rotatedKey"`
}

func (h *harness) rotateKey(t *testing.T, id, body, key string) rotateJSON {
	t.Helper()
	r := h.do(t, http.MethodPost, "/v1/keys/"+id+":rotate", body, bearer(key))
	require.Equal(t, http.StatusOK, r.code, r.body)
	var out rotateJSON
	require.NoError(t, json.Unmarshal([]byte(r.body), &out))
	return out
}

// A user rotates their own key: the new key works at once, keeps the
// user, description and lifetime, and the old one stops working at once
// on this gateway although its identity was cached for an hour. The
// rotation is audited, and a revoked key cannot be rotated again.
func TestRotateKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = time.Hour })
	k, key := h.createKey(t, `{"userId":"dave","role":"member","description":"ci","expireTime":"2099-01-01T00:00:00Z"}`)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)).code)

	// Another member's key is not found for bob.
	r := h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":rotate", `{}`, bearer(h.member))
	requireError(t, r, http.StatusNotFound, codes.NotFound, "API_KEY_NOT_FOUND", "not found")

	out := h.rotateKey(t, k.ID, `{}`, key)
	require.NotEqual(t, key, out.Key)
	require.NotEqual(t, k.ID, out.APIKey.ID)
	require.Equal(t, "dave", out.APIKey.UserID)
	require.Equal(t, "ci", out.APIKey.Description)
	newExpiry, err := time.Parse(time.RFC3339, out.APIKey.ExpireTime)
	require.NoError(t, err)
	require.WithinDuration(t, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), newExpiry, time.Minute, "the lifetime is kept")
	require.Equal(t, k.ID, out.RotatedKey.ID)
	require.NotEmpty(t, out.RotatedKey.RevokeTime)

	requireError(t, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)), http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "")
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(out.Key)).code)

	r = h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":rotate", `{}`, bearer(out.Key))
	requireError(t, r, http.StatusBadRequest, codes.FailedPrecondition, ReasonAPIKeyNotActive, "revoked")

	keys := h.listKeys(t, out.Key)
	require.Len(t, keys, 2, "both keys are listed, neither with its secret")
	recs, _ := h.auditRecords(t, "?action="+audit.ActionKeyRotated)
	require.Len(t, recs, 1)
	require.Equal(t, "dave", recs[0].Actor)
	require.Equal(t, "api_keys/"+k.ID, recs[0].Target)
	require.Equal(t, out.APIKey.ID, recs[0].Details["new_key"])
	require.Equal(t, "0s", recs[0].Details["grace_period"])
	require.NotContains(t, recs[0].Details, "key")
}

// With a grace period the old key keeps working until it ends; it cannot
// be rotated twice, and revoking it ends the grace at once.
func TestRotateKeyGracePeriod(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = time.Hour })
	k, key := h.createKey(t, `{"userId":"dave"}`)
	out := h.rotateKey(t, k.ID, `{"gracePeriod":"3600s","expireTime":"2098-01-01T00:00:00Z"}`, h.admin)
	require.Equal(t, "2098-01-01T00:00:00Z", out.APIKey.ExpireTime)
	revoke, err := time.Parse(time.RFC3339Nano, out.RotatedKey.RevokeTime)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), revoke, time.Minute)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)).code, "the old key works in its grace period")
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(out.Key)).code)

	r := h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":rotate", `{}`, bearer(h.admin))
	requireError(t, r, http.StatusBadRequest, codes.FailedPrecondition, ReasonAPIKeyNotActive, "rotated already")

	r = h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":revoke", `{}`, bearer(h.admin))
	require.Equal(t, http.StatusOK, r.code, r.body)
	requireError(t, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)), http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "")
	recs, _ := h.auditRecords(t, "?action="+audit.ActionKeyRevoked)
	require.Len(t, recs, 1, "revoking in the grace period is recorded")
}

// A key whose revoke time lies ahead is cached as valid only until then,
// whatever the cache TTL.
func TestAuthCacheEndsAtRevokeTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = time.Hour })
	k, key := h.createKey(t, `{"userId":"dave"}`)
	_, err := h.db.Exec(context.Background(), `UPDATE api_keys SET revoked_at = now() + interval '1 second' WHERE id = $1`, k.ID)
	require.NoError(t, err)
	_, res, _, err := h.gw.auth.lookup(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, authOK, res)
	require.Eventually(t, func() bool {
		_, res, _, err := h.gw.auth.lookup(context.Background(), key)
		return err == nil && res == authRevoked
	}, 10*time.Second, 50*time.Millisecond, "the key stops working at its revoke time")
}

func TestRotateKeyRejectsBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	k, _ := h.createKey(t, `{"userId":"dave"}`)
	for _, body := range []string{
		`{"gracePeriod":"-1s"}`,
		`{"gracePeriod":"700000s"}`,
		`{"expireTime":"2001-01-01T00:00:00Z"}`,
	} {
		r := h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":rotate", body, bearer(h.admin))
		requireError(t, r, http.StatusBadRequest, codes.InvalidArgument, "INVALID_FIELD", "")
	}
	r := h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":rotate", `{}`, bearer(h.viewer))
	requireError(t, r, http.StatusForbidden, codes.PermissionDenied, ReasonRoleReadOnly, "")
	_, err := h.db.Exec(context.Background(), `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, k.ID)
	require.NoError(t, err)
	r = h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":rotate", `{}`, bearer(h.admin))
	requireError(t, r, http.StatusBadRequest, codes.FailedPrecondition, ReasonAPIKeyNotActive, "expired")
}

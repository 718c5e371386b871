package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/audit"
)

type keyJSON struct {
	ID          string `json:"id"`
	UserID      string `json:"userId"`
	Role        string `json:"role"`
	Prefix      string `json:"prefix"`
	ExpireTime  string `json:"expireTime"`
	RevokeTime  string `json:"revokeTime"`
	Description string `json:"description"`
}

func (h *harness) createKey(t *testing.T, body string) (keyJSON, string) {
	t.Helper()
	r := h.do(t, http.MethodPost, "/v1/keys", body, bearer(h.admin))
	require.Equal(t, http.StatusOK, r.code, r.body)
	var out struct {
		APIKey keyJSON `json:"apiKey"`
		Key    string  `json:"key"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &out))
	require.True(t, strings.HasPrefix(out.Key, out.APIKey.Prefix), "the prefix is the key's start")
	return out.APIKey, out.Key
}

func (h *harness) listKeys(t *testing.T, key string) []keyJSON {
	t.Helper()
	r := h.do(t, http.MethodGet, "/v1/keys", "", bearer(key))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.NotContains(t, r.body, "hash")
	require.NotContains(t, r.body, `"key"`)
	var out struct {
		APIKeys []keyJSON `json:"apiKeys"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &out))
	return out.APIKeys
}

type auditJSON struct {
	Sequence string            `json:"sequence"`
	Actor    string            `json:"actor"`
	Action   string            `json:"action"`
	Target   string            `json:"target"`
	Details  map[string]string `json:"details"`
	Hash     string            `json:"hash"`
}

func (h *harness) auditRecords(t *testing.T, query string) ([]auditJSON, string) {
	t.Helper()
	r := h.do(t, http.MethodGet, "/v1/audit"+query, "", bearer(h.admin))
	require.Equal(t, http.StatusOK, r.code, r.body)
	var out struct {
		Records       []auditJSON `json:"records"`
		NextPageToken string      `json:"nextPageToken"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &out))
	return out.Records, out.NextPageToken
}

// An admin creates a key for a user of the tenant; the key works, is
// listed (never with its hash), and once revoked stops working at once on
// this gateway, though its identity is cached for an hour.
func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = time.Hour })
	k, key := h.createKey(t, `{"userId":"dave","role":"member","description":"ci","expireTime":"2099-01-01T00:00:00Z"}`)
	require.Equal(t, "dave", k.UserID)
	require.Equal(t, "member", k.Role)
	require.Equal(t, "2099-01-01T00:00:00Z", k.ExpireTime)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)).code)

	all := h.listKeys(t, h.admin)
	require.Len(t, all, 4, "admins see the tenant's keys")
	own := h.listKeys(t, key)
	require.Len(t, own, 1, "others see their own")
	require.Equal(t, k.ID, own[0].ID)

	// A member cannot revoke another's key: it is not found for them.
	r := h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":revoke", `{}`, bearer(h.member))
	requireError(t, r, http.StatusNotFound, codes.NotFound, "API_KEY_NOT_FOUND", "not found")
	// Nor create keys.
	r = h.do(t, http.MethodPost, "/v1/keys", `{"userId":"eve"}`, bearer(h.member))
	requireError(t, r, http.StatusForbidden, codes.PermissionDenied, ReasonAdminRoleRequired, "only admins")

	r = h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":revoke", `{}`, bearer(h.admin))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "revokeTime")
	r = h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key))
	requireError(t, r, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "invalid")
	// Revoking again changes nothing and records nothing.
	require.Equal(t, http.StatusOK, h.do(t, http.MethodPost, "/v1/keys/"+k.ID+":revoke", `{}`, bearer(h.admin)).code)

	recs, _ := h.auditRecords(t, "?action="+audit.ActionKeyRevoked)
	require.Len(t, recs, 1)
	require.Equal(t, "alice", recs[0].Actor)
	require.Equal(t, "api_keys/"+k.ID, recs[0].Target)
	recs, _ = h.auditRecords(t, "?action="+audit.ActionKeyCreated)
	require.Len(t, recs, 1)
	require.Equal(t, map[string]string{"user": "dave", "role": "member", "prefix": k.Prefix, "expire_time": "2099-01-01T00:00:00Z"}, recs[0].Details)
	require.NotContains(t, fmt.Sprint(recs), key[keyDisplayLen:], "the audit log holds no key")
}

func TestCreateKeyRejectsBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, body := range []string{
		`{"userId":"dave","expireTime":"2001-01-01T00:00:00Z"}`,
		`{"userId":""}`,
		`{"userId":"dave","role":"root"}`,
	} {
		r := h.do(t, http.MethodPost, "/v1/keys", body, bearer(h.admin))
		requireError(t, r, http.StatusBadRequest, codes.InvalidArgument, "INVALID_FIELD", "")
	}
}

// An expired key is refused, with a message that says so.
func TestExpiredKeyRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = 0 })
	k, key := h.createKey(t, `{"userId":"dave","expireTime":"2099-01-01T00:00:00Z"}`)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)).code)
	_, err := h.db.Exec(context.Background(), `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, k.ID)
	require.NoError(t, err)
	r := h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key))
	requireError(t, r, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "expired")
	require.Equal(t, 1.0, h.counter(t, "sylk_gateway_auth_failures_total", map[string]string{"reason": "expired"}))
}

// A cached valid key is never trusted beyond its expiry.
func TestAuthCacheEndsAtExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &authenticator{ttl: time.Hour, now: func() time.Time { return now }}
	expiry := now.Add(time.Minute)
	a.remember("h", knownKey{res: authOK, keyID: "k"}, &expiry)
	_, ok := a.cached("h")
	require.True(t, ok)
	now = now.Add(time.Minute)
	_, ok = a.cached("h")
	require.False(t, ok, "the key expired")
}

// Unknown keys are remembered for the cache TTL: the key store is not
// asked again, so a key created meanwhile works only after it.
func TestUnknownKeysCachedNegatively(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AuthCacheTTL = time.Hour })
	key, err := NewKey()
	require.NoError(t, err)
	requireError(t, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)), http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "")
	require.NoError(t, EnsureBootstrapKey(context.Background(), h.db, "acme", "root", key))
	requireError(t, h.do(t, http.MethodGet, "/v1/sessions", "", bearer(key)), http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "")
}

// The audit API lists and verifies the tenant's chain; editing or deleting
// a record in SQL is found.
func TestAuditAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, u := range []string{"u1", "u2", "u3"} {
		h.createKey(t, `{"userId":"`+u+`"}`)
	}
	// Denials are recorded: a viewer's write, a member's admin call.
	requireError(t, h.do(t, http.MethodPost, "/v1/sessions", `{}`, bearer(h.viewer)), http.StatusForbidden, codes.PermissionDenied, ReasonRoleReadOnly, "")
	requireError(t, h.do(t, http.MethodGet, "/v1/audit", "", bearer(h.member)), http.StatusForbidden, codes.PermissionDenied, ReasonAdminRoleRequired, "")
	recs, _ := h.auditRecords(t, "?action="+audit.ActionPermissionDenied)
	require.Len(t, recs, 2)
	require.Equal(t, "bob", recs[0].Actor)
	require.Equal(t, "GET /v1/audit", recs[0].Target)
	require.Equal(t, ReasonAdminRoleRequired, recs[0].Details["reason"])
	require.Equal(t, "carol", recs[1].Actor)
	require.Equal(t, ReasonRoleReadOnly, recs[1].Details["reason"])

	page, next := h.auditRecords(t, "?pageSize=2")
	require.Len(t, page, 2)
	require.Equal(t, "5", page[0].Sequence)
	page, next = h.auditRecords(t, "?pageSize=2&pageToken="+next)
	require.Equal(t, "3", page[0].Sequence)
	page, next = h.auditRecords(t, "?pageSize=2&pageToken="+next)
	require.Len(t, page, 1)
	require.Empty(t, next)
	requireError(t, h.do(t, http.MethodGet, "/v1/audit?pageToken=bogus", "", bearer(h.admin)), http.StatusBadRequest, codes.InvalidArgument, ReasonInvalidPageToken, "")
	recs, _ = h.auditRecords(t, "?actor=carol&startTime=2000-01-01T00:00:00Z")
	require.Len(t, recs, 1)

	verify := func() map[string]any {
		r := h.do(t, http.MethodPost, "/v1/audit:verify", `{}`, bearer(h.admin))
		require.Equal(t, http.StatusOK, r.code, r.body)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.body), &out))
		return out
	}
	out := verify()
	require.Equal(t, true, out["intact"], out)
	require.Equal(t, "5", out["recordsChecked"])
	requireError(t, h.do(t, http.MethodPost, "/v1/audit:verify", `{}`, bearer(h.member)), http.StatusForbidden, codes.PermissionDenied, ReasonAdminRoleRequired, "")

	tbl := pgx.Identifier{h.auditSchema}.Sanitize() + ".records"
	_, err := h.auditDB.Exec(context.Background(), `UPDATE `+tbl+` SET actor = 'mallory' WHERE seq = 2`)
	require.NoError(t, err)
	out = verify()
	require.Equal(t, nil, out["intact"], out)
	require.Equal(t, map[string]any{"sequence": "2", "recordId": out["firstBreak"].(map[string]any)["recordId"], "problem": "AUDIT_PROBLEM_ALTERED"}, out["firstBreak"])
	require.Equal(t, "1", out["recordsChecked"])

	_, err = h.auditDB.Exec(context.Background(), `DELETE FROM `+tbl+` WHERE seq = 2`)
	require.NoError(t, err)
	out = verify()
	require.Equal(t, map[string]any{"sequence": "2", "problem": "AUDIT_PROBLEM_MISSING"}, out["firstBreak"])
}

// Failed authentications are counted per client address and per key
// prefix in Redis; past the limit, requests get 429 with Retry-After and a
// message saying when to retry, while a cached valid key goes on working.
func TestFailedAuthenticationsThrottled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) {
		c.AuthFailAddrLimit, c.AuthFailKeyLimit, c.AuthFailWindow = 3, 2, time.Minute
		c.AuthCacheTTL = time.Hour
	})
	serve := func(addr, key string) response {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "/v1/sessions", nil)
		require.NoError(t, err)
		req.RemoteAddr = addr
		req.Header.Set("Authorization", "Bearer "+key)
		w := &capture{header: http.Header{}}
		h.gw.Handler().ServeHTTP(w, req)
		return response{code: w.code, header: w.header, body: w.body.String()}
	}
	require.Equal(t, http.StatusOK, serve("10.0.0.1:1000", h.admin).code, "the admin's key is cached valid")

	// Per address: three different bad keys from one address.
	for i := range 3 {
		r := serve("10.0.0.1:1000", fmt.Sprintf("sylk_guess%d%s", i, strings.Repeat("x", 30)))
		require.Equal(t, http.StatusUnauthorized, r.code)
	}
	r := serve("10.0.0.1:2000", "sylk_guess9"+strings.Repeat("x", 30))
	b := requireError(t, r, http.StatusTooManyRequests, codes.ResourceExhausted, ReasonAuthThrottled, "retry after")
	require.NotEmpty(t, r.header.Get("Retry-After"))
	require.Equal(t, r.header.Get("Retry-After"), b.Metadata["retry_after_seconds"])
	require.Equal(t, http.StatusOK, serve("10.0.0.1:1000", h.admin).code, "a cached valid key is not throttled")
	require.Equal(t, http.StatusUnauthorized, serve("10.0.0.2:1000", "sylk_other"+strings.Repeat("y", 30)).code, "other addresses are not")

	// Per key prefix: guesses of one key from many addresses.
	guess := "sylk_AbCdEfG"
	for i := range 2 {
		r := serve(fmt.Sprintf("10.1.0.%d:1", i), guess+strings.Repeat("z", 30-i))
		require.Equal(t, http.StatusUnauthorized, r.code)
	}
	r = serve("10.1.0.9:1", guess+strings.Repeat("q", 30))
	requireError(t, r, http.StatusTooManyRequests, codes.ResourceExhausted, ReasonAuthThrottled, "")
	require.Equal(t, 2.0, h.counter(t, "sylk_gateway_auth_failures_total", map[string]string{"reason": "throttled"}))
}

// capture is a ResponseWriter for calling the handler directly.
type capture struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

func (c *capture) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.body.Write(b)
}

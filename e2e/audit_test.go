package e2e

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/testenv"
)

// The services record security-relevant actions in the tenant's audit
// chain; admins read it and verify it, and a record edited or deleted in
// SQL is found. Keys are created, listed, revoked and rotated through the
// API.
func TestAuditAndKeys(t *testing.T) {
	c := startMesh(t)

	repo := c.ok("POST", "/v1/repositories?index=false", map[string]any{"path": fixtureRepo(t), "displayName": "fixture"})["repository"].(map[string]any)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "audit"})["session"].(map[string]any)
	name, sid := sess["name"].(string), sess["id"].(string)
	plan := c.ok("POST", "/v1/"+name+"/plans", map[string]any{"request": "add a /version endpoint to the gateway"})["plan"].(map[string]any)
	approved := c.ok("POST", "/v1/"+plan["name"].(string)+":approve", map[string]any{})
	c.waitRun(approved["run"].(map[string]any)["name"].(string))
	long := c.createRun(map[string]any{"sessionId": sid, "dag": map[string]any{"nodes": []any{map[string]any{"id": "z", "command": "sleep 30"}}}})
	c.ok("POST", "/v1/"+long+":cancel", map[string]any{})

	// A viewer's key, made by the admin; the viewer's write is denied.
	created := c.ok("POST", "/v1/keys", map[string]any{"userId": "val", "role": "viewer", "expireTime": "2099-01-01T00:00:00Z"})
	viewerKey := created["key"].(string)
	keyID := created["apiKey"].(map[string]any)["id"].(string)
	require.Equal(t, http.StatusForbidden, c.doKey(viewerKey, "POST", "/v1/sessions", map[string]any{}).Status)
	own := c.doKey(viewerKey, "GET", "/v1/keys", nil)
	require.Equal(t, http.StatusOK, own.Status, own.Raw)
	require.Len(t, own.Body["apiKeys"], 1, "a viewer lists its own keys")
	require.NotContains(t, own.Raw, viewerKey)
	c.ok("POST", "/v1/keys/"+keyID+":revoke", map[string]any{})
	require.Equal(t, http.StatusUnauthorized, c.doKey(viewerKey, "GET", "/v1/sessions", nil).Status, "revoked at once")

	// A member rotates their own key: the new one works, the old one stops.
	member := c.ok("POST", "/v1/keys", map[string]any{"userId": "mia", "role": "member"})
	oldKey, oldID := member["key"].(string), member["apiKey"].(map[string]any)["id"].(string)
	rotated := c.doKey(oldKey, "POST", "/v1/keys/"+oldID+":rotate", map[string]any{})
	require.Equal(t, http.StatusOK, rotated.Status, rotated.Raw)
	newKey := rotated.Body["key"].(string)
	require.Equal(t, "mia", rotated.Body["apiKey"].(map[string]any)["userId"])
	require.Equal(t, http.StatusOK, c.doKey(newKey, "GET", "/v1/sessions", nil).Status)
	require.Equal(t, http.StatusUnauthorized, c.doKey(oldKey, "GET", "/v1/sessions", nil).Status, "rotated without grace: revoked at once")

	recs := c.ok("GET", "/v1/audit?pageSize=100", nil)["records"].([]any)
	byAction := map[string][]map[string]any{}
	for _, r := range recs {
		m := r.(map[string]any)
		byAction[m["action"].(string)] = append(byAction[m["action"].(string)], m)
	}
	require.Equal(t, repo["name"], byAction[audit.ActionRepositoryRegistered][0]["target"])
	require.Equal(t, plan["name"], byAction[audit.ActionPlanApproved][0]["target"])
	require.Len(t, byAction[audit.ActionRunCreated], 2, "the plan's run and the direct one")
	require.Equal(t, long, byAction[audit.ActionRunCancelled][0]["target"])
	targets := func(action string) []any {
		var out []any
		for _, r := range byAction[action] {
			out = append(out, r["target"])
		}
		return out
	}
	require.Equal(t, []any{"api_keys/" + oldID, "api_keys/" + keyID}, targets(audit.ActionKeyCreated), "newest first")
	require.Equal(t, "api_keys/"+keyID, byAction[audit.ActionKeyRevoked][0]["target"])
	require.Equal(t, "api_keys/"+oldID, byAction[audit.ActionKeyRotated][0]["target"])
	require.Equal(t, "mia", byAction[audit.ActionKeyRotated][0]["actor"])
	require.Equal(t, "val", byAction[audit.ActionPermissionDenied][0]["actor"])
	require.Equal(t, "admin", byAction[audit.ActionPlanApproved][0]["actor"])

	v := c.ok("POST", "/v1/audit:verify", map[string]any{})
	require.Equal(t, true, v["intact"], v)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresDSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	tbl := pgx.Identifier{mesh.Schema(c.schemaPrefix, audit.Schema)}.Sanitize() + ".records"
	_, err = conn.Exec(ctx, `UPDATE `+tbl+` SET details = '{}' WHERE seq = 3`)
	require.NoError(t, err)
	v = c.ok("POST", "/v1/audit:verify", map[string]any{})
	require.Equal(t, "AUDIT_PROBLEM_ALTERED", v["firstBreak"].(map[string]any)["problem"], v)
	require.Equal(t, "3", v["firstBreak"].(map[string]any)["sequence"])
	_, err = conn.Exec(ctx, `DELETE FROM `+tbl+` WHERE seq = 3`)
	require.NoError(t, err)
	v = c.ok("POST", "/v1/audit:verify", map[string]any{})
	require.Equal(t, "AUDIT_PROBLEM_MISSING", v["firstBreak"].(map[string]any)["problem"], v)
}

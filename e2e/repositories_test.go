package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/testenv"
)

// register registers the directory dir with the Librarian for c's tenant
// (or finds it registered already) and returns the repository's name, which
// runs and reviews give as their repository: a path is never one. It
// registers the default way, the call answering at once with the index
// running as an operation, and follows that operation until the repository
// is indexed.
func (c *client) register(dir string) string {
	c.t.Helper()
	resp := c.do("POST", "/v1/repositories", map[string]any{"path": dir})
	if resp.Status == http.StatusOK {
		op := c.waitOperation(resp.Body["operation"].(string))
		require.Zero(c.t, op.errCode, "indexing %s: %s", dir, op.errMessage)
		return resp.Body["repository"].(map[string]any)["name"].(string)
	}
	require.Equal(c.t, http.StatusConflict, resp.Status, resp.Raw)
	resolved, err := filepath.EvalSymlinks(dir)
	require.NoError(c.t, err)
	for _, r := range c.ok("GET", "/v1/repositories?pageSize=200", nil)["repositories"].([]any) {
		if repo := r.(map[string]any); repo["path"] == resolved {
			if op, _ := repo["operation"].(string); op != "" {
				c.waitOperation(op)
			}
			return repo["name"].(string)
		}
	}
	c.t.Fatalf("%s is registered, yet not listed", dir)
	return ""
}

// registerIndexed registers the repository body describes the default way
// (the call answers at once with an operation), follows the operation to
// its end and returns the indexed repository.
func (c *client) registerIndexed(body map[string]any) map[string]any {
	c.t.Helper()
	start := time.Now()
	resp := c.ok("POST", "/v1/repositories", body)
	require.Less(c.t, time.Since(start), 10*time.Second, "registering answers at once")
	opName, _ := resp["operation"].(string)
	require.NotEmpty(c.t, opName, "registering answers with its operation: %v", resp)
	op := c.waitOperation(opName)
	require.Zero(c.t, op.errCode, op.errMessage)
	require.Equal(c.t, "INDEX_STATE_READY", op.repository["indexState"])
	return op.repository
}

// waitOperation polls an operation until it is done, for at most five
// minutes, and returns it as it ended.
func (c *client) waitOperation(name string) opSnapshot {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s := c.operation(name)
		if s.done {
			return s
		}
		require.True(c.t, time.Now().Before(deadline), "operation %s did not finish: %+v", name, s)
		<-tick.C
	}
}

// asRole is asUser with a role of choice.
func (c *client) asRole(tenant, user string, role string) *client {
	c.t.Helper()
	ctx := context.Background()
	pool, err := mesh.OpenSchema(ctx, pgstore.Config{DSN: testenv.PostgresDSN(), MaxConns: 1}, c.schemaPrefix, "auth")
	require.NoError(c.t, err)
	defer pool.Close()
	key, err := gateway.CreateAPIKey(ctx, pool, tenant, user, role, "e2e "+user)
	require.NoError(c.t, err)
	other := *c
	other.key = key
	return &other
}

// Repositories stay their tenant's: tenant B's member cannot run on tenant
// A's repository, named or by its path, and learns nothing of the
// filesystem (the same answer for a path that does not exist); B's admin
// registers nothing outside B's roots, /etc and a symlink leading out of
// them included; and another user's session is not found when its runs are
// paused, resumed or cancelled.
func TestRepositoriesStayTheirTenants(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	c := startMesh(t, "-librarian.allowed-roots", "tenant-a="+rootA+",tenant-b="+rootB)
	adminA, memberB, adminB := c.asRole("tenant-a", "alice", identity.RoleAdmin), c.asUser("tenant-b", "bob"),
		c.asRole("tenant-b", "bea", identity.RoleAdmin)

	dirA := filepath.Join(rootA, "secrets")
	require.NoError(t, os.Rename(pyRepo(t, map[string]string{"creds.txt": "tenant a's\n"}), dirA))
	nameA := adminA.register(dirA)
	run := adminA.waitRun(adminA.createRun(map[string]any{"repository": nameA, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "a", "command": "cat creds.txt"}}}}))
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"])
	require.Equal(t, nameA, run["repository"], "a run shows the repository's name, not its directory")

	dag := map[string]any{"nodes": []any{map[string]any{"id": "a", "command": "cat creds.txt"}}}
	var message string
	for _, ref := range []string{nameA, strings.TrimPrefix(nameA, "repositories/"), dirA, filepath.Join(rootA, "no-such-directory"),
		"file://" + dirA, "/etc", "secrets"} {
		resp := memberB.do("POST", "/v1/runs", map[string]any{"repository": ref, "dag": dag})
		require.Equal(t, http.StatusNotFound, resp.Status, "%s: %s", ref, resp.Raw)
		if message == "" {
			message = resp.Raw
		}
		require.Equal(t, message, resp.Raw, "the same answer for %q", ref)
		resp = memberB.do("POST", "/v1/reviews", map[string]any{"repository": ref, "baseRef": "HEAD"})
		require.Equal(t, http.StatusNotFound, resp.Status, "review of %s: %s", ref, resp.Raw)
	}
	require.NotContains(t, message, rootA)
	// Even tenant A names its repository, not its directory.
	require.Equal(t, http.StatusNotFound, adminA.do("POST", "/v1/runs", map[string]any{"repository": dirA, "dag": dag}).Status)

	// B's admin registers under B's roots only.
	require.NoError(t, os.Symlink("/etc", filepath.Join(rootB, "etc")))
	require.NoError(t, os.Symlink(dirA, filepath.Join(rootB, "theirs")))
	var refusal string
	for _, dir := range []string{"/etc", filepath.Join(rootB, "etc"), dirA, filepath.Join(rootB, "theirs"), filepath.Join(rootA, "missing")} {
		resp := adminB.do("POST", "/v1/repositories", map[string]any{"path": dir})
		require.Equal(t, http.StatusForbidden, resp.Status, "%s: %s", dir, resp.Raw)
		require.Contains(t, resp.Raw, "PATH_NOT_ALLOWED")
		require.NotContains(t, resp.Raw, "/etc/", dir)
		if dir == dirA {
			refusal = resp.Raw
		}
	}
	missing := adminB.do("POST", "/v1/repositories", map[string]any{"path": filepath.Join(rootA, "secrets-not-here")})
	require.Equal(t, strings.ReplaceAll(refusal, "secrets", "secrets-not-here"), missing.Raw, "the same words whether it exists or not")
	resp := adminB.do("POST", "/v1/repositories", map[string]any{"url": "file://" + dirA})
	require.Equal(t, http.StatusForbidden, resp.Status, resp.Raw)
	require.Empty(t, adminB.ok("GET", "/v1/repositories", nil)["repositories"])

	// Another user's session: not found, and its runs go on.
	sess := adminA.ok("POST", "/v1/sessions", map[string]any{})["session"].(map[string]any)
	memberA := c.asUser("tenant-a", "amy")
	for _, act := range []string{"pause", "resume", "cancel"} {
		for _, who := range []*client{memberA, memberB} {
			resp := who.do("POST", "/v1/"+sess["name"].(string)+"/runs:"+act, map[string]any{})
			require.Equal(t, http.StatusNotFound, resp.Status, "%s: %s", act, resp.Raw)
		}
	}
	adminA.ok("POST", "/v1/"+sess["name"].(string)+"/runs:pause", map[string]any{})
}

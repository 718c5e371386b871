package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// apiKeyTransport sends an API key with every request, as an editor's MCP
// configuration does.
type apiKeyTransport struct{ key string }

func (a apiKeyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.key)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects the MCP SDK's client to the gateway's /mcp.
func (c *client) mcpSession() (*mcp.ClientSession, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v0"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.base + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: apiKeyTransport{key: c.key}, Timeout: 90 * time.Second}}, nil)
	if err == nil {
		c.t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// callTool calls a tool and returns its result, its structured output and
// its text.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	out, _ := res.StructuredContent.(map[string]any)
	return res, out, strings.Join(text, "\n")
}

// TestMCP drives the MCP endpoint with the SDK's client: the tools over a
// registered repository, a question to the Guide, a plan to a run, the
// repository resources, and the edge: a wrong key is refused and another
// tenant sees nothing of this one's.
func TestMCP(t *testing.T) {
	c := startMesh(t)
	// The fixture as a git work tree: an approved plan runs on a commit.
	dir := fixtureRepo(t)
	gitCmd(t, dir, "init", "--quiet")
	gitCmd(t, dir, "add", "-A")
	gitCmd(t, dir, "commit", "--quiet", "-m", "init")
	repo := c.register(dir)
	c.ok("POST", "/v1/"+repo+":index", map[string]any{})
	id := strings.TrimPrefix(repo, "repositories/")
	cs, err := c.mcpSession()
	require.NoError(t, err)

	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 13)

	res, out, text := callTool(t, cs, "search_code", map[string]any{"query": "ComputeInvoiceTotal", "repository": repo})
	require.False(t, res.IsError, text)
	hits := out["hits"].([]any)
	require.NotEmpty(t, hits)
	require.Equal(t, "billing/invoice.go", hits[0].(map[string]any)["path"])
	require.Contains(t, text, "billing/invoice.go")

	res, out, text = callTool(t, cs, "get_symbol", map[string]any{"repository": id, "symbol": "ComputeInvoiceTotal"})
	require.False(t, res.IsError, text)
	require.Equal(t, "billing/invoice.go", out["path"])
	symbol := out["id"].(string)
	res, out, text = callTool(t, cs, "references", map[string]any{"repository": repo, "symbol": symbol, "direction": "out"})
	require.False(t, res.IsError, text)
	require.Equal(t, "out", out["direction"])
	for tool, args := range map[string]map[string]any{"search_history": {"query": "invoice"}, "search_docs": {"query": "fixture"}} {
		res, out, text = callTool(t, cs, tool, args)
		require.False(t, res.IsError, "%s: %s", tool, text)
		require.NotNil(t, out["hits"], tool)
	}
	res, _, text = callTool(t, cs, "get_symbol", map[string]any{"repository": id, "symbol": "NoSuchThing"})
	require.True(t, res.IsError)
	require.Contains(t, text, "NOT_FOUND")

	// A question goes through the Guide to the Librarian and comes back
	// answered, citing the code.
	res, out, text = callTool(t, cs, "ask", map[string]any{"question": "where is the function ComputeInvoiceTotal defined in the code?",
		"repository": repo})
	require.False(t, res.IsError, text)
	require.Equal(t, "answered", out["outcome"], text)
	require.Equal(t, "librarian", out["agent"])
	require.Contains(t, out["answer"], "billing/invoice.go")
	session := out["session"].(string)
	require.True(t, strings.HasPrefix(session, "sessions/"), session)

	// A plan, approved into a run whose status the tools follow.
	res, out, text = callTool(t, cs, "create_plan", map[string]any{"request": "add a comment to README.md", "session": session})
	require.False(t, res.IsError, text)
	plan := out["name"].(string)
	require.Equal(t, "PLAN_STATE_AWAITING_APPROVAL", out["state"])
	steps := len(out["nodes"].([]any))
	// Revised before it is approved: offline, "add a step" adds one.
	res, out, text = callTool(t, cs, "revise_plan", map[string]any{"plan": plan, "feedback": "add a step: update the changelog"})
	require.False(t, res.IsError, text)
	require.EqualValues(t, 2, out["version"])
	require.Len(t, out["nodes"], steps+1)
	require.Contains(t, text, "approve_plan")
	res, out, text = callTool(t, cs, "approve_plan", map[string]any{"plan": plan})
	require.False(t, res.IsError, text)
	run := out["run"].(map[string]any)["name"].(string)
	res, out, text = callTool(t, cs, "run_status", map[string]any{"run": run})
	require.False(t, res.IsError, text)
	require.Equal(t, run, out["name"])
	require.NotEmpty(t, out["state"])

	// Another plan is rejected: it will not run, and cannot be approved.
	_, out, _ = callTool(t, cs, "create_plan", map[string]any{"request": "add a comment to billing/invoice.go", "session": session})
	rejected := out["name"].(string)
	res, out, text = callTool(t, cs, "reject_plan", map[string]any{"plan": rejected, "reason": "not now"})
	require.False(t, res.IsError, text)
	require.Equal(t, "PLAN_STATE_REJECTED", out["state"])
	require.Equal(t, "not now", out["rejectReason"])
	res, _, text = callTool(t, cs, "approve_plan", map[string]any{"plan": rejected})
	require.True(t, res.IsError, text)

	// A long run is cancelled by the tool, and its status says so.
	long := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{map[string]any{"id": "slow", "command": "sleep 60"}}}})
	res, out, text = callTool(t, cs, "cancel_run", map[string]any{"run": strings.TrimPrefix(long, "runs/")})
	require.False(t, res.IsError, text)
	require.Equal(t, long, out["name"])
	require.Contains(t, text, "Cancelled run "+long)
	require.Eventually(t, func() bool {
		_, out, _ := callTool(t, cs, "run_status", map[string]any{"run": long})
		return out["state"] == "RUN_STATE_CANCELLED"
	}, 60*time.Second, 200*time.Millisecond)
	res, _, text = callTool(t, cs, "cancel_run", map[string]any{"run": "runs/01a222c5-0000-7000-8000-000000000000"})
	require.True(t, res.IsError)
	require.Contains(t, text, "NOT_FOUND")

	// The repositories are resources.
	read, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "sylk://repositories"})
	require.NoError(t, err)
	require.Contains(t, read.Contents[0].Text, id)
	read, err = cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "sylk://repositories/" + id})
	require.NoError(t, err)
	require.Contains(t, read.Contents[0].Text, "INDEX_STATE_READY")
	require.Equal(t, "private", read.CacheScope)
	require.Contains(t, listedResources(t, cs), "sylk://repositories/"+id)

	// A wrong key is refused at the edge.
	bad := *c
	bad.key = "sylk_" + strings.Repeat("w", 40)
	_, err = bad.mcpSession()
	require.Error(t, err)
	r := bad.do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	require.Equal(t, http.StatusUnauthorized, r.Status, r.Raw)

	// Another tenant sees none of it.
	other, err := c.asUser("mcp-other", "eve").mcpSession()
	require.NoError(t, err)
	res, out, text = callTool(t, other, "search_code", map[string]any{"query": "ComputeInvoiceTotal"})
	if !res.IsError {
		require.Empty(t, out["hits"], text)
	}
	res, out, _ = callTool(t, other, "search_code", map[string]any{"query": "ComputeInvoiceTotal", "repository": repo})
	if !res.IsError {
		require.Empty(t, out["hits"])
	}
	_, err = other.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "sylk://repositories/" + id})
	require.Error(t, err)
	read, err = other.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "sylk://repositories"})
	require.NoError(t, err)
	require.NotContains(t, read.Contents[0].Text, id)
	require.NotContains(t, listedResources(t, other), "sylk://repositories/"+id)
	res, _, text = callTool(t, other, "ask", map[string]any{"question": "hello", "session": session})
	require.True(t, res.IsError)
	require.Contains(t, text, "NOT_FOUND")
}

func listedResources(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	list, err := cs.ListResources(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, "private", list.CacheScope, "the list is the caller's tenant's")
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	return uris
}

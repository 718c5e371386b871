package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
)

// keyTransport adds an API key to every request.
type keyTransport struct {
	header, value string
}

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(k.header, k.value)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpConnect connects the SDK's client to the harness's /mcp with key.
func (h *harness) mcpConnect(t *testing.T, key string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url + pathMCP,
		HTTPClient: &http.Client{Transport: keyTransport{header: "X-API-Key", value: key}}, MaxRetries: -1}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return res, strings.Join(text, "\n")
}

func TestMCPTools(t *testing.T) {
	h := newHarness(t, nil)
	cs, err := h.mcpConnect(t, h.member)
	require.NoError(t, err)

	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		require.NotNil(t, tool.OutputSchema, tool.Name)
	}
	for _, want := range []string{"search_code", "get_symbol", "references", "search_history", "search_docs", "ask",
		"create_plan", "get_plan", "approve_plan", "revise_plan", "reject_plan", "run_status", "cancel_run"} {
		require.Contains(t, names, want)
	}

	// The Guide answers a command at once; the call carries the caller's
	// identity and the request id.
	res, text := callTool(t, cs, "ask", map[string]any{"question": "/help", "session": "s1"})
	require.False(t, res.IsError, text)
	require.Contains(t, text, "ok")
	out := res.StructuredContent.(map[string]any)
	require.Equal(t, "reply", out["outcome"])
	require.Equal(t, "sessions/s1", out["session"])
	calls := h.fake.callsOf("SendMessage")
	require.Len(t, calls, 1)
	md := calls[0]
	require.Equal(t, []string{"acme"}, md.Get(identity.MDTenant))
	require.Equal(t, []string{"bob"}, md.Get(identity.MDUser))
	require.Equal(t, []string{identity.RoleMember}, md.Get(identity.MDRole))
	require.Len(t, md.Get(mdRequestID), 1)

	// A service's error is a tool error with its code and message.
	res, text = callTool(t, cs, "ask", map[string]any{"question": "hello", "session": "sessions/nope"})
	require.True(t, res.IsError)
	require.Contains(t, text, "NOT_FOUND")
	// A service this gateway has no connection to says so.
	res, text = callTool(t, cs, "search_code", map[string]any{"query": "invoice"})
	require.True(t, res.IsError)
	require.Contains(t, text, "librarian service is not configured")
	// Bad input is refused before any call.
	res, text = callTool(t, cs, "ask", map[string]any{})
	require.True(t, res.IsError)
	require.Contains(t, text, "question is required")
	res, text = callTool(t, cs, "search_code", map[string]any{"limit": 3})
	require.True(t, res.IsError)
	require.Contains(t, text, "query")
}

func TestMCPAuthAndRoles(t *testing.T) {
	h := newHarness(t, nil)

	// No key, or a wrong one: 401 before the MCP server sees anything.
	for _, key := range []string{"", "sylk_" + strings.Repeat("x", 40)} {
		r := h.do(t, "POST", pathMCP, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "X-API-Key: "+key,
			"Accept: application/json, text/event-stream")
		require.Equal(t, http.StatusUnauthorized, r.code, r.body)
		_, err := h.mcpConnect(t, key)
		require.Error(t, err)
	}

	// Behind a proxy on the same host that keeps the Host header, the key
	// is what counts.
	req, err := http.NewRequest(http.MethodPost, h.url+pathMCP, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	require.NoError(t, err)
	req.Host = "sylk.example.com"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-API-Key", h.viewer)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A viewer reads but may not ask (asking sends a message), and the
	// denial is audited.
	cs, err := h.mcpConnect(t, h.viewer)
	require.NoError(t, err)
	res, text := callTool(t, cs, "ask", map[string]any{"question": "/help", "session": "s1"})
	require.True(t, res.IsError)
	require.Contains(t, text, "PERMISSION_DENIED: role viewer may only read")
	for tool, args := range map[string]map[string]any{"create_plan": {"request": "add a cache"}, "approve_plan": {"plan": "sessions/s1/plans/p1"},
		"revise_plan": {"plan": "sessions/s1/plans/p1", "feedback": "x"}, "reject_plan": {"plan": "sessions/s1/plans/p1"},
		"cancel_run": {"run": "runs/r1"}} {
		res, text := callTool(t, cs, tool, args)
		require.True(t, res.IsError, tool)
		// Without the service the tool says so first; with it, the role.
		require.True(t, strings.Contains(text, "PERMISSION_DENIED") || strings.Contains(text, "service is not configured"), text)
	}
	require.Empty(t, h.fake.callsOf("SendMessage"))
	var denials int
	require.NoError(t, h.auditDB.QueryRow(context.Background(),
		`SELECT count(*) FROM `+pgx.Identifier{h.auditSchema}.Sanitize()+`.records WHERE action = $1 AND target = 'MCP tools/call ask'`, audit.ActionPermissionDenied).Scan(&denials))
	require.Equal(t, 1, denials)
	res, text = callTool(t, cs, "search_docs", map[string]any{"query": "x"})
	require.True(t, res.IsError)
	require.Contains(t, text, "academic service is not configured", "a viewer reaches the reading tools")

	// Resources: the repositories list and template are there.
	rs, err := cs.ListResourceTemplates(context.Background(), nil)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(rs.ResourceTemplates, func(r *mcp.ResourceTemplate) bool {
		return r.URITemplate == "sylk://repositories/{id}"
	}))
}

// An ask's outcome is read from the event that ended its request.
func TestMCPAskOutcome(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		ev      *eventv1.Event
		outcome string
		text    []string
		err     string
	}{
		{name: "answered", outcome: "answered", ev: &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED,
			Payload: &eventv1.Event_MessageAnswered{MessageAnswered: &messagev1.AgentAnswer{Agent: "librarian", Text: "It is in a.go.",
				Citations:      []*messagev1.Citation{{Name: "repositories/r1", Path: "a.go", LineStart: 3, LineEnd: 9}},
				GroundingRatio: 0.5, Ungrounded: true, Grounding: "Only 1 of 2 citations held."}}},
			text: []string{"It is in a.go.", "Sources:\n- repositories/r1 a.go:3-9", "Only 1 of 2 citations held.", "(session sessions/s1)"}},
		{name: "clarification", outcome: "clarification", ev: &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED,
			Text: "Which service?", Payload: &eventv1.Event_ClarificationRequested{ClarificationRequested: &eventv1.ClarificationRequested{
				Clarification: "sessions/s1/clarifications/c1", RequestingAgent: "guide", Options: []string{"billing", "auth"}}}},
			text: []string{"Sylk asks: Which service?", "- billing", `inReplyTo "sessions/s1/clarifications/c1"`}},
		{name: "plan", outcome: "plan", ev: &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL, Source: "architect",
			Payload: &eventv1.Event_Plan{Plan: &eventv1.PlanEvent{Plan: "sessions/s1/plans/p1", Title: "Add a cache", Nodes: 2}}},
			text: []string{"Plan sessions/s1/plans/p1 (Add a cache, 2 tasks) awaits approval", "approve_plan"}},
		{name: "timeout", err: "UNAVAILABLE: librarian did not answer (DEADLINE_EXCEEDED): waited 30s",
			ev: &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT, Payload: &eventv1.Event_MessageUnanswered{
				MessageUnanswered: &eventv1.MessageUnanswered{Target: "librarian", Reason: "DEADLINE_EXCEEDED", Detail: "waited 30s"}}}},
		{name: "error", err: "ROUTE_FAILED: no agent",
			ev: &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_ERROR, Payload: &eventv1.Event_Error{
				Error: &eventv1.ErrorEvent{Reason: "ROUTE_FAILED", Message: "no agent"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := AskOutput{Session: "sessions/s1"}
			err := outcomeOf(tt.ev, &out)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.outcome, out.Outcome)
			text := askText(out)
			for _, want := range tt.text {
				require.Contains(t, text, want)
			}
		})
	}
}

// A service's status becomes a tool error naming its code and reason.
func TestMCPToolError(t *testing.T) {
	t.Parallel()
	err := toolError(apierr.FailedPrecondition("REPOSITORY_HAS_NO_COMMIT", "repository has no commit; commit first").GRPCStatus().Err())
	require.EqualError(t, err, "FAILED_PRECONDITION: repository has no commit; commit first (reason REPOSITORY_HAS_NO_COMMIT)")
	err = toolError(apierr.NotFound("session", "sessions/x").GRPCStatus().Err())
	require.True(t, strings.HasPrefix(err.Error(), "NOT_FOUND: "), err)
	require.Equal(t, "repositories/r1", resourceName("repositories", "r1"))
	require.Equal(t, "repositories/r1", resourceName("repositories", "repositories/r1"))
	require.Empty(t, resourceName("repositories", " "))
}

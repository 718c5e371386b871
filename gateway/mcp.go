package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// pathMCP is the Model Context Protocol endpoint (streamable HTTP).
const pathMCP = "/mcp"

// mcpVersion is the version the MCP server reports in its handshake.
const mcpVersion = "v1"

// mcpServer is the gateway's MCP endpoint: tools and resources that call
// the services through the same gRPC clients as the REST routes, with the
// caller's identity in the outgoing metadata, so every answer is scoped to
// the caller's tenant (and user) by the services themselves.
//
// It is stateless: every POST is authenticated by the gateway on its own
// and carries its own identity, no session lives in one replica's memory
// (the gateway runs several behind a load balancer), and a session id can
// never carry one caller's identity into another's request. The cost is
// that the server cannot send requests to the client (sampling,
// elicitation), which no tool here needs.
type mcpServer struct {
	g           *Gateway
	guide       guidev1.GuideServiceClient
	sessions    guidev1.SessionServiceClient
	plans       architectv1.PlanServiceClient
	workflows   orchestratorv1.WorkflowServiceClient
	librarian   librarianv1.LibrarianServiceClient
	archivalist archivalistv1.ArchivalistServiceClient
	academic    academicv1.AcademicServiceClient
	handler     http.Handler
	// callTimeout bounds a tool's calls (the handler's context has the
	// request's values, not its deadline); askTimeout bounds ask's wait
	// for an answer, within the request timeout.
	callTimeout time.Duration
	askTimeout  time.Duration
}

// askSlack is the part of the request timeout ask leaves for writing its
// answer.
const askSlack = 5 * time.Second

// newMCP builds the MCP endpoint over the services' connections; a nil
// connection leaves its tools answering that the service is not
// configured.
func (g *Gateway) newMCP(c Conns) *mcpServer {
	m := &mcpServer{g: g, callTimeout: g.cfg.RequestTimeout, askTimeout: max(g.cfg.RequestTimeout-askSlack, time.Second)}
	if c.Guide != nil {
		m.guide = guidev1.NewGuideServiceClient(c.Guide)
		m.sessions = guidev1.NewSessionServiceClient(c.Guide)
	}
	if c.Architect != nil {
		m.plans = architectv1.NewPlanServiceClient(c.Architect)
	}
	if c.Orchestrator != nil {
		m.workflows = orchestratorv1.NewWorkflowServiceClient(c.Orchestrator)
	}
	if c.Librarian != nil {
		m.librarian = librarianv1.NewLibrarianServiceClient(c.Librarian)
	}
	if c.Archivalist != nil {
		m.archivalist = archivalistv1.NewArchivalistServiceClient(c.Archivalist)
	}
	if c.Academic != nil {
		m.academic = academicv1.NewAcademicServiceClient(c.Academic)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "sylk", Title: "Sylk", Version: mcpVersion}, &mcp.ServerOptions{
		Instructions: mcpInstructions,
		// No logging capability: the server sends no log messages.
		Capabilities: &mcp.ServerCapabilities{},
	})
	m.addKnowledgeTools(srv)
	m.addAskTool(srv)
	m.addPlanTools(srv)
	m.addResources(srv)
	m.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		// One JSON answer per call: no tool streams, and a JSON body passes
		// every proxy unchanged.
		JSONResponse: true,
		Logger:       g.log.With("component", "mcp"),
		// The gateway bounds bodies itself (-gateway.max-body-bytes).
		MaxRequestBodyBytes: g.cfg.MaxBodyBytes,
		// DNS rebinding protects servers that trust whoever reaches them on
		// loopback; every request here carries an API key, which a rebound
		// page does not have. Left on, it would refuse /mcp (and only /mcp)
		// behind a reverse proxy on the same host that keeps the Host header.
		DisableLocalhostProtection: true,
	})
	return m
}

const mcpInstructions = "Sylk answers questions about the tenant's registered repositories, their history and documents. " +
	"Use search_code, get_symbol and references for code; search_history for past decisions, failures and runs; " +
	"search_docs for documents; ask to put a question to Sylk's agents (answers cite their sources). " +
	"create_plan drafts a change, revise_plan changes it, reject_plan drops it, approve_plan starts it as a run, " +
	"run_status follows the run and cancel_run stops it. " +
	"Repositories are resources: sylk://repositories lists them, sylk://repositories/{id} reads one."

// ServeHTTP serves an authenticated MCP request: the identity is already
// in r's context (the chain's authentication). Viewers reach the endpoint
// (they may use the reading tools); the writing tools check the role.
func (m *mcpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.handler.ServeHTTP(w, r)
}

// errServiceMissing is a tool's answer when its service is not configured
// in this gateway.
func errServiceMissing(service string) error {
	return fmt.Errorf("UNAVAILABLE: the %s service is not configured on this gateway; ask its operator to connect it", service)
}

// call is the context of one tool's calls to the services: the caller's
// identity and the request id in the outgoing metadata, as on the REST
// routes, and the request timeout.
func (m *mcpServer) call(ctx context.Context, req mcp.Request) (context.Context, identity.Identity, context.CancelFunc, error) {
	id, ok := identity.FromContext(ctx)
	if !ok || !id.Valid() {
		// The chain authenticates every request to /mcp first.
		return nil, identity.Identity{}, nil, errors.New("UNAUTHENTICATED: no caller identity; send an API key (X-API-Key or Authorization: Bearer)")
	}
	md := metadata.Pairs(identity.MDTenant, id.TenantID, identity.MDUser, id.UserID, identity.MDRole, id.Role)
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		if rid := extra.Header.Get(headerRequestID); rid != "" {
			md.Set(mdRequestID, rid)
		}
	}
	// The handler's context carries the request's values but not its
	// deadline: bound the calls here.
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), m.callTimeout)
	return ctx, id, cancel, nil
}

// toolCall is what a tool needs checked before it calls its service.
type toolCall struct {
	// service names the service the tool calls, for the answer when it is
	// not configured.
	service string
	// ready reports whether the service's client is configured.
	ready bool
	// writes names the tool when it changes something: a viewer may not
	// call it. Empty for a reading tool.
	writes string
}

// begin is every tool's preamble: the service must be configured, the
// calls get the caller's context (see call) and a writing tool checks the
// caller's role. done releases the context; it is never nil, so a handler
// defers it before looking at err.
func (m *mcpServer) begin(ctx context.Context, req mcp.Request, t toolCall) (context.Context, context.CancelFunc, error) {
	noop := func() {}
	if !t.ready {
		return nil, noop, errServiceMissing(t.service)
	}
	ctx, id, cancel, err := m.call(ctx, req)
	if err != nil {
		return nil, noop, err
	}
	if t.writes != "" {
		if err := m.mayWrite(ctx, id, req, t.writes); err != nil {
			cancel()
			return nil, noop, err
		}
	}
	return ctx, cancel, nil
}

// mayWrite refuses a viewer a tool that changes something, as the REST
// routes do, and records the denial in the audit log.
func (m *mcpServer) mayWrite(ctx context.Context, id identity.Identity, req mcp.Request, tool string) error {
	if id.Role == identity.RoleAdmin || id.Role == identity.RoleMember {
		return nil
	}
	e := errReadOnly.Withf("role %s may only read (the search, get and status tools); %s changes something and is not allowed; "+
		"use a member's or an admin's API key", id.Role, tool).With("role", id.Role)
	rid := ""
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		rid = extra.Header.Get(headerRequestID)
	}
	m.g.auditDenial(ctx, id, rid, "MCP tools/call "+tool, e.GRPCStatus())
	return toolError(e)
}

// toolError turns a service's error into a tool error whose text says what
// went wrong and what to do: the gRPC code's name, the service's message
// (the services word it for the caller) and the reason clients branch on.
func toolError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := apierr.CodeName(st.Code()) + ": " + st.Message()
	if reason := apierr.Reason(err); reason != "" && reason != apierr.CodeName(st.Code()) {
		msg += " (reason " + reason + ")"
	}
	if st.Code() == codes.DeadlineExceeded {
		msg += "; try again, or narrow the request"
	}
	return errors.New(msg)
}

// resourceName returns "<collection>/<id>" for an id given with or without
// its collection prefix, or "" for an empty one.
func resourceName(collection, v string) string {
	v = strings.TrimSpace(v)
	if v == "" || strings.HasPrefix(v, collection+"/") {
		return v
	}
	return collection + "/" + v
}

// textResult is a tool's readable answer next to its structured output.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

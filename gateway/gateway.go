// Package gateway is Sylk's REST edge: every public RPC under /v1 through
// grpc-gateway (registered on gRPC client connections, so the services' own
// interceptors run), API-key authentication, request ids, server-sent event
// streams and the OpenAPI document.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	adminv1 "sylk.dev/sylk/gen/go/sylk/admin/v1"
	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/redisx"
)

// Conns are the client connections to the services; a nil connection leaves
// that service's routes out (they answer 404).
type Conns struct {
	Guide        *grpc.ClientConn
	Architect    *grpc.ClientConn
	Orchestrator *grpc.ClientConn
	Librarian    *grpc.ClientConn
	Archivalist  *grpc.ClientConn
	Academic     *grpc.ClientConn
}

// Gateway serves the REST API.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	auth    *authenticator
	audit   *audit.Log
	redis   *redisx.Client
	limits  *throttle
	mux     *runtime.ServeMux
	guide   guidev1.GuideServiceClient
	marshal protojson.MarshalOptions
	openapi []byte
	console *consoleFiles
	metrics *metrics
	handler http.Handler
	// mcp serves /mcp (mcp.go).
	mcp *mcpServer

	// life is cancelled when shutdown starts, ending open event streams so
	// that draining does not wait for them.
	life     context.Context
	stopLife context.CancelFunc
	draining atomic.Bool
	// after waits out the shutdown delay (time.After; tests end it).
	after func(time.Duration) <-chan time.Time

	mu sync.Mutex
	ln net.Listener
}

// Option gives the gateway an optional dependency.
type Option func(*Gateway)

// WithAudit records key changes and permission denials in l and serves the
// audit API (/v1/audit) on it; without it those routes answer 404.
func WithAudit(l *audit.Log) Option { return func(g *Gateway) { g.audit = l } }

// WithRedis counts failed authentications in r, shared by every replica,
// and throttles them (-gateway.auth-fail-*); without it nothing is
// throttled.
func WithRedis(r *redisx.Client) Option { return func(g *Gateway) { g.redis = r } }

// New builds the gateway. db is a pool on the auth schema.
func New(cfg Config, log *slog.Logger, db *pgxpool.Pool, conns Conns, reg prometheus.Registerer, opts ...Option) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("gateway: an auth database pool is required")
	}
	if log == nil {
		log = logx.Discard()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	doc, err := openAPIDocument()
	if err != nil {
		return nil, err
	}
	files, err := newConsoleFiles(consoleFS())
	if err != nil {
		return nil, fmt.Errorf("gateway: the embedded console has no index.html (run make console): %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	g := &Gateway{
		console:  files,
		cfg:      cfg,
		log:      log,
		db:       db,
		auth:     &authenticator{db: db, now: time.Now, ttl: cfg.AuthCacheTTL},
		after:    time.After,
		marshal:  protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: false},
		openapi:  doc,
		metrics:  newMetrics(reg),
		life:     life,
		stopLife: stop,
	}
	for _, o := range opts {
		o(g)
	}
	g.limits = newThrottle(g.redis, cfg)
	g.mux = runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithOutgoingTrailerMatcher(outgoingHeader),
		runtime.WithMetadata(g.identityMetadata),
		runtime.WithErrorHandler(g.handleError),
		runtime.WithRoutingErrorHandler(g.handleRoutingError),
		runtime.WithStreamErrorHandler(g.streamError),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &jsonMarshaler{JSONPb: &runtime.JSONPb{
			MarshalOptions: g.marshal,
			// Nesting is bounded well below what the services decode, so
			// that nothing a request stores (a session's extra context,
			// say) fails to decode later inside a larger message.
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false, RecursionLimit: maxRequestNesting},
		}}),
		runtime.WithMiddlewares(recordRoute),
		// Bodies are JSON only; no form bodies and no method overrides, so a
		// request's method is the one the role check saw.
		runtime.WithDisablePathLengthFallback(),
		runtime.WithDisableHTTPMethodOverride(),
	)
	if err := g.register(life, conns); err != nil {
		stop()
		return nil, err
	}
	g.mcp = g.newMCP(conns)
	g.handler = g.chain()
	return g, nil
}

// maxRequestNesting bounds the nesting of messages in a request body; each
// level of a free-form JSON object counts twice (a Struct and a Value).
const maxRequestNesting = 100

// register adds every configured service's routes through its gRPC client.
func (g *Gateway) register(ctx context.Context, c Conns) error {
	var errs []error
	add := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("register %s routes: %w", name, err))
		}
	}
	if c.Guide != nil {
		g.guide = guidev1.NewGuideServiceClient(c.Guide)
		add("session", guidev1.RegisterSessionServiceHandlerClient(ctx, g.mux, guidev1.NewSessionServiceClient(c.Guide)))
		add("guide", guidev1.RegisterGuideServiceHandlerClient(ctx, g.mux, g.guide))
	}
	if c.Architect != nil {
		add("plan", architectv1.RegisterPlanServiceHandlerClient(ctx, g.mux, architectv1.NewPlanServiceClient(c.Architect)))
	}
	if c.Orchestrator != nil {
		add("workflow", orchestratorv1.RegisterWorkflowServiceHandlerClient(ctx, g.mux, orchestratorv1.NewWorkflowServiceClient(c.Orchestrator)))
		add("review", orchestratorv1.RegisterReviewServiceHandlerClient(ctx, g.mux, orchestratorv1.NewReviewServiceClient(c.Orchestrator)))
	}
	if c.Librarian != nil {
		add("librarian", librarianv1.RegisterLibrarianServiceHandlerClient(ctx, g.mux, librarianv1.NewLibrarianServiceClient(c.Librarian)))
	}
	if c.Archivalist != nil {
		add("archivalist", archivalistv1.RegisterArchivalistServiceHandlerClient(ctx, g.mux, archivalistv1.NewArchivalistServiceClient(c.Archivalist)))
		// The archivalist also serves the LLM usage and provider APIs (pkg/llm/api).
		add("usage", llmv1.RegisterUsageServiceHandlerClient(ctx, g.mux, llmv1.NewUsageServiceClient(c.Archivalist)))
		add("providers", llmv1.RegisterProviderServiceHandlerClient(ctx, g.mux, llmv1.NewProviderServiceClient(c.Archivalist)))
	}
	// The key and audit APIs are the gateway's own (admin.go).
	add("keys", adminv1.RegisterKeyServiceHandlerServer(ctx, g.mux, &keyServer{db: g.db, audit: g.audit, auth: g.auth, now: time.Now}))
	if g.audit != nil {
		add("audit", adminv1.RegisterAuditServiceHandlerServer(ctx, g.mux, &auditServer{audit: g.audit}))
	}
	if c.Academic != nil {
		add("academic", academicv1.RegisterAcademicServiceHandlerClient(ctx, g.mux, academicv1.NewAcademicServiceClient(c.Academic)))
	}
	return errors.Join(errs...)
}

// Handler returns the gateway's HTTP handler (middleware and routes).
func (g *Gateway) Handler() http.Handler { return g.handler }

// Listen binds the listen address, so Addr is known before Run.
func (g *Gateway) Listen() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", g.cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen gateway %s: %w", g.cfg.ListenAddress, err)
	}
	g.ln = ln
	return nil
}

// Addr is the bound address after Listen, else the configured one.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		return g.cfg.ListenAddress
	}
	return g.ln.Addr().String()
}

// Run serves until ctx is done; then it answers /readyz 503 and goes on
// serving for the shutdown delay, then stops accepting requests, ends open
// event streams and gives in-flight requests the drain timeout to finish.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.Listen(); err != nil {
		return err
	}
	g.mu.Lock()
	ln := g.ln
	g.mu.Unlock()
	srv := g.server()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		g.stopLife()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve gateway: %w", err)
	case <-ctx.Done():
	}
	g.draining.Store(true)
	if g.cfg.ShutdownDelay > 0 {
		g.log.Info("shutting down", slog.Duration(logx.KeyDuration, g.cfg.ShutdownDelay))
		select {
		case <-g.after(g.cfg.ShutdownDelay):
		case err := <-errc: // the server failed meanwhile
			g.stopLife()
			return fmt.Errorf("serve gateway: %w", err)
		}
	}
	g.stopLife()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.DrainTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		g.log.Warn("gateway drain timed out; closing connections", logx.Err(err))
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve gateway: %w", err)
	}
	g.log.Info("gateway stopped")
	return nil
}

// server is the HTTP server: headers within ReadHeaderTimeout, kept-alive
// connections idle for at most IdleTimeout. Bodies are bounded per request
// (bodyDeadline), not by ReadTimeout, which would also cut event streams;
// there is no WriteTimeout for the same reason: non-streaming requests are
// bounded by the request timeout, streams by their stall guard.
func (g *Gateway) server() *http.Server {
	return &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}

// incomingHeader forwards only the request id to the services; identity
// travels in metadata the gateway sets itself (identityMetadata), never in
// headers a client chose.
func incomingHeader(key string) (string, bool) {
	if http.CanonicalHeaderKey(key) == headerRequestID {
		return mdRequestID, true
	}
	return "", false
}

// outgoingHeader passes no service response metadata on as headers
// (Grpc-Metadata-*): it is the services' business, not the client's.
func outgoingHeader(string) (string, bool) { return "", false }

// identityMetadata puts the authenticated caller into the outgoing metadata.
func (g *Gateway) identityMetadata(_ context.Context, r *http.Request) metadata.MD {
	id, ok := identity.FromContext(r.Context())
	if !ok {
		return nil
	}
	return metadata.Pairs(identity.MDTenant, id.TenantID, identity.MDUser, id.UserID, identity.MDRole, id.Role)
}

// outgoingContext is what the hand-written handlers (SSE) send to services:
// the caller's identity and the request id, like the mux does.
func (g *Gateway) outgoingContext(ctx context.Context, r *http.Request) context.Context {
	md := g.identityMetadata(ctx, r)
	if md == nil {
		md = metadata.MD{}
	}
	if rid := r.Header.Get(headerRequestID); rid != "" {
		md.Set(mdRequestID, rid)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// jsonMarshaler is protojson with the newline-delimited JSON content type
// on streams.
type jsonMarshaler struct {
	*runtime.JSONPb
}

// StreamContentType names the content type of streamed responses.
func (*jsonMarshaler) StreamContentType(any) string { return "application/x-ndjson" }

// Marshal renders a stream's error line as {"error": {...}} holding the
// gateway's JSON error form; everything else is protojson.
func (m *jsonMarshaler) Marshal(v any) ([]byte, error) {
	if chunk, ok := v.(map[string]proto.Message); ok && len(chunk) == 1 {
		if st, ok := chunk["error"].(*spb.Status); ok {
			return json.Marshal(map[string]errorBody{"error": newErrorBody(status.FromProto(st))})
		}
	}
	return m.JSONPb.Marshal(v)
}

// NewDecoder says which part failed when a request body does not decode:
// the decoder's own messages ("proto: unexpected EOF") do not.
func (m *jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	d := m.JSONPb.NewDecoder(r)
	return runtime.DecoderFunc(func(v any) error {
		err := d.Decode(v)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("request body is not valid JSON for this call (strings must be valid UTF-8, numbers in range): %w", err)
		}
		return err
	})
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// Headers, metadata keys and log keys the gateway uses.
const (
	headerRequestID = "X-Request-Id"
	headerAPIKey    = "X-Api-Key"
	mdRequestID     = "x-request-id"

	keyRoute     = "route"
	keyStatus    = "status"
	keyRequestID = "request_id"

	pathHealthz = "/healthz"
	pathReadyz  = "/readyz"
	pathOpenAPI = "/openapi.json"
	// pathOpenAPIv3 is the same API as OpenAPI 3.
	pathOpenAPIv3 = "/openapi.v3.json"

	// routeNone labels requests that reached no route (401s, 404s).
	routeNone = "none"
)

type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	authFailures *prometheus.CounterVec
	streams      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_gateway_requests_total",
			Help: "HTTP requests served, by method and status code.",
		}, []string{"method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sylk_gateway_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by method and route pattern (streams: their whole life).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method", "route"}),
		authFailures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_gateway_auth_failures_total",
			Help: "Requests refused by API-key authentication, by reason.",
		}, []string{"reason"}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: "sylk_gateway_event_streams_active",
			Help: "Server-sent event streams open now.",
		}),
	}
}

// reqInfo collects what the outer middleware logs and measures once the
// request is done.
type reqInfo struct {
	route string
	id    identity.Identity
}

type reqInfoKey struct{}

func reqInfoFrom(ctx context.Context) *reqInfo {
	info, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	return info
}

// recordRoute notes the matched route pattern (never the raw path, which
// holds ids) for metrics and logs.
func recordRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if info := reqInfoFrom(r.Context()); info != nil {
			if p, ok := runtime.HTTPPattern(r.Context()); ok {
				info.route = p.String()
			}
		}
		next(w, r, params)
	}
}

// recorder remembers the status written; it passes flushes through, which
// streams need.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush, reporting a failed write to the client.
func (r *recorder) FlushError() error {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// requestID keeps a sane client request id and makes one otherwise.
func requestID(v string) string {
	if requestIDPattern.MatchString(v) {
		return v
	}
	return ids.New()
}

// chain builds the middleware, outermost first:
//  1. body deadline, security headers, request id, recovery, metrics and
//     access log: see every request, including the ones refused below,
//     and never let a panic escape; a client that does not send the body
//     it declared is cut at the body timeout, with or without a key;
//  2. public endpoints (/healthz, /readyz, /openapi.json) and the console
//     (/, /assets/, pages a browser opens; console.go): no key needed;
//  3. authentication: a valid API key or 401 (429 after too many
//     failures from the address or with the key's prefix); the key and
//     any identity headers the client sent are removed before anything
//     is forwarded;
//  4. role check: viewers may only read (a denial is audited);
//  5. body limit and JSON syntax: 413 and 400 before any service sees it;
//  6. request timeout (not on streams), then the MCP endpoint, SSE or the
//     grpc-gateway mux.
func (g *Gateway) chain() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		g.bodyDeadline(w, r, start)
		secureHeaders(w.Header())
		rid := requestID(r.Header.Get(headerRequestID))
		r.Header.Set(headerRequestID, rid)
		w.Header().Set(headerRequestID, rid)
		info := &reqInfo{route: routeNone}
		r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
		rec := &recorder{ResponseWriter: w}
		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				g.log.ErrorContext(r.Context(), "panic in gateway handler", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				if rec.status == 0 {
					writeError(rec, errInternal)
				}
			}
			g.observe(r, rec, info, rid, start)
			if p == http.ErrAbortHandler {
				panic(p)
			}
		}()
		g.serve(rec, r, info)
	})
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, info *reqInfo) {
	switch r.URL.Path {
	case pathHealthz, pathReadyz, pathOpenAPI, pathOpenAPIv3:
		info.route = r.URL.Path
		g.servePublic(w, r)
		return
	}
	if consoleRequest(r) {
		// The console is public: it holds no data, and signs in with a key
		// it sends on every API call.
		info.route = "console"
		g.console.serve(w, r)
		return
	}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-sylk-") {
			delete(r.Header, k)
		}
	}
	id, ok := g.authenticate(w, r)
	if !ok {
		return
	}
	key, _ := extractKey(r)
	// The key never travels further (grpc-gateway would forward
	// Authorization as metadata).
	r.Header.Del("Authorization")
	r.Header.Del(headerAPIKey)
	info.id = id
	ctx := identity.NewContext(r.Context(), id)
	r = r.WithContext(ctx)
	// Viewers reach /mcp: its reading tools are theirs, and its writing
	// tools check the role themselves (mcp.go).
	if !readOnly(r) && r.URL.Path != pathMCP && id.Role != identity.RoleAdmin && id.Role != identity.RoleMember {
		e := errReadOnly.Withf("role %s may only read (GET and searches); %s %s is not allowed", id.Role, r.Method, r.URL.Path).
			With("role", id.Role)
		g.recordDenial(r, e.GRPCStatus())
		writeError(w, e)
		return
	}
	if err := checkUTF8(r); err != nil {
		writeError(w, err)
		return
	}
	if !g.readBody(w, r) {
		return
	}
	// The body is in: what follows is bounded by the request timeout
	// (streams by their stall guard), not by the body deadline.
	clearReadDeadline(w)
	var cancel context.CancelFunc
	if isStream(r) {
		var end context.CancelCauseFunc
		ctx, end = context.WithCancelCause(ctx)
		cancel = func() { end(nil) }
		// A shutdown ends the stream with errShuttingDown as its cause: an
		// event stream then tells its client to reconnect (sse.go).
		stop := context.AfterFunc(g.life, func() { end(errShuttingDown) })
		defer stop()
		go g.watchKey(ctx, end, key)
		w = &stallGuard{ResponseWriter: w, timeout: 2 * g.cfg.SSEKeepalive}
		defer func() { _ = http.NewResponseController(w).SetWriteDeadline(time.Time{}) }()
	} else {
		ctx, cancel = context.WithTimeout(ctx, g.requestTimeout(r))
	}
	defer cancel()
	r = r.WithContext(ctx)
	if r.URL.Path == pathMCP {
		info.route = pathMCP
		g.mcp.ServeHTTP(w, r)
		return
	}
	if parent, ok := sseRequest(r); ok {
		g.serveSSE(w, r, parent)
		return
	}
	if isStream(r) {
		// A stream that fails before its first message answers with the
		// JSON error form, as every other call does.
		w = &streamStartError{ResponseWriter: w}
	}
	g.mux.ServeHTTP(w, r)
}

// isStream reports whether r opens a stream: a session's events
// (":stream") or an operation's watch (GET /v1/operations/{id}:watch).
// A stream lasts as long as its client reads it (its stall guard) or the
// gateway runs, not the request timeout.
func isStream(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasSuffix(p, ":stream") ||
		r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/operations/") && strings.HasSuffix(p, ":watch")
}

// stallGuard bounds every write of a stream: a client that has taken
// nothing for timeout (two keepalive intervals) has stopped reading, and
// the failed write ends its stream instead of waiting for it forever.
type stallGuard struct {
	http.ResponseWriter
	timeout time.Duration
}

func (s *stallGuard) arm() {
	_ = http.NewResponseController(s.ResponseWriter).SetWriteDeadline(time.Now().Add(s.timeout))
}

func (s *stallGuard) Write(b []byte) (int, error) {
	s.arm()
	return s.ResponseWriter.Write(b)
}

func (s *stallGuard) Flush() { _ = s.FlushError() }

// FlushError is Flush, reporting a failed write to the client.
func (s *stallGuard) FlushError() error {
	s.arm()
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *stallGuard) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// streamStartError rewrites the error a newline-delimited JSON stream
// writes before any message ({"error": {...}} with an error status) into
// the gateway's JSON error form. Errors after the first message keep the
// stream's own framing.
type streamStartError struct {
	http.ResponseWriter
	started, failed bool
}

func (s *streamStartError) WriteHeader(code int) {
	if !s.started {
		s.started, s.failed = true, code >= http.StatusBadRequest
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *streamStartError) Write(b []byte) (int, error) {
	s.started = true
	if !s.failed {
		return s.ResponseWriter.Write(b)
	}
	s.failed = false
	var chunk struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &chunk); err != nil || chunk.Error == nil {
		// Not the stream's framing: an error the mux's handler wrote in
		// the JSON error form already (a query parameter that does not
		// parse).
		return s.ResponseWriter.Write(b)
	}
	// The stream's error line holds the JSON error form (jsonMarshaler);
	// the line's delimiter follows in a write of its own.
	if _, err := s.ResponseWriter.Write(chunk.Error); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s *streamStartError) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

func (s *streamStartError) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// authenticate resolves the request's API key or writes a 401 (429 when
// the client's address or the key's prefix failed too often; 503 when the
// key store is down).
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (identity.Identity, bool) {
	key, keyErr := extractKey(r)
	if keyErr != nil {
		g.metrics.authFailures.WithLabelValues("missing").Inc()
		writeError(w, keyErr)
		return identity.Identity{}, false
	}
	if !g.auth.knownValid(key) && g.throttled(w, r, key) {
		return identity.Identity{}, false
	}
	id, res, touchErr, err := g.auth.lookup(r.Context(), key)
	if err != nil {
		g.metrics.authFailures.WithLabelValues("error").Inc()
		g.log.ErrorContext(r.Context(), "API key lookup failed", logx.Err(err))
		writeError(w, errAuthUnavailable)
		return identity.Identity{}, false
	}
	if touchErr != nil {
		g.log.WarnContext(r.Context(), "record API key use", logx.Err(touchErr))
	}
	e := errKeyInvalid
	switch {
	case res == authRevoked:
		g.metrics.authFailures.WithLabelValues("revoked").Inc()
	case res == authExpired:
		g.metrics.authFailures.WithLabelValues("expired").Inc()
		e = errKeyExpired
	case res != authOK || !id.Valid():
		g.metrics.authFailures.WithLabelValues("invalid").Inc()
	default:
		return id, true
	}
	if err := g.limits.fail(r.Context(), r, key); err != nil {
		g.log.WarnContext(r.Context(), "count failed authentication", logx.Err(err))
	}
	writeError(w, e)
	return identity.Identity{}, false
}

// keyRecheck is how often an open stream's key is checked again: as often
// as a new request would ask the key store, the auth cache TTL, or every
// keepalive interval when nothing is cached.
func (g *Gateway) keyRecheck() time.Duration {
	if g.cfg.AuthCacheTTL > 0 {
		return g.cfg.AuthCacheTTL
	}
	return g.cfg.SSEKeepalive
}

// watchKey checks key again every keyRecheck until ctx is done, and ends
// the stream with errKeyRevoked once the key no longer authenticates: a
// stream outlives the check its request passed. A key store that does not
// answer leaves the stream open, as it does a cached key.
func (g *Gateway) watchKey(ctx context.Context, end context.CancelCauseFunc, key string) {
	tick := time.NewTicker(g.keyRecheck())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id, res, _, err := g.auth.lookup(ctx, key)
		if err != nil {
			continue
		}
		if res != authOK || !id.Valid() {
			end(errKeyRevoked)
			return
		}
	}
}

// extractKey reads "Authorization: Bearer <key>" or "X-API-Key: <key>", or
// returns the error to send.
func extractKey(r *http.Request) (string, *apierr.Error) {
	if v := strings.TrimSpace(r.Header.Get("Authorization")); v != "" {
		scheme, token, _ := strings.Cut(v, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", errSchemeUnsupported
		}
		if token = strings.TrimSpace(token); token != "" {
			return token, nil
		}
		return "", errKeyMissing
	}
	if v := strings.TrimSpace(r.Header.Get(headerAPIKey)); v != "" {
		return v, nil
	}
	return "", errKeyMissing
}

// checkUTF8 returns why the request's path or query parameters cannot be
// passed on, or nil when they can: they become resource names and fields of
// the services' requests, which are strings and must be valid UTF-8.
func checkUTF8(r *http.Request) *apierr.Error {
	if !utf8.ValidString(r.URL.Path) {
		return errInvalidUTF8.Withf("request path must be valid UTF-8 (percent-encoded bytes included)")
	}
	// A query that does not parse is the mux's to report.
	q, _ := url.ParseQuery(r.URL.RawQuery)
	for _, vs := range q {
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return errInvalidUTF8.Withf("query parameters must be valid UTF-8 (percent-encoded bytes included)")
			}
		}
	}
	return nil
}

// readBody buffers the body up to the limit (413 beyond it) and checks that
// a non-empty body is well-formed JSON (400 otherwise), so a bad request
// never reaches a service.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) bool {
	max, flag := g.cfg.MaxBodyBytes, "gateway.max-body-bytes"
	if r.Method == http.MethodPost && r.URL.Path == pathDocuments {
		max, flag = g.cfg.MaxDocumentBodyBytes, "gateway.max-document-body-bytes"
	}
	tooLarge := errBodyTooLarge.Withf("request body exceeds the limit of %d bytes; the gateway's operator raises it with -%s", max, flag).
		With("limit_bytes", strconv.FormatInt(max, 10)).With("flag", flag).GRPCStatus()
	if r.ContentLength > max {
		writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge)
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	_ = r.Body.Close()
	if err != nil {
		writeError(w, errMalformedBody.Withf("could not read the request body"))
		return false
	}
	if int64(len(body)) > max {
		writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge)
		return false
	}
	if len(bytes.TrimSpace(body)) > 0 {
		var raw json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil {
			writeError(w, errMalformedBody.Withf("malformed JSON body: %v", err))
			return false
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return true
}

// pathDocuments is the route that creates an Academic document, whose body
// holds a whole document and has a limit of its own.
const pathDocuments = "/v1/documents"

// requestTimeout is the time limit of a non-streaming request: longer for
// the calls that register or index a repository and asked to wait for the
// index (CreateRepository, IndexRepository with wait); without wait they
// answer at once and the index runs as an operation, bounded by no request.
func (g *Gateway) requestTimeout(r *http.Request) time.Duration {
	if r.Method != http.MethodPost {
		return g.cfg.RequestTimeout
	}
	switch {
	case r.URL.Path == "/v1/repositories":
		// The body is the repository: wait is a query parameter.
		if wait, err := strconv.ParseBool(r.URL.Query().Get("wait")); err == nil && wait {
			return g.cfg.IndexTimeout
		}
	case strings.HasPrefix(r.URL.Path, "/v1/repositories/") && strings.HasSuffix(r.URL.Path, ":index"):
		if bodyWaits(r) {
			return g.cfg.IndexTimeout
		}
	}
	return g.cfg.RequestTimeout
}

// bodyWaits reports whether a buffered JSON body (readBody) sets wait.
func bodyWaits(r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	var req struct {
		Wait bool `json:"wait"`
	}
	return json.Unmarshal(body, &req) == nil && req.Wait
}

// servePublic answers the endpoints that need no key.
func (g *Gateway) servePublic(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeStatus(w, http.StatusMethodNotAllowed, methodNotAllowed(r).GRPCStatus())
		return
	}
	switch r.URL.Path {
	case pathHealthz:
		writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
	case pathReadyz:
		if g.draining.Load() {
			writeError(w, errShuttingDown)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := g.db.Ping(ctx); err != nil {
			g.log.WarnContext(ctx, "readiness: auth database unreachable", logx.Err(err))
			writeError(w, errAuthUnavailable.Withf("auth database unavailable"))
			return
		}
		writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
	case pathOpenAPI:
		writeJSON(w, http.StatusOK, g.openapi)
	case pathOpenAPIv3:
		doc, err := servedOpenAPIv3()
		if err != nil {
			g.log.ErrorContext(r.Context(), "OpenAPI 3 document", logx.Err(err))
			writeError(w, errInternal)
			return
		}
		writeJSON(w, http.StatusOK, doc)
	}
}

func writeJSON(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// observe counts, times and logs a finished request.
func (g *Gateway) observe(r *http.Request, rec *recorder, info *reqInfo, rid string, start time.Time) {
	d := time.Since(start)
	code := rec.status
	if code == 0 {
		code = http.StatusOK
	}
	method := methodLabel(r.Method)
	g.metrics.requests.WithLabelValues(method, strconv.Itoa(code)).Inc()
	g.metrics.duration.WithLabelValues(method, info.route).Observe(d.Seconds())
	lvl := slog.LevelInfo
	switch {
	case info.route == pathHealthz || info.route == pathReadyz:
		lvl = slog.LevelDebug
	case code >= 500:
		lvl = slog.LevelError
	}
	attrs := []slog.Attr{
		slog.String(logx.KeyMethod, r.Method),
		slog.String(keyRoute, info.route),
		slog.Int(keyStatus, code),
		slog.Duration(logx.KeyDuration, d),
		slog.String(keyRequestID, rid),
	}
	if info.id.TenantID != "" {
		attrs = append(attrs, slog.String(logx.KeyTenantID, info.id.TenantID), slog.String(logx.KeyUserID, info.id.UserID))
	}
	g.log.LogAttrs(r.Context(), lvl, "http request", attrs...)
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// searches are the POST calls that only read: their queries are too rich
// for a URL, so they take a body.
var searches = map[string]bool{
	"/v1/code:search":         true,
	"/v1/entries:search":      true,
	"/v1/documents:search":    true,
	"/v1/expectations:lookup": true,
}

// readOnly reports whether r only reads, so that a viewer may make it.
func readOnly(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodPost && searches[r.URL.Path]
}

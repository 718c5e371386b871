package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"valid bootstrap key", func(c *Config) { c.BootstrapKey = "sylk_" + strings.Repeat("k", 40) }, nil},
		{"everything wrong", func(c *Config) {
			c.ListenAddress = ""
			c.MaxBodyBytes = 10
			c.RequestTimeout = 0
			c.DrainTimeout = -1
			c.SSEKeepalive = 0
			c.BootstrapKey = "secret-value-123"
			c.BootstrapTenant = ""
			c.BootstrapUser = "a b"
		}, []string{"gateway.listen-address", "gateway.max-body-bytes", "gateway.request-timeout", "gateway.drain-timeout",
			"gateway.sse-keepalive", "auth.bootstrap-key", "auth.bootstrap-tenant", "auth.bootstrap-user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.FromFlags[Config](t)
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, err.Error(), c.BootstrapKey, "the key is never echoed")
		})
	}
}

func TestConfigLogValueRedactsKey(t *testing.T) {
	t.Parallel()
	c := testenv.FromFlags[Config](t)
	c.BootstrapKey = "sylk_" + strings.Repeat("s", 40)
	require.NotContains(t, c.LogValue().String(), c.BootstrapKey)
	require.Contains(t, c.LogValue().String(), "[redacted]")
}

func TestIdentityPassedAndSpoofedHeadersIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"demo"}`, bearer(h.member),
		"X-Sylk-Tenant-Id: evil", "X-Sylk-User-Id: root", "X-Sylk-Role: admin",
		"Grpc-Metadata-X-Sylk-Tenant-Id: evil", "Grpc-Metadata-X-Sylk-Role: admin",
		"X-Request-Id: req-123.abc_X")
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, "req-123.abc_X", r.header.Get("X-Request-Id"))

	var body struct {
		Session struct {
			Name        string `json:"name"`
			DisplayName string `json:"displayName"`
			TenantID    string `json:"tenantId"`
			UserID      string `json:"userId"`
			State       string `json:"state"`
		} `json:"session"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &body), r.body)
	require.Equal(t, "demo", body.Session.DisplayName)
	require.Equal(t, "acme", body.Session.TenantID)
	require.Equal(t, "bob", body.Session.UserID)
	require.Equal(t, "SESSION_STATE_CREATED", body.Session.State)

	calls := h.fake.callsOf("CreateSession")
	require.Len(t, calls, 1)
	md := calls[0]
	require.Equal(t, []string{"acme"}, md.Get(identity.MDTenant))
	require.Equal(t, []string{"bob"}, md.Get(identity.MDUser))
	require.Equal(t, []string{identity.RoleMember}, md.Get(identity.MDRole))
	require.Equal(t, []string{"req-123.abc_X"}, md.Get("x-request-id"))
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		name, sent string
		keep       bool
	}{
		{"sane", "abc-123", true},
		{"absent", "", false},
		{"bad characters", "abc 123<script>", false},
		{"too long", strings.Repeat("a", 129), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var hdr []string
			if tt.sent != "" {
				hdr = append(hdr, "X-Request-Id: "+tt.sent)
			}
			r := h.do(t, http.MethodGet, "/healthz", "", hdr...)
			require.Equal(t, http.StatusOK, r.code)
			got := r.header.Get("X-Request-Id")
			if tt.keep {
				require.Equal(t, tt.sent, got)
				return
			}
			_, err := uuid.Parse(got)
			require.NoError(t, err, "generated id %q", got)
		})
	}
}

func TestRoles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		name, key, method, path, body string
		code                          int
	}{
		{"viewer reads", h.viewer, http.MethodGet, "/v1/sessions/s1", "", http.StatusOK},
		{"viewer cannot create", h.viewer, http.MethodPost, "/v1/sessions", `{}`, http.StatusForbidden},
		{"viewer cannot send", h.viewer, http.MethodPost, "/v1/sessions/s1/messages", `{"text":"hi"}`, http.StatusForbidden},
		{"member creates", h.member, http.MethodPost, "/v1/sessions", `{}`, http.StatusOK},
		{"admin creates", h.admin, http.MethodPost, "/v1/sessions", `{}`, http.StatusOK},
		// Searches read, though they are POSTs (the services behind them
		// are not in this harness: anything but 403 passed the gateway).
		{"viewer searches code", h.viewer, http.MethodPost, "/v1/code:search", `{"query":"x"}`, 0},
		{"viewer searches history", h.viewer, http.MethodPost, "/v1/entries:search", `{"query":"x"}`, 0},
		{"viewer searches documents", h.viewer, http.MethodPost, "/v1/documents:search", `{"query":"x"}`, 0},
		{"viewer looks up expectations", h.viewer, http.MethodPost, "/v1/expectations:lookup", `{}`, 0},
		{"viewer cannot index", h.viewer, http.MethodPost, "/v1/repositories/r1:index", `{}`, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, tt.method, tt.path, tt.body, bearer(tt.key))
			if tt.code == 0 {
				require.NotEqual(t, http.StatusForbidden, r.code, r.body)
				return
			}
			if tt.code == http.StatusForbidden {
				b := requireError(t, r, http.StatusForbidden, codes.PermissionDenied, ReasonRoleReadOnly, "may only read")
				require.Equal(t, identity.RoleViewer, b.Metadata["role"])
				return
			}
			require.Equal(t, tt.code, r.code, r.body)
		})
	}
	viewerCalls := 0
	for _, md := range h.fake.callsOf("CreateSession") {
		if len(md.Get(identity.MDRole)) > 0 && md.Get(identity.MDRole)[0] == identity.RoleViewer {
			viewerCalls++
		}
	}
	require.Zero(t, viewerCalls, "a viewer's write never reaches a service")
	require.Len(t, h.fake.callsOf("SendMessage"), 0)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxBodyBytes = 2048 })
	big := `{"displayName":"` + strings.Repeat("x", 4096) + `"}`
	tests := []struct {
		name, method, path, body string
		httpStatus               int
		code                     codes.Code
		reason, msg              string
	}{
		{"body too large", http.MethodPost, "/v1/sessions", big, http.StatusRequestEntityTooLarge, codes.InvalidArgument, ReasonBodyTooLarge, "exceeds the limit of 2048 bytes"},
		{"malformed JSON", http.MethodPost, "/v1/sessions", `{"displayName":`, http.StatusBadRequest, codes.InvalidArgument, ReasonMalformedBody, "malformed JSON body"},
		{"trailing garbage", http.MethodPost, "/v1/sessions", `{"displayName":"x"} {`, http.StatusBadRequest, codes.InvalidArgument, ReasonMalformedBody, "malformed JSON body"},
		{"unknown field", http.MethodPost, "/v1/sessions", `{"displayName":"x","colour":"red"}`, http.StatusBadRequest, codes.InvalidArgument, "INVALID_ARGUMENT", `unknown field "colour"`},
		{"wrong type", http.MethodPost, "/v1/sessions", `{"displayName":5}`, http.StatusBadRequest, codes.InvalidArgument, "INVALID_ARGUMENT", "displayName"},
		{"lone surrogate", http.MethodPost, "/v1/sessions", `{"displayName":"\ud800"}`, http.StatusBadRequest, codes.InvalidArgument, "INVALID_ARGUMENT",
			"request body is not valid JSON for this call"},
		{"unknown session", http.MethodGet, "/v1/sessions/nope", "", http.StatusNotFound, codes.NotFound, "SESSION_NOT_FOUND", "session sessions/nope not found"},
		{"message to unknown session", http.MethodPost, "/v1/sessions/nope/messages", `{"text":"hi"}`, http.StatusNotFound, codes.NotFound, "SESSION_NOT_FOUND", "not found"},
		{"oversized message", http.MethodPost, "/v1/sessions/s1/messages", `{"text":"` + strings.Repeat("m", 40) + `"}`, http.StatusBadRequest, codes.InvalidArgument,
			apierr.ReasonInvalidField, "text: at most 16 bytes"},
		{"unknown route", http.MethodGet, "/v1/nothing-here", "", http.StatusNotFound, codes.NotFound, ReasonRouteNotFound, "no route"},
		{"wrong method", http.MethodDelete, "/v1/sessions", "", http.StatusMethodNotAllowed, codes.Unimplemented, ReasonMethodNotAllowed, "not allowed"},
		{"invalid UTF-8 in the path", http.MethodGet, "/v1/sessions/%ff", "", http.StatusBadRequest, codes.InvalidArgument, ReasonInvalidUTF8, "request path must be valid UTF-8"},
		{"invalid UTF-8 in a query parameter", http.MethodGet, "/v1/sessions?pageToken=%ff%fe", "", http.StatusBadRequest, codes.InvalidArgument, ReasonInvalidUTF8,
			"query parameters must be valid UTF-8"},
		{"invalid UTF-8 in a stream's session", http.MethodGet, "/v1/sessions/%c3/events:stream", "", http.StatusBadRequest, codes.InvalidArgument, ReasonInvalidUTF8,
			"request path must be valid UTF-8"},
		{"invalid UTF-8 in a server-sent event stream's session", http.MethodGet, "/v1/sessions/%c3/events:stream?format=sse", "", http.StatusBadRequest,
			codes.InvalidArgument, ReasonInvalidUTF8, "request path must be valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := h.do(t, tt.method, tt.path, tt.body, bearer(h.member))
			requireError(t, r, tt.httpStatus, tt.code, tt.reason, tt.msg)
		})
	}
	t.Run("a field at fault is named", func(t *testing.T) {
		t.Parallel()
		r := h.do(t, http.MethodPost, "/v1/sessions/s1/messages", `{"text":"`+strings.Repeat("m", 40)+`"}`, bearer(h.member))
		b := requireError(t, r, http.StatusBadRequest, codes.InvalidArgument, apierr.ReasonInvalidField, "text: at most 16 bytes")
		require.Equal(t, map[string]string{"field": "text"}, b.Metadata)
		br := errorDetail(t, b, "google.rpc.BadRequest")
		require.Equal(t, []any{map[string]any{"field": "text", "description": "at most 16 bytes"}}, br["fieldViolations"])
	})
	t.Run("the body limit is told", func(t *testing.T) {
		t.Parallel()
		b := requireError(t, h.do(t, http.MethodPost, "/v1/sessions", big, bearer(h.member)), http.StatusRequestEntityTooLarge,
			codes.InvalidArgument, ReasonBodyTooLarge, "exceeds")
		require.Equal(t, "2048", b.Metadata["limit_bytes"])
	})
	t.Run("rejected bodies never reach the service", func(t *testing.T) {
		t.Parallel()
		r := h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":`, bearer(h.admin))
		require.Equal(t, http.StatusBadRequest, r.code)
		for _, md := range h.fake.callsOf("CreateSession") {
			require.NotEqual(t, []string{"alice"}, md.Get(identity.MDUser))
		}
	})
}

func TestBodyTooLargeWithoutContentLength(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	body := strings.NewReader(`{"displayName":"` + strings.Repeat("x", 3000) + `"}`)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.url+"/v1/sessions", readerOnly{body})
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+h.member)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Empty(t, h.fake.callsOf("CreateSession"))
}

// readerOnly hides the length of a reader, so the request is chunked.
type readerOnly struct{ r *strings.Reader }

func (r readerOnly) Read(p []byte) (int, error) { return r.r.Read(p) }

func TestPublicEndpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)

	r := h.do(t, http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, r.code)
	require.JSONEq(t, `{"status":"ok"}`, r.body)

	r = h.do(t, http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusOK, r.code)

	r = h.do(t, http.MethodGet, "/openapi.json", "")
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var doc struct {
		Swagger string `json:"swagger"`
		Info    struct {
			Title string `json:"title"`
		} `json:"info"`
		Paths               map[string]any `json:"paths"`
		SecurityDefinitions map[string]any `json:"securityDefinitions"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &doc))
	require.Equal(t, "2.0", doc.Swagger)
	require.Equal(t, "Sylk API", doc.Info.Title)
	require.Contains(t, doc.Paths, "/v1/sessions")
	require.Contains(t, doc.Paths, "/v1/sessions/{session}/events:stream")
	require.Contains(t, doc.SecurityDefinitions, "ApiKey")

	r = h.do(t, http.MethodPost, "/healthz", "")
	requireError(t, r, http.StatusMethodNotAllowed, codes.Unimplemented, ReasonMethodNotAllowed, "not allowed")
}

func TestMetricsUseRoutePatterns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	require.Equal(t, http.StatusOK, h.do(t, http.MethodGet, "/v1/sessions/s1", "", bearer(h.member)).code)
	require.Equal(t, http.StatusNotFound, h.do(t, http.MethodGet, "/v1/sessions/nope", "", bearer(h.member)).code)
	require.Equal(t, http.StatusUnauthorized, h.do(t, http.MethodGet, "/v1/sessions/s1", "").code)

	require.Equal(t, 1.0, h.counter(t, "sylk_gateway_requests_total", map[string]string{"method": "GET", "code": "200"}))
	require.Equal(t, 1.0, h.counter(t, "sylk_gateway_requests_total", map[string]string{"method": "GET", "code": "404"}))
	require.Equal(t, 1.0, h.counter(t, "sylk_gateway_requests_total", map[string]string{"method": "GET", "code": "401"}))
	require.Equal(t, 2.0, h.counter(t, "sylk_gateway_request_duration_seconds", map[string]string{"method": "GET", "route": "/v1/{name=sessions/*}"}))
	for _, route := range h.labelValues(t, "sylk_gateway_request_duration_seconds", "route") {
		require.NotContains(t, route, "s1")
		require.NotContains(t, route, "nope")
	}
}

func TestPublicStatusMasksTransportErrors(t *testing.T) {
	t.Parallel()
	g := &Gateway{log: logx.Discard()}
	tests := []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"service status passes", status.Error(codes.FailedPrecondition, "session is completed"), codes.FailedPrecondition, "session is completed"},
		{"dial failure masked", status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 10.0.0.7:9090: connect: connection refused\""), codes.Unavailable, "service unavailable, try again later"},
		{"service unavailable passes", status.Error(codes.Unavailable, "librarian is reindexing"), codes.Unavailable, "librarian is reindexing"},
		{"plain error masked", errors.New("pq: password authentication failed"), codes.Internal, "request failed: internal error"},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := g.publicStatus(context.Background(), tt.err)
			require.Equal(t, tt.code, st.Code())
			require.Equal(t, tt.msg, st.Message())
			require.NotNil(t, apierr.Info(st), "every status has an ErrorInfo")
		})
	}
}

func TestUnavailableBackend(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// A gateway whose guide connection points at a closed port.
	conn, err := grpcDialClosedPort(t)
	require.NoError(t, err)
	gw, err := New(h.gw.cfg, logx.Discard(), h.db, Conns{Guide: conn}, nil)
	require.NoError(t, err)
	srv := newTestServer(t, gw)
	r := (&harness{url: srv}).do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member))
	b := requireError(t, r, http.StatusServiceUnavailable, codes.Unavailable, apierr.ReasonPeerUnavailable, "service unavailable")
	require.Equal(t, "1s", errorDetail(t, b, "google.rpc.RetryInfo")["retryDelay"])
}

func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.DrainTimeout = 5 * time.Second })
	gw, err := New(h.gw.cfg, logx.Discard(), h.db, Conns{Guide: h.conn}, nil)
	require.NoError(t, err)
	require.NoError(t, gw.Listen())
	require.NotEqual(t, "127.0.0.1:0", gw.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	base := "http://" + gw.Addr()
	client := &harness{url: base}
	require.Equal(t, http.StatusOK, client.do(t, http.MethodGet, "/readyz", "").code)

	// An open event stream does not hold up the shutdown.
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/v1/sessions/idle/events:stream?format=sse", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+h.member)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { open, _ := h.fake.idle(); return open == 1 }, 5*time.Second, 10*time.Millisecond)

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(4 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}
	require.Less(t, time.Since(start), 4*time.Second)
	require.Eventually(t, func() bool { _, closed := h.fake.idle(); return closed == 1 }, 5*time.Second, 10*time.Millisecond)
}

// With a shutdown delay, the gateway answers /readyz 503 from the start of
// the shutdown and goes on serving requests until the delay is over, so
// that a load balancer stops sending before it stops taking them.
func TestRunServesThroughTheShutdownDelay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.ShutdownDelay = time.Hour })
	gw, err := New(h.gw.cfg, logx.Discard(), h.db, Conns{Guide: h.conn}, nil)
	require.NoError(t, err)
	release := make(chan time.Time)
	gw.after = func(d time.Duration) <-chan time.Time {
		require.Equal(t, time.Hour, d)
		return release
	}
	require.NoError(t, gw.Listen())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	client := &harness{url: "http://" + gw.Addr()}
	require.Equal(t, http.StatusOK, client.do(t, http.MethodGet, "/readyz", "").code)

	cancel()
	require.Eventually(t, func() bool {
		return client.do(t, http.MethodGet, "/readyz", "").code == http.StatusServiceUnavailable
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, client.do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)).code,
		"requests are still served during the delay")
	select {
	case err := <-done:
		t.Fatalf("Run returned before the delay was over: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-done)
}

package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

const (
	sse1 = "id: 1\nevent: EVENT_TYPE_MESSAGE_RECEIVED\ndata: {\"sequence\":\"1\",\"sessionId\":\"s1\",\"type\":\"EVENT_TYPE_MESSAGE_RECEIVED\",\"source\":\"guide\",\"text\":\"hello\\nworld\",\"messageReceived\":{\"message\":\"sessions/s1/messages/m1\",\"author\":\"user\"}}\n\n"
	sse5 = "id: 5\nevent: EVENT_TYPE_MESSAGE_ROUTED\ndata: {\"sequence\":\"5\",\"sessionId\":\"s1\",\"type\":\"EVENT_TYPE_MESSAGE_ROUTED\",\"source\":\"guide\",\"messageRouted\":{\"target\":\"librarian\",\"tier\":\"classifier\"}}\n\n"
	sse9 = "id: 9\nevent: EVENT_TYPE_MESSAGE_ANSWERED\ndata: {\"sequence\":\"9\",\"sessionId\":\"s1\",\"type\":\"EVENT_TYPE_MESSAGE_ANSWERED\",\"source\":\"librarian\",\"createTime\":\"2025-01-02T03:04:05Z\",\"messageAnswered\":{\"agent\":\"librarian\",\"text\":\"found it\",\"hits\":[{\"title\":\"a.go\",\"path\":\"a.go\",\"lineStart\":3,\"kind\":\"HIT_KIND_CODE\"}]}}\n\n"
)

func TestSSE(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		name    string
		path    string
		headers []string
		want    string
	}{
		{"accept header", "/v1/sessions/s1/events:stream", []string{"Accept: text/event-stream"}, sse1 + sse5 + sse9},
		{"accept among others", "/v1/sessions/s1/events:stream", []string{"Accept: application/json;q=0.5, text/event-stream"}, sse1 + sse5 + sse9},
		{"format parameter", "/v1/sessions/s1/events:stream?format=sse", nil, sse1 + sse5 + sse9},
		{"resume with Last-Event-ID", "/v1/sessions/s1/events:stream", []string{"Accept: text/event-stream", "Last-Event-ID: 1"}, sse5 + sse9},
		{"resume with after_sequence", "/v1/sessions/s1/events:stream?format=sse&after_sequence=5", nil, sse9},
		{"Last-Event-ID wins", "/v1/sessions/s1/events:stream?format=sse&after_sequence=0", []string{"Last-Event-ID: 5"}, sse9},
		{"resume past the end", "/v1/sessions/s1/events:stream?format=sse", []string{"Last-Event-ID: 9"}, ""},
	}
	// The group returns once its parallel subtests are done.
	t.Run("streams", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := h.do(t, http.MethodGet, tt.path, "", append(tt.headers, bearer(h.viewer))...)
				require.Equal(t, http.StatusOK, r.code, r.body)
				require.Equal(t, "text/event-stream", r.header.Get("Content-Type"))
				require.Equal(t, "no-cache", r.header.Get("Cache-Control"))
				require.NotEmpty(t, r.header.Get("X-Request-Id"))
				require.Equal(t, tt.want, r.body)
			})
		}
	})

	calls := h.fake.callsOf("StreamEvents")
	require.Len(t, calls, len(tests))
	for _, md := range calls {
		require.Equal(t, []string{"acme"}, md.Get(identity.MDTenant))
		require.Equal(t, []string{"carol"}, md.Get(identity.MDUser))
		require.Equal(t, []string{identity.RoleViewer}, md.Get(identity.MDRole))
		require.Len(t, md.Get("x-request-id"), 1)
		require.Empty(t, md.Get("authorization"))
	}
}

func TestSSEErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		name       string
		path       string
		headers    []string
		httpStatus int
		code       codes.Code
		reason     string
		msg        string
	}{
		{"unknown session", "/v1/sessions/nope/events:stream?format=sse", []string{bearer(h.member)}, http.StatusNotFound, codes.NotFound, "SESSION_NOT_FOUND", "session sessions/nope not found"},
		{"bad Last-Event-ID", "/v1/sessions/s1/events:stream?format=sse", []string{bearer(h.member), "Last-Event-ID: abc"}, http.StatusBadRequest, codes.InvalidArgument, apierr.ReasonInvalidField, "Last-Event-ID"},
		{"bad after_sequence", "/v1/sessions/s1/events:stream?format=sse&after_sequence=-1", []string{bearer(h.member)}, http.StatusBadRequest, codes.InvalidArgument, apierr.ReasonInvalidField, "after_sequence"},
		{"no key", "/v1/sessions/s1/events:stream?format=sse", nil, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyMissing, "missing API key"},
		// Newline-delimited JSON fails before its first message in the
		// same form.
		{"unknown session, JSON lines", "/v1/sessions/nope/events:stream", []string{bearer(h.member)}, http.StatusNotFound, codes.NotFound, "SESSION_NOT_FOUND", "session sessions/nope not found"},
		{"bad after_sequence, JSON lines", "/v1/sessions/s1/events:stream?after_sequence=-1", []string{bearer(h.member)}, http.StatusBadRequest, codes.InvalidArgument, "INVALID_ARGUMENT", "after_sequence"},
		{"bad afterSequence, JSON lines", "/v1/sessions/s1/events:stream?afterSequence=abc", []string{bearer(h.member)}, http.StatusBadRequest, codes.InvalidArgument, "INVALID_ARGUMENT", "after_sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireError(t, h.do(t, http.MethodGet, tt.path, "", tt.headers...), tt.httpStatus, tt.code, tt.reason, tt.msg)
		})
	}
}

// completed is the fake Guide's error for sessions/broken in the JSON error
// form, on one line.
const completed = `{"code":9,"status":"FAILED_PRECONDITION","message":"session was completed","reason":"SESSION_COMPLETED",` +
	`"domain":"sylk.dev","metadata":{},"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"SESSION_COMPLETED",` +
	`"domain":"sylk.dev"}]}`

func TestSSEErrorAfterFirstEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, http.MethodGet, "/v1/sessions/broken/events:stream?format=sse", "", bearer(h.member))
	require.Equal(t, http.StatusOK, r.code)
	want := sse1 +
		"event: error\ndata: " + completed + "\n\n"
	require.Equal(t, want, r.body)

	// The same in newline-delimited JSON: a result line, then an error line.
	r = h.do(t, http.MethodGet, "/v1/sessions/broken/events:stream", "", bearer(h.member))
	require.Equal(t, http.StatusOK, r.code)
	lines := strings.Split(strings.TrimSpace(r.body), "\n")
	require.Len(t, lines, 2, r.body)
	require.Contains(t, lines[0], `"result":`)
	require.JSONEq(t, `{"error":`+completed+`}`, lines[1])
}

func TestSSEKeepaliveAndDisconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.SSEKeepalive = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/sessions/idle/events:stream", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-API-Key", h.member)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	sc := bufio.NewScanner(resp.Body)
	keepalives := 0
	for keepalives < 2 && sc.Scan() {
		if sc.Text() == ": keepalive" {
			keepalives++
			continue
		}
		require.Empty(t, sc.Text(), "only keepalive comments and their blank lines")
	}
	require.Equal(t, 2, keepalives, "scan: %v", sc.Err())
	open, _ := h.fake.idle()
	require.Equal(t, 1, open)

	// The client goes away: the gateway ends the service stream.
	cancel()
	require.Eventually(t, func() bool { _, closed := h.fake.idle(); return closed == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return h.counter(t, "sylk_gateway_request_duration_seconds", map[string]string{"route": routeStream}) == 1
	}, 5*time.Second, 10*time.Millisecond)
}

func TestNDJSONStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, http.MethodGet, "/v1/sessions/s1/events:stream?after_sequence=1", "", bearer(h.member))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, "application/x-ndjson", r.header.Get("Content-Type"))
	lines := strings.Split(strings.TrimSpace(r.body), "\n")
	require.Len(t, lines, 2)
	var seqs []string
	for _, l := range lines {
		var msg struct {
			Result struct {
				Event struct {
					Sequence string `json:"sequence"`
					Type     string `json:"type"`
				} `json:"event"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &msg), l)
		seqs = append(seqs, msg.Result.Event.Sequence)
	}
	require.Equal(t, []string{"5", "9"}, seqs)

	// An error before any result has the HTTP status mapped from its code
	// and the JSON error form of every other call (TestSSEErrors); after a
	// result it is a line {"error": {code, status, message}}
	// (TestSSEErrorAfterFirstEvent).
	r = h.do(t, http.MethodGet, "/v1/sessions/nope/events:stream", "", bearer(h.member))
	require.Equal(t, http.StatusNotFound, r.code)
	require.JSONEq(t, `{"code":5,"status":"NOT_FOUND","message":"session sessions/nope not found","reason":"SESSION_NOT_FOUND",`+
		`"domain":"sylk.dev","metadata":{"resource":"sessions/nope"},"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",`+
		`"reason":"SESSION_NOT_FOUND","domain":"sylk.dev","metadata":{"resource":"sessions/nope"}}]}`, r.body)
}

// TestStreamsEndWhenTheirKeyIsRevoked: an open stream's key is checked
// again as a new request's would be, so a revocation ends the stream within
// the auth cache TTL, in either format.
func TestStreamsEndWhenTheirKeyIsRevoked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) {
		c.AuthCacheTTL = 20 * time.Millisecond
		c.SSEKeepalive = time.Hour
	})
	ctx := context.Background()
	key, err := CreateAPIKey(ctx, h.db, "acme", "dave", identity.RoleMember, "to revoke")
	require.NoError(t, err)

	// The streams' requests end with the test at the latest, so that a
	// stream left open fails the test rather than hangs it.
	reqCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	get := func(path string) chan response {
		out := make(chan response, 1)
		go func() {
			req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, h.url+path, nil)
			if err != nil {
				panic(err)
			}
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- response{}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			out <- response{code: resp.StatusCode, header: resp.Header, body: string(b)}
		}()
		return out
	}
	// Both streams are open (the fake Guide holds them) before the key is
	// revoked.
	sse := get("/v1/sessions/idle/events:stream?format=sse")
	ndjson := get("/v1/sessions/idle/events:stream")
	require.Eventually(t, func() bool { open, _ := h.fake.idle(); return open == 2 }, 5*time.Second, 5*time.Millisecond)

	keys, err := ListAPIKeys(ctx, h.db, "acme")
	require.NoError(t, err)
	for _, k := range keys {
		if k.UserID == "dave" {
			require.NoError(t, RevokeAPIKey(ctx, h.db, "acme", k.ID))
		}
	}
	wait := func(c chan response) response {
		t.Helper()
		select {
		case r := <-c:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("the stream of a revoked key is still open")
			return response{}
		}
	}
	r := wait(sse)
	require.Equal(t, http.StatusOK, r.code, "the stream had started")
	data, ok := strings.CutPrefix(r.body, "event: error\ndata: ")
	require.True(t, ok, r.body)
	requireErrorBody(t, strings.TrimSuffix(data, "\n\n"), codes.Unauthenticated, ReasonAPIKeyInvalid, "API key is no longer valid")
	requireError(t, wait(ndjson), http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyInvalid, "API key is no longer valid")
	require.Eventually(t, func() bool { _, closed := h.fake.idle(); return closed == 2 }, 5*time.Second, 5*time.Millisecond)
}

// TestStalledClientsDoNotHoldStreams: a client that keeps its connection
// but stops reading gets its stream ended once a write has waited two
// keepalive intervals, in either format, rather than holding the stream
// (and the service's) for as long as it likes.
func TestStalledClientsDoNotHoldStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.SSEKeepalive = 50 * time.Millisecond })
	addr := strings.TrimPrefix(h.url, "http://")
	for i, path := range []string{"/v1/sessions/flood/events:stream?format=sse", "/v1/sessions/flood/events:stream"} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
		_, err = io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: sylk\r\nAuthorization: Bearer "+h.member+"\r\n\r\n")
		require.NoError(t, err)
		// The client reads nothing: the stream fills the connection, then
		// its writes wait.
		require.Eventually(t, func() bool { open, closed := h.fake.flood(); return open == i+1 && closed == i+1 },
			10*time.Second, 10*time.Millisecond, "the stream to a client that stopped reading is still open: %s", path)
	}
}

// A shutdown ends an open event stream with a last "error" event that
// tells the client to reconnect, from the last event id it got, and the
// gateway stops without waiting out its drain timeout for the stream.
func TestSSEShutdownTellsTheClientToReconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) {
		c.ShutdownDelay = 0
		c.DrainTimeout = time.Minute
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	require.NoError(t, h.gw.Listen())
	done := make(chan error, 1)
	go func() { done <- h.gw.Run(ctx) }()

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+h.gw.Addr()+"/v1/sessions/idle/events:stream", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "7")
	req.Header.Set("X-API-Key", h.member)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { open, _ := h.fake.idle(); return open == 1 }, 5*time.Second, 10*time.Millisecond)

	begun := time.Now()
	stop()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the stream ends cleanly")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not stop")
	}
	require.Less(t, time.Since(begun), 10*time.Second, "the stream did not hold the drain")

	text := string(body)
	i := strings.Index(text, "retry: 1000\nevent: error\ndata: ")
	require.GreaterOrEqual(t, i, 0, "a last error event: %q", text)
	require.True(t, strings.HasSuffix(text, "\n\n"), text)
	data := strings.TrimSuffix(strings.TrimPrefix(text[i:], "retry: 1000\nevent: error\ndata: "), "\n\n")
	b := requireErrorBody(t, data, codes.Unavailable, ReasonShuttingDown, `reconnect with "Last-Event-ID: 7"`)
	require.Equal(t, "7", b.Metadata["last_event_id"])
}

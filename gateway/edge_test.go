package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that declares a body and never sends it is answered and cut at
// the body timeout, with a key or without.
func TestSlowBodyCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	u, err := url.Parse(h.url)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"without a key", "", http.StatusUnauthorized},
		{"with a key", "Authorization: Bearer " + h.member + "\r\n", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", u.Host)
			require.NoError(t, err)
			defer conn.Close()
			start := time.Now()
			_, err = io.WriteString(conn, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				tc.auth+"Content-Length: 100\r\n\r\n{")
			require.NoError(t, err)
			// A bound for the test only: the server must act well before it.
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode)
			_, _ = io.Copy(io.Discard, resp.Body)
			_, err = conn.Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the connection is closed")
			require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
			require.Less(t, time.Since(start), 10*time.Second)
		})
	}
}

// A body sent in time is served as before, and the deadline does not
// outlive it.
func TestBodyInTimeServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.BodyTimeout = time.Second })
	r := h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"demo"}`, bearer(h.member))
	require.Equal(t, http.StatusOK, r.code, r.body)
}

// Every response says nosniff and no-store, and none carries the services'
// metadata (Grpc-Metadata-*, Grpc-Trailer-*).
func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, r := range []response{
		h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"demo"}`, bearer(h.member), "TE: trailers"),
		h.do(t, http.MethodGet, "/v1/sessions/nope", "", bearer(h.member)),
		h.do(t, http.MethodGet, "/v1/sessions", ""),
		h.do(t, http.MethodGet, "/v1/nothing", "", bearer(h.member)),
		h.do(t, http.MethodGet, "/healthz", ""),
		h.do(t, http.MethodGet, "/openapi.json", ""),
	} {
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		for k := range r.header {
			require.False(t, strings.HasPrefix(k, "Grpc-"), "header %s exposed", k)
		}
	}
}

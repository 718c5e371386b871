// Package fake helps tests run provider adapters against httptest servers
// that speak each provider's wire format.
package fake

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// SSE writes server-sent events and flushes after each.
type SSE struct {
	w http.ResponseWriter
	f http.Flusher
}

// NewSSE starts an event-stream response.
func NewSSE(w http.ResponseWriter) *SSE {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &SSE{w: w, f: f}
	s.flush()
	return s
}

func (s *SSE) flush() {
	if s.f != nil {
		s.f.Flush()
	}
}

// Event writes one event; an empty name writes a data-only event.
func (s *SSE) Event(name, data string) {
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	for _, line := range strings.Split(data, "\n") {
		fmt.Fprintf(s.w, "data: %s\n", line)
	}
	fmt.Fprint(s.w, "\n")
	s.flush()
}

// Drop cuts the connection without finishing the response (a network drop).
func Drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	panic(http.ErrAbortHandler)
}

// Server starts an httptest server closed at cleanup.
func Server(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// JSONError writes a provider error body with status and optional Retry-After.
func JSONError(w http.ResponseWriter, status int, retryAfter, body string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

package gateway

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

// The console is served without a key at /, its assets under /assets/,
// and index.html for any page a browser opens outside /v1/; the API keeps
// asking for a key, also from a browser.
func TestConsoleIsServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)

	index := h.do(t, http.MethodGet, "/", "")
	require.Equal(t, http.StatusOK, index.code, index.body)
	require.Contains(t, index.header.Get("Content-Type"), "text/html")
	require.Contains(t, index.body, `<div id="app">`)
	require.Equal(t, "no-cache", index.header.Get("Cache-Control"))
	csp := index.header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.Contains(t, csp, "connect-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	require.NotContains(t, csp, "unsafe-eval")
	require.Equal(t, "nosniff", index.header.Get("X-Content-Type-Options"))
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(index.body, -1) {
		require.Contains(t, tag, " src=", "no inline scripts")
	}

	// Every URL is relative, so the console also works under a path prefix
	// (an Ingress that routes /sylk/ to the gateway).
	require.NotRegexp(t, `(?:src|href)="/`, index.body)
	assets := regexp.MustCompile(`(?:src|href)="\./(assets/[^"]+)"`).FindAllStringSubmatch(index.body, -1)
	require.NotEmpty(t, assets)
	for _, a := range assets {
		r := h.do(t, http.MethodGet, "/"+a[1], "")
		require.Equal(t, http.StatusOK, r.code, a[1])
		require.NotEmpty(t, r.body)
		require.Contains(t, r.header.Get("Cache-Control"), "immutable")
		if strings.HasSuffix(a[1], ".js") {
			require.Contains(t, r.header.Get("Content-Type"), "javascript")
		}
	}

	// A page the browser opens (a reload on a deep link) gets index.html.
	page := h.do(t, http.MethodGet, "/runs/abc", "", "Accept: text/html,application/xhtml+xml")
	require.Equal(t, http.StatusOK, page.code)
	require.Equal(t, index.body, page.body)
	head := h.do(t, http.MethodHead, "/", "")
	require.Equal(t, http.StatusOK, head.code)

	missing := h.do(t, http.MethodGet, "/assets/nope.js", "")
	requireError(t, missing, http.StatusNotFound, codes.NotFound, ReasonRouteNotFound, "/assets/nope.js")

	// The API is not the console, whatever the client accepts.
	api := h.do(t, http.MethodGet, "/v1/sessions", "", "Accept: text/html")
	requireError(t, api, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyMissing, "")
	other := h.do(t, http.MethodGet, "/runs/abc", "")
	requireError(t, other, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyMissing, "")
	post := h.do(t, http.MethodPost, "/", "{}")
	requireError(t, post, http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyMissing, "")
}

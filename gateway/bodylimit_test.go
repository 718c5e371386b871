package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/testenv"
)

// TestDocumentBodyLimit: a document's route has a body limit of its own,
// above the Academic's document limit by default, and a 413 names the
// limit and the flag that raises it.
func TestDocumentBodyLimit(t *testing.T) {
	t.Parallel()
	defaults := testenv.FromFlags[Config](t)
	// The Academic accepts 2 MiB of content (-academic.max-document-bytes):
	// its JSON form must pass, escaped newlines and all.
	require.Greater(t, defaults.MaxDocumentBodyBytes, int64(2*(2<<20)))

	h := newHarness(t, func(c *Config) { c.MaxBodyBytes, c.MaxDocumentBodyBytes = 2048, 8192 })
	doc := func(n int) string { return `{"title":"t","content":"` + strings.Repeat("x", n) + `"}` }

	// Within the document limit, above the general one: not refused for
	// its size (this harness has no Academic, so the route is unknown).
	r := h.do(t, http.MethodPost, "/v1/documents", doc(4096), bearer(h.member))
	require.NotEqual(t, http.StatusRequestEntityTooLarge, r.code, r.body)

	b := requireError(t, h.do(t, http.MethodPost, "/v1/documents", doc(9000), bearer(h.member)),
		http.StatusRequestEntityTooLarge, codes.InvalidArgument, ReasonBodyTooLarge, "limit of 8192 bytes")
	require.Contains(t, b.Message, "-gateway.max-document-body-bytes")
	require.Equal(t, "8192", b.Metadata["limit_bytes"])

	// Other routes keep the general limit.
	b = requireError(t, h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"`+strings.Repeat("x", 4096)+`"}`, bearer(h.member)),
		http.StatusRequestEntityTooLarge, codes.InvalidArgument, ReasonBodyTooLarge, "limit of 2048 bytes")
	require.Contains(t, b.Message, "-gateway.max-body-bytes")
}

// TestIndexRequestTimeout: registering or indexing a repository with wait
// may wait for the index beyond the general request timeout; without it
// the call answers at once and keeps the general one.
func TestIndexRequestTimeout(t *testing.T) {
	t.Parallel()
	g := &Gateway{cfg: Config{RequestTimeout: 1, IndexTimeout: 2}}
	for _, tt := range []struct {
		path, body string
		want       int64
	}{
		{"/v1/repositories?wait=true", "", 2},
		{"/v1/repositories?index=true&wait=1", `{"path":"/r"}`, 2},
		{"/v1/repositories", `{"path":"/r"}`, 1},
		{"/v1/repositories?wait=false", "", 1},
		{"/v1/repositories/abc:index", `{"wait":true}`, 2},
		{"/v1/repositories/abc:index", `{"full":true}`, 1},
		{"/v1/repositories/abc:index", "", 1},
		{"/v1/repositories/abc/tools?wait=true", "", 1},
		{"/v1/operations/abc", "", 1},
		{"/v1/sessions?wait=true", "", 1},
		{"/v1/repositories/abc:index/other", `{"wait":true}`, 1},
	} {
		r, err := http.NewRequest(http.MethodPost, "http://x"+tt.path, strings.NewReader(tt.body))
		require.NoError(t, err)
		require.Equal(t, tt.want, int64(g.requestTimeout(r)), tt.path+" "+tt.body)
		if tt.body != "" {
			left, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			require.Equal(t, tt.body, string(left), "the body is left for the service")
		}
	}
	r, err := http.NewRequest(http.MethodGet, "http://x/v1/repositories?wait=true", nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), int64(g.requestTimeout(r)))
}

// TestStreamsHaveNoRequestTimeout: a session's event stream and an
// operation's watch are streams (no request timeout); other calls are not.
func TestStreamsHaveNoRequestTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodGet, "/v1/sessions/s1/events:stream", true},
		{http.MethodGet, "/v1/operations/abc:watch", true},
		{http.MethodGet, "/v1/operations/abc", false},
		{http.MethodPost, "/v1/operations/abc:cancel", false},
		{http.MethodPost, "/v1/operations/abc:watch", false},
		{http.MethodGet, "/v1/repositories/abc:watch", false},
	} {
		r, err := http.NewRequest(tt.method, "http://x"+tt.path, nil)
		require.NoError(t, err)
		require.Equal(t, tt.want, isStream(r), tt.method+" "+tt.path)
	}
}

package gateway

import (
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

// TestIndexRequestTimeout: registering or indexing a repository may wait
// for the index beyond the general request timeout.
func TestIndexRequestTimeout(t *testing.T) {
	t.Parallel()
	g := &Gateway{cfg: Config{RequestTimeout: 1, IndexTimeout: 2}}
	for path, want := range map[string]int64{
		"/v1/repositories":                 2,
		"/v1/repositories/abc:index":       2,
		"/v1/repositories/abc/tools":       1,
		"/v1/operations/abc":               1,
		"/v1/sessions":                     1,
		"/v1/repositories/abc:index/other": 1,
	} {
		r, err := http.NewRequest(http.MethodPost, "http://x"+path, nil)
		require.NoError(t, err)
		require.Equal(t, want, int64(g.requestTimeout(r)), path)
	}
	r, err := http.NewRequest(http.MethodGet, "http://x/v1/repositories", nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), int64(g.requestTimeout(r)))
}

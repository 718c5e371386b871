package llm_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
)

// An answer body is cut at MaxResponseBytes: an endpoint that never stops
// cannot fill the caller's memory.
func TestHTTPClientCutsEndlessAnswers(t *testing.T) {
	t.Parallel()
	chunk := strings.Repeat("x", 1<<20)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range llm.MaxResponseBytes>>20 + 2 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(hs.Close)
	resp, err := llm.ProviderOptions{}.Client().Get(hs.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	require.ErrorIs(t, err, llm.ErrResponseTooLarge)
	require.EqualValues(t, llm.MaxResponseBytes, n)
}

// A client limited to public addresses does not reach loopback.
func TestHTTPClientPublicOnly(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(hs.Close)
	_, err := llm.ProviderOptions{PublicOnly: true}.Client().Get(hs.URL)
	require.ErrorIs(t, err, llm.ErrPrivateAddress)
	resp, err := llm.ProviderOptions{}.Client().Get(hs.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
}

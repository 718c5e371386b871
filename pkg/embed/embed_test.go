package embed

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	v := []float32{0, 1.5, -2.25, 3e-7}
	got, err := Decode(Encode(v))
	require.NoError(t, err)
	require.Equal(t, v, got)
	_, err = Decode([]byte{1, 2, 3})
	require.Error(t, err)
}

func TestHashing(t *testing.T) {
	t.Parallel()
	h, err := NewHashing(256)
	require.NoError(t, err)
	require.Equal(t, 256, h.Dims())
	require.Equal(t, "hashing-v1-256", h.Name())
	_, err = NewHashing(4)
	require.Error(t, err)

	vecs, err := h.Embed(t.Context(), []string{
		"func parseHTTPRequest(r *http.Request) reads the request body",
		"parse the http request",
		"compute exponential backoff delay with jitter",
		"",
	})
	require.NoError(t, err)
	require.Len(t, vecs, 4)
	for _, v := range vecs[:3] {
		require.InDelta(t, 1.0, float64(Dot(v, v)), 1e-5, "unit length")
	}
	require.Zero(t, Dot(vecs[3], vecs[3]), "nothing to hash")
	related := Dot(vecs[0], vecs[1])
	unrelated := Dot(vecs[0], vecs[2])
	require.Greater(t, related, float32(0.3))
	require.Greater(t, related, unrelated+0.2)
	again := h.Vector("parse the http request")
	require.Equal(t, vecs[1], again, "deterministic")
}

func TestSplitAndStem(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"parse", "HTTP", "Request", "2"}, SplitIdentifier("parseHTTPRequest2"))
	require.Equal(t, []string{"compute", "backoff"}, SplitIdentifier("compute_backoff"))
	for _, w := range []string{"parse", "parses", "parsed", "parsing"} {
		require.Equal(t, "pars", Stem(w), w)
	}
}

// embeddingsServer speaks the /v1/embeddings wire format: it answers each
// input with a vector whose first element is the input's length.
func embeddingsServer(t *testing.T, dims int, calls *int) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*calls++
		if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer k1" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`))
			return
		}
		var req struct {
			Model          string   `json:"model"`
			Input          []string `json:"input"`
			EncodingFormat string   `json:"encoding_format"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		type datum struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		resp := struct {
			Object string  `json:"object"`
			Data   []datum `json:"data"`
			Model  string  `json:"model"`
			Usage  struct {
				PromptTokens int `json:"prompt_tokens"`
				TotalTokens  int `json:"total_tokens"`
			} `json:"usage"`
		}{Object: "list", Model: req.Model}
		// Answer in reverse order: clients must place vectors by index.
		for i := len(req.Input) - 1; i >= 0; i-- {
			v := make([]float32, dims)
			v[0] = float32(len(req.Input[i]))
			v[1] = 1
			resp.Data = append(resp.Data, datum{Object: "embedding", Index: i, Embedding: v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
}

func TestOpenAI(t *testing.T) {
	t.Parallel()
	calls := 0
	srv := embeddingsServer(t, 8, &calls)
	defer srv.Close()
	o, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1/", APIKey: "k1", Model: "m", Dims: 8, BatchSize: 2})
	require.NoError(t, err)
	require.Equal(t, 8, o.Dims())
	vecs, err := o.Embed(context.Background(), []string{"a", "bbb", "cc"})
	require.NoError(t, err)
	require.Equal(t, 2, calls, "batches of two")
	require.Len(t, vecs, 3)
	for i, n := range []float32{1, 3, 2} {
		require.InDelta(t, 1.0, float64(Dot(vecs[i], vecs[i])), 1e-5)
		require.InDelta(t, float64(n), float64(vecs[i][0]/vecs[i][1]), 1e-5, "order kept")
	}

	bad, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "wrong", Model: "m", Dims: 8})
	require.NoError(t, err)
	_, err = bad.Embed(context.Background(), []string{"a"})
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusUnauthorized, se.Code)
	require.Contains(t, se.Message, "Incorrect API key")

	wrongDims, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k1", Model: "m", Dims: 4})
	require.NoError(t, err)
	_, err = wrongDims.Embed(context.Background(), []string{"a"})
	require.ErrorContains(t, err, "dimensions")

	_, err = NewOpenAI(OpenAIConfig{})
	require.Error(t, err)
}

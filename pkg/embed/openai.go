package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/secrets"
)

// OpenAIConfig configures an OpenAI-compatible embeddings endpoint.
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. "https://api.openai.com/v1"; requests go
	// to BaseURL + "/embeddings".
	BaseURL string
	APIKey  string
	Model   string
	// Dims is the vector length the model returns (and, when the endpoint
	// supports it, the length requested).
	Dims int
	// BatchSize bounds the texts sent in one request.
	BatchSize int
	// Timeout bounds one request.
	Timeout time.Duration
	// HTTPClient is used when set.
	HTTPClient *http.Client
	// Agent is who the calls are attributed to in usage records.
	Agent string
}

// Gate admits, limits and records an embeddings call as it does a
// completion (pkg/llm/gate.Gate), the inputs through its secrets policy.
type Gate interface {
	Embed(ctx context.Context, c gate.EmbedCall, do gate.EmbedFunc) error
}

// OpenAI embeds through an OpenAI-compatible /embeddings endpoint.
type OpenAI struct {
	cfg    OpenAIConfig
	client *http.Client
	// gate carries every call once set (SetGate); without one the inputs
	// are redacted here and the calls go out directly.
	gate Gate
}

// SetGate sends every later call through g. It is set while the service is
// wired, before any call.
func (o *OpenAI) SetGate(g Gate) { o.gate = g }

// NewOpenAI validates cfg and returns the client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	var errs []error
	if cfg.BaseURL == "" {
		errs = append(errs, errors.New("embed: base URL is required"))
	}
	if cfg.Model == "" {
		errs = append(errs, errors.New("embed: model is required"))
	}
	if cfg.Dims < 1 {
		errs = append(errs, errors.New("embed: dimensions must be at least 1"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.BatchSize < 1 {
		cfg.BatchSize = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	return &OpenAI{cfg: cfg, client: client}, nil
}

// Dims is the configured vector length.
func (o *OpenAI) Dims() int { return o.cfg.Dims }

// Name is the model name with its dimensions.
func (o *OpenAI) Name() string { return fmt.Sprintf("openai:%s-%d", o.cfg.Model, o.cfg.Dims) }

type embeddingRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
	Dimensions     int      `json:"dimensions,omitempty"`
}

type embeddingResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

type errorResponse struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// StatusError is a non-2xx answer from the endpoint.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("embeddings endpoint answered %d: %s", e.Code, e.Message)
}

// Embed embeds texts in batches of BatchSize.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += o.cfg.BatchSize {
		end := min(start+o.cfg.BatchSize, len(texts))
		vecs, err := o.batch(ctx, texts[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

func (o *OpenAI) batch(ctx context.Context, texts []string) ([][]float32, error) {
	if o.gate == nil {
		redacted := make([]string, len(texts))
		for i, t := range texts {
			redacted[i] = secrets.Scrub(t)
		}
		out, _, err := o.call(ctx, redacted)
		return out, err
	}
	c := gate.EmbedCall{Provider: "openai", Model: o.cfg.Model, Inputs: texts}
	c.AgentType, c.AgentID = o.cfg.Agent, o.cfg.Agent
	if who, ok := identity.FromContext(ctx); ok {
		c.TenantID, c.UserID = who.TenantID, who.UserID
	}
	var out [][]float32
	err := o.gate.Embed(ctx, c, func(ctx context.Context, inputs []string) (int, error) {
		vecs, tokens, err := o.call(ctx, inputs)
		out = vecs
		return tokens, err
	})
	return out, err
}

// call makes one request to the endpoint and returns the vectors and the
// input tokens it reports.
func (o *OpenAI) call(ctx context.Context, texts []string) ([][]float32, int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	input := make([]string, len(texts))
	for i, t := range texts {
		// The endpoint rejects empty input.
		if strings.TrimSpace(t) == "" {
			t = " "
		}
		input[i] = t
	}
	body, err := json.Marshal(embeddingRequest{Model: o.cfg.Model, Input: input, EncodingFormat: "float", Dimensions: o.cfg.Dims})
	if err != nil {
		return nil, 0, fmt.Errorf("encode embeddings request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.cfg.BaseURL+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("build embeddings request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.cfg.APIKey)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("call embeddings endpoint: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("read embeddings response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e errorResponse
		msg := http.StatusText(resp.StatusCode)
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return nil, 0, &StatusError{Code: resp.StatusCode, Message: msg}
	}
	var er embeddingResponse
	if err := json.Unmarshal(raw, &er); err != nil {
		return nil, 0, fmt.Errorf("decode embeddings response: %w", err)
	}
	if len(er.Data) != len(texts) {
		return nil, 0, fmt.Errorf("embeddings endpoint returned %d vectors for %d inputs", len(er.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range er.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, 0, fmt.Errorf("embeddings endpoint returned a bad index %d", d.Index)
		}
		if len(d.Embedding) != o.cfg.Dims {
			return nil, 0, fmt.Errorf("embeddings endpoint returned %d dimensions, want %d", len(d.Embedding), o.cfg.Dims)
		}
		Normalize(d.Embedding)
		out[d.Index] = d.Embedding
	}
	return out, er.Usage.PromptTokens, nil
}

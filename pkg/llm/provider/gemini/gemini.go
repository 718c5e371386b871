// Package gemini adapts the Google Gemini API, through its official Go SDK
// (google.golang.org/genai), to llm.Provider.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/genai"

	"sylk.dev/sylk/pkg/llm"
)

// Provider calls Gemini.
type Provider struct {
	cfg       genai.ClientConfig
	aliases   llm.Aliases
	maxTokens int

	once   sync.Once
	client *genai.Client
	err    error
}

// New builds the provider; the SDK client is created on first use.
func New(o llm.ProviderOptions) *Provider {
	cc := genai.ClientConfig{APIKey: o.APIKey, Backend: genai.BackendGeminiAPI, HTTPClient: o.Client()}
	if o.BaseURL != "" {
		cc.HTTPOptions.BaseURL = o.BaseURL
	}
	aliases := o.Aliases
	if aliases == nil {
		aliases = llm.DefaultAliases(llm.Gemini)
	}
	mt := o.MaxTokens
	if mt <= 0 {
		mt = 4096
	}
	return &Provider{cfg: cc, aliases: aliases, maxTokens: mt}
}

func (p *Provider) models(ctx context.Context) (*genai.Models, error) {
	if p.cfg.APIKey == "" {
		return nil, fmt.Errorf("gemini: %w", llm.ErrNoCredentials)
	}
	p.once.Do(func() {
		cfg := p.cfg
		p.client, p.err = genai.NewClient(ctx, &cfg)
	})
	if p.err != nil {
		return nil, p.err
	}
	return p.client.Models, nil
}

// Name is "gemini".
func (*Provider) Name() string { return llm.Gemini }

// Models lists the catalogue.
func (*Provider) Models() []llm.ModelInfo { return llm.Catalogue(llm.Gemini) }

// Resolve maps aliases to model ids.
func (p *Provider) Resolve(m string) string { return p.aliases.Resolve(m) }

func (p *Provider) build(req *llm.Request) ([]*genai.Content, *genai.GenerateContentConfig, error) {
	mt := req.MaxTokens
	if mt <= 0 {
		mt = p.maxTokens
	}
	cfg := &genai.GenerateContentConfig{MaxOutputTokens: int32(mt)}
	system := req.System
	names := map[string]string{} // tool call id -> name, for function responses
	var contents []*genai.Content
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			if system != "" {
				system += "\n\n"
			}
			system += m.Content
		case llm.RoleUser:
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: m.Content}}})
		case llm.RoleAssistant:
			c := &genai.Content{Role: genai.RoleModel}
			if m.Content != "" {
				c.Parts = append(c.Parts, &genai.Part{Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				args := map[string]any{}
				if tc.Arguments != "" {
					if err := json.Unmarshal([]byte(tc.Arguments), &args); err != nil {
						return nil, nil, fmt.Errorf("gemini: tool call %s has invalid JSON arguments: %w", tc.ID, err)
					}
				}
				names[tc.ID] = tc.Name
				c.Parts = append(c.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: tc.ID, Name: tc.Name, Args: args}})
			}
			contents = append(contents, c)
		case llm.RoleTool:
			key := "output"
			if m.IsError {
				key = "error"
			}
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{
				ID: m.ToolCallID, Name: names[m.ToolCallID], Response: map[string]any{key: m.Content},
			}}}})
		}
	}
	if system != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: system}}}
	}
	if req.Temperature != nil {
		t := float32(*req.Temperature)
		cfg.Temperature = &t
	}
	if len(req.Tools) > 0 {
		tool := &genai.Tool{}
		for _, t := range req.Tools {
			tool.FunctionDeclarations = append(tool.FunctionDeclarations, &genai.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJsonSchema: t.Schema})
		}
		cfg.Tools = []*genai.Tool{tool}
	}
	return contents, cfg, nil
}

func usageOf(r *genai.GenerateContentResponse) (llm.Usage, bool) {
	if r.UsageMetadata == nil {
		return llm.Usage{}, false
	}
	return llm.Usage{InputTokens: int(r.UsageMetadata.PromptTokenCount), OutputTokens: int(r.UsageMetadata.CandidatesTokenCount)}, true
}

// Complete runs one call.
func (p *Provider) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	ms, err := p.models(ctx)
	if err != nil {
		return nil, err
	}
	contents, cfg, err := p.build(req)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	model := p.Resolve(req.Model)
	res, err := ms.GenerateContent(ctx, model, contents, cfg)
	if err != nil {
		return nil, wrap(err)
	}
	r := &llm.Response{Provider: llm.Gemini, Model: model, Latency: time.Since(start)}
	r.Usage, _ = usageOf(res)
	if len(res.Candidates) == 0 || res.Candidates[0].Content == nil {
		return nil, &llm.Error{Provider: llm.Gemini, Message: "malformed payload from provider: no candidates"}
	}
	c := res.Candidates[0]
	r.FinishReason = string(c.FinishReason)
	var text strings.Builder
	for i, part := range c.Content.Parts {
		if part.Text != "" && !part.Thought {
			text.WriteString(part.Text)
		}
		if fc := part.FunctionCall; fc != nil {
			args, _ := json.Marshal(fc.Args)
			r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: callID(fc.ID, i), Name: fc.Name, Arguments: string(args)})
		}
	}
	r.Content = text.String()
	return r, nil
}

func callID(id string, n int) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("call_%d", n)
}

// Stream runs one streamed call. Gemini sends each function call whole, so
// it becomes tool_start, one tool_delta and tool_end.
func (p *Provider) Stream(ctx context.Context, req *llm.Request, h llm.Handler) error {
	em := llm.NewEmitter(h, req.ID)
	ms, err := p.models(ctx)
	if err != nil {
		return em.Fail(err)
	}
	contents, cfg, err := p.build(req)
	if err != nil {
		return em.Fail(err)
	}
	if err := em.Start(); err != nil {
		return em.Fail(err)
	}
	var usage llm.Usage
	finish := ""
	calls := 0
	for res, err := range ms.GenerateContentStream(ctx, p.Resolve(req.Model), contents, cfg) {
		if err != nil {
			if ctx.Err() != nil {
				return em.Fail(context.Cause(ctx))
			}
			return em.Fail(wrap(err))
		}
		if u, ok := usageOf(res); ok {
			usage = u
		}
		for _, c := range res.Candidates {
			if c.Content != nil {
				for _, part := range c.Content.Parts {
					if part.Text != "" && !part.Thought {
						if err := em.Text(part.Text); err != nil {
							return em.Fail(err)
						}
					}
					if fc := part.FunctionCall; fc != nil {
						id := callID(fc.ID, calls)
						calls++
						args, _ := json.Marshal(fc.Args)
						for _, step := range []func() error{
							func() error { return em.ToolStart(id, fc.Name) },
							func() error { return em.ToolDelta(id, string(args)) },
							func() error { return em.ToolEnd(id) },
						} {
							if err := step(); err != nil {
								return em.Fail(err)
							}
						}
					}
				}
			}
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
	}
	if ctx.Err() != nil {
		return em.Fail(context.Cause(ctx))
	}
	if finish == "" {
		return em.Fail(&llm.Error{Provider: llm.Gemini, Message: "stream closed before a finish reason (unexpected end of stream)"})
	}
	return em.End(usage, finish)
}

// CountTokens asks the API.
func (p *Provider) CountTokens(ctx context.Context, req *llm.Request) (int, error) {
	ms, err := p.models(ctx)
	if err != nil {
		return 0, err
	}
	contents, _, err := p.build(req)
	if err != nil {
		return 0, err
	}
	if req.System != "" {
		contents = append([]*genai.Content{{Role: genai.RoleUser, Parts: []*genai.Part{{Text: req.System}}}}, contents...)
	}
	res, err := ms.CountTokens(ctx, p.Resolve(req.Model), contents, nil)
	if err != nil {
		return 0, wrap(err)
	}
	return int(res.TotalTokens), nil
}

// Verify lists models (D-11).
func (p *Provider) Verify(ctx context.Context) error {
	ms, err := p.models(ctx)
	if err != nil {
		return err
	}
	if _, err := ms.List(ctx, &genai.ListModelsConfig{PageSize: 1}); err != nil {
		return wrap(err)
	}
	return nil
}

func wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ae genai.APIError
	if errors.As(err, &ae) {
		e := &llm.Error{Provider: llm.Gemini, StatusCode: ae.Code, Err: err, Message: fmt.Sprintf("HTTP %d %s", ae.Code, http.StatusText(ae.Code))}
		if ae.Status != "" && !strings.Contains(ae.Status, " ") {
			e.Message += " (" + ae.Status + ")"
		}
		for _, d := range ae.Details {
			if s, ok := d["retryDelay"].(string); ok {
				if dur, err := time.ParseDuration(s); err == nil {
					e.RetryAfter = dur
				}
			}
		}
		return e
	}
	if llm.IsMalformed(err) {
		return &llm.Error{Provider: llm.Gemini, Message: "malformed payload from provider: " + err.Error(), Err: err}
	}
	return &llm.Error{Provider: llm.Gemini, Message: err.Error(), Err: err}
}

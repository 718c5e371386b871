// Package openai adapts OpenAI's Chat Completions API, through its official
// Go SDK, to llm.Provider. Chat Completions (rather than the newer Responses
// API) is used because every OpenAI-compatible server (Ollama, vLLM,
// llama.cpp server, LM Studio) speaks it; set the base URL to use one.
package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"sylk.dev/sylk/pkg/llm"
)

// DefaultBaseURL is OpenAI's public endpoint.
const DefaultBaseURL = "https://api.openai.com/v1"

// Provider calls OpenAI or an OpenAI-compatible server.
type Provider struct {
	client     sdk.Client
	name       string
	aliases    llm.Aliases
	maxTokens  int
	compatible bool
	hasKey     bool
}

// New builds the client. The SDK's own retries are off: the gate retries.
func New(o llm.ProviderOptions) *Provider {
	base := o.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	key := o.APIKey
	if key == "" {
		key = "unused" // OpenAI-compatible servers commonly need none
	}
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithAPIKey(key), option.WithBaseURL(base),
		option.WithHTTPClient(o.Client())}
	name := o.Name
	if name == "" {
		name = llm.OpenAI
	}
	aliases := o.Aliases
	if aliases == nil {
		aliases = llm.DefaultAliases(llm.OpenAI)
	}
	mt := o.MaxTokens
	if mt <= 0 {
		mt = 4096
	}
	return &Provider{client: sdk.NewClient(opts...), name: name, aliases: aliases, maxTokens: mt,
		compatible: o.BaseURL != "" && !strings.HasPrefix(o.BaseURL, DefaultBaseURL), hasKey: o.APIKey != ""}
}

// Name is "openai" unless the options named it.
func (p *Provider) Name() string { return p.name }

// Models lists the catalogue.
func (*Provider) Models() []llm.ModelInfo { return llm.Catalogue(llm.OpenAI) }

// Resolve maps aliases to model ids.
func (p *Provider) Resolve(m string) string { return p.aliases.Resolve(m) }

func (p *Provider) params(req *llm.Request) sdk.ChatCompletionNewParams {
	mt := req.MaxTokens
	if mt <= 0 {
		mt = p.maxTokens
	}
	params := sdk.ChatCompletionNewParams{Model: shared.ChatModel(p.Resolve(req.Model))}
	if p.compatible {
		params.MaxTokens = sdk.Int(int64(mt))
	} else {
		params.MaxCompletionTokens = sdk.Int(int64(mt))
	}
	if req.System != "" {
		params.Messages = append(params.Messages, sdk.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			params.Messages = append(params.Messages, sdk.SystemMessage(m.Content))
		case llm.RoleUser:
			params.Messages = append(params.Messages, sdk.UserMessage(m.Content))
		case llm.RoleTool:
			params.Messages = append(params.Messages, sdk.ToolMessage(m.Content, m.ToolCallID))
		case llm.RoleAssistant:
			a := sdk.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = sdk.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID, Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
				}})
			}
			params.Messages = append(params.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	if req.Temperature != nil {
		params.Temperature = sdk.Float(*req.Temperature)
	}
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(t.Schema)}
		if t.Description != "" {
			fd.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fd))
	}
	return params
}

// Complete runs one call.
func (p *Provider) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	start := time.Now()
	res, err := p.client.Chat.Completions.New(ctx, p.params(req))
	if err != nil {
		return nil, p.wrap(err)
	}
	r := &llm.Response{Provider: p.name, Model: res.Model, Latency: time.Since(start),
		Usage: llm.Usage{InputTokens: int(res.Usage.PromptTokens), OutputTokens: int(res.Usage.CompletionTokens)}}
	if len(res.Choices) == 0 {
		return nil, &llm.Error{Provider: p.name, Message: "malformed payload from provider: no choices"}
	}
	c := res.Choices[0]
	r.Content = c.Message.Content
	r.FinishReason = c.FinishReason
	for _, tc := range c.Message.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return r, nil
}

// Stream runs one streamed call. Tool-call deltas arrive by index; the id
// and name come with the first delta of each index.
func (p *Provider) Stream(ctx context.Context, req *llm.Request, h llm.Handler) error {
	em := llm.NewEmitter(h, req.ID)
	params := p.params(req)
	params.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	stream := p.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	if err := em.Start(); err != nil {
		return em.Fail(err)
	}
	ids := map[int64]string{}
	var usage llm.Usage
	finish := ""
	for stream.Next() {
		ch := stream.Current()
		if ch.Usage.PromptTokens > 0 || ch.Usage.CompletionTokens > 0 {
			usage = llm.Usage{InputTokens: int(ch.Usage.PromptTokens), OutputTokens: int(ch.Usage.CompletionTokens)}
		}
		for _, c := range ch.Choices {
			if err := em.Text(c.Delta.Content); err != nil {
				return em.Fail(err)
			}
			for _, tc := range c.Delta.ToolCalls {
				id, ok := ids[tc.Index]
				if !ok {
					id = tc.ID
					if id == "" {
						id = fmt.Sprintf("call_%d", tc.Index)
					}
					ids[tc.Index] = id
					if err := em.ToolStart(id, tc.Function.Name); err != nil {
						return em.Fail(err)
					}
				}
				if err := em.ToolDelta(id, tc.Function.Arguments); err != nil {
					return em.Fail(err)
				}
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
				idx := make([]int64, 0, len(ids))
				for i := range ids {
					idx = append(idx, i)
				}
				sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
				for _, i := range idx {
					if err := em.ToolEnd(ids[i]); err != nil {
						return em.Fail(err)
					}
				}
				clear(ids)
			}
		}
	}
	if err := stream.Err(); err != nil {
		if ctx.Err() != nil {
			return em.Fail(context.Cause(ctx))
		}
		return em.Fail(p.wrap(err))
	}
	if ctx.Err() != nil {
		return em.Fail(context.Cause(ctx))
	}
	if finish == "" {
		return em.Fail(&llm.Error{Provider: p.name, Message: "stream closed before a finish reason (unexpected end of stream)"})
	}
	return em.End(usage, finish)
}

// CountTokens estimates len/4: Chat Completions has no counting endpoint.
func (p *Provider) CountTokens(_ context.Context, req *llm.Request) (int, error) {
	return llm.EstimateRequest(req), nil
}

// Verify lists models (D-11).
func (p *Provider) Verify(ctx context.Context) error {
	if !p.hasKey && !p.compatible {
		return fmt.Errorf("%s: %w", p.name, llm.ErrNoCredentials)
	}
	if _, err := p.client.Models.List(ctx); err != nil {
		return p.wrap(err)
	}
	return nil
}

func (p *Provider) wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ae *sdk.Error
	if errors.As(err, &ae) {
		e := &llm.Error{Provider: p.name, StatusCode: ae.StatusCode, Err: err, Message: fmt.Sprintf("HTTP %d %s", ae.StatusCode, http.StatusText(ae.StatusCode))}
		if ae.Code != "" {
			e.Message += " (" + ae.Code + ")"
		}
		if ae.Response != nil {
			e.RetryAfter = llm.ParseRetryAfter(ae.Response.Header.Get("Retry-After"), time.Now())
		}
		return e
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		e := &llm.Error{Provider: p.name, Message: "stream error", Err: err}
		switch m := se.Message; {
		case strings.Contains(m, "rate_limit"):
			e.StatusCode = http.StatusTooManyRequests
		case strings.Contains(m, "overloaded"), strings.Contains(m, "unavailable"):
			e.StatusCode = http.StatusServiceUnavailable
		case strings.Contains(m, "server_error"):
			e.StatusCode = http.StatusInternalServerError
		}
		return e
	}
	if llm.IsMalformed(err) {
		return &llm.Error{Provider: p.name, Message: "malformed payload from provider: " + err.Error(), Err: err}
	}
	return &llm.Error{Provider: p.name, Message: err.Error(), Err: err}
}

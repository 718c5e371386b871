// Package anthropic adapts the Anthropic Messages API, through its official
// Go SDK, to llm.Provider.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"sylk.dev/sylk/pkg/llm"
)

// Provider calls Anthropic.
type Provider struct {
	client    sdk.Client
	aliases   llm.Aliases
	maxTokens int
	hasKey    bool
}

// New builds the client. The SDK's own retries are off: the gate retries.
func New(o llm.ProviderOptions) *Provider {
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(0), option.WithAPIKey(o.APIKey)}
	if o.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(o.BaseURL))
	}
	opts = append(opts, option.WithHTTPClient(o.Client()))
	aliases := o.Aliases
	if aliases == nil {
		aliases = llm.DefaultAliases(llm.Anthropic)
	}
	mt := o.MaxTokens
	if mt <= 0 {
		mt = 4096
	}
	return &Provider{client: sdk.NewClient(opts...), aliases: aliases, maxTokens: mt, hasKey: o.APIKey != ""}
}

// Name is "anthropic".
func (*Provider) Name() string { return llm.Anthropic }

// Models lists the catalogue.
func (*Provider) Models() []llm.ModelInfo { return llm.Catalogue(llm.Anthropic) }

// Resolve maps aliases to model ids.
func (p *Provider) Resolve(m string) string { return p.aliases.Resolve(m) }

func (p *Provider) params(req *llm.Request) (sdk.MessageNewParams, error) {
	mt := req.MaxTokens
	if mt <= 0 {
		mt = p.maxTokens
	}
	params := sdk.MessageNewParams{Model: sdk.Model(p.Resolve(req.Model)), MaxTokens: int64(mt)}
	system := req.System
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			if system != "" {
				system += "\n\n"
			}
			system += m.Content
		case llm.RoleUser:
			params.Messages = append(params.Messages, sdk.NewUserMessage(sdk.NewTextBlock(m.Content)))
		case llm.RoleTool:
			params.Messages = append(params.Messages, sdk.NewUserMessage(sdk.NewToolResultBlock(m.ToolCallID, m.Content, m.IsError)))
		case llm.RoleAssistant:
			var blocks []sdk.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, sdk.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				var input any = map[string]any{}
				if tc.Arguments != "" {
					if err := json.Unmarshal([]byte(tc.Arguments), &input); err != nil {
						return params, fmt.Errorf("anthropic: tool call %s has invalid JSON arguments: %w", tc.ID, err)
					}
				}
				blocks = append(blocks, sdk.NewToolUseBlock(tc.ID, input, tc.Name))
			}
			params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
		default:
			return params, fmt.Errorf("anthropic: unsupported role %q", m.Role)
		}
	}
	if system != "" {
		params.System = []sdk.TextBlockParam{{Text: system}}
	}
	if req.Temperature != nil {
		params.Temperature = sdk.Float(*req.Temperature)
	}
	for _, t := range req.Tools {
		tp := sdk.ToolParam{Name: t.Name, InputSchema: sdk.ToolInputSchemaParam{Properties: t.Schema["properties"]}}
		if req, ok := t.Schema["required"].([]string); ok {
			tp.InputSchema.Required = req
		}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tp})
	}
	return params, nil
}

// Complete runs one call.
func (p *Provider) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	msg, err := p.client.Messages.New(ctx, params)
	if err != nil {
		return nil, wrap(err)
	}
	r := &llm.Response{Provider: llm.Anthropic, Model: string(msg.Model), FinishReason: string(msg.StopReason), Latency: time.Since(start),
		Usage: llm.Usage{InputTokens: int(msg.Usage.InputTokens), OutputTokens: int(msg.Usage.OutputTokens)}}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
		}
	}
	r.Content = text.String()
	return r, nil
}

// Stream runs one streamed call (B-10: tool call ids by content-block index).
func (p *Provider) Stream(ctx context.Context, req *llm.Request, h llm.Handler) error {
	em := llm.NewEmitter(h, req.ID)
	params, err := p.params(req)
	if err != nil {
		return em.Fail(err)
	}
	stream := p.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	toolIDForIndex := map[int64]string{}
	var usage llm.Usage
	stop := ""
	started := false
	for stream.Next() {
		ev := stream.Current()
		if !started && ev.Type != "message_start" {
			if err := em.Start(); err != nil {
				return em.Fail(err)
			}
			started = true
		}
		var herr error
		switch ev.Type {
		case "message_start":
			usage.InputTokens = int(ev.Message.Usage.InputTokens)
			if !started {
				herr, started = em.Start(), true
			}
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				toolIDForIndex[ev.Index] = ev.ContentBlock.ID
				herr = em.ToolStart(ev.ContentBlock.ID, ev.ContentBlock.Name)
			} else if ev.ContentBlock.Text != "" {
				herr = em.Text(ev.ContentBlock.Text)
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				herr = em.Text(ev.Delta.Text)
			case "input_json_delta":
				if id, ok := toolIDForIndex[ev.Index]; ok {
					herr = em.ToolDelta(id, ev.Delta.PartialJSON)
				}
			}
		case "content_block_stop":
			if id, ok := toolIDForIndex[ev.Index]; ok {
				delete(toolIDForIndex, ev.Index)
				herr = em.ToolEnd(id)
			}
		case "message_delta":
			if ev.Usage.InputTokens > 0 {
				usage.InputTokens = int(ev.Usage.InputTokens)
			}
			usage.OutputTokens = int(ev.Usage.OutputTokens)
			if ev.Delta.StopReason != "" {
				stop = string(ev.Delta.StopReason)
			}
		case "message_stop":
			return em.End(usage, stop)
		}
		if herr != nil {
			return em.Fail(herr)
		}
	}
	if err := stream.Err(); err != nil {
		if ctx.Err() != nil {
			return em.Fail(context.Cause(ctx))
		}
		return em.Fail(wrap(err))
	}
	if ctx.Err() != nil {
		return em.Fail(context.Cause(ctx))
	}
	return em.Fail(&llm.Error{Provider: llm.Anthropic, Message: "stream closed before message_stop (unexpected end of stream)"})
}

// CountTokens asks the API; without a key it falls back to the len/4 estimate.
func (p *Provider) CountTokens(ctx context.Context, req *llm.Request) (int, error) {
	params, err := p.params(req)
	if err != nil {
		return 0, err
	}
	cp := sdk.MessageCountTokensParams{Model: params.Model, Messages: params.Messages}
	if len(params.System) > 0 {
		cp.System = sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}
	}
	res, err := p.client.Messages.CountTokens(ctx, cp)
	if err != nil {
		return 0, wrap(err)
	}
	return int(res.InputTokens), nil
}

// Verify lists models (D-11).
func (p *Provider) Verify(ctx context.Context) error {
	if !p.hasKey {
		return fmt.Errorf("anthropic: %w", llm.ErrNoCredentials)
	}
	_, err := p.client.Models.List(ctx, sdk.ModelListParams{})
	if err != nil {
		return wrap(err)
	}
	return nil
}

// wrap turns an SDK error into an *llm.Error with status and Retry-After.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ae *sdk.Error
	if errors.As(err, &ae) {
		e := &llm.Error{Provider: llm.Anthropic, StatusCode: ae.StatusCode, Err: err}
		if ae.Response != nil {
			e.RetryAfter = llm.ParseRetryAfter(ae.Response.Header.Get("Retry-After"), time.Now())
		}
		e.Message = fmt.Sprintf("HTTP %d %s", ae.StatusCode, http.StatusText(ae.StatusCode))
		if t := errorType(ae.RawJSON()); t != "" {
			e.Message += " (" + t + ")"
		}
		if st := statusForType(errorType(ae.RawJSON())); st != 0 && e.StatusCode < 400 {
			// An error event inside a 200 stream: its type says what happened.
			e.StatusCode = st
			e.Message = fmt.Sprintf("stream error (%s)", errorType(ae.RawJSON()))
		}
		return e
	}
	if llm.IsMalformed(err) {
		return &llm.Error{Provider: llm.Anthropic, Message: "malformed payload from provider: " + err.Error(), Err: err}
	}
	msg := err.Error()
	// A mid-stream error event: classify by its error type.
	for _, t := range []string{"rate_limit_error", "overloaded_error", "api_error", "authentication_error", "invalid_request_error"} {
		if strings.Contains(msg, t) {
			return &llm.Error{Provider: llm.Anthropic, StatusCode: statusForType(t), Message: "stream error (" + t + ")", Err: err}
		}
	}
	return &llm.Error{Provider: llm.Anthropic, Message: msg, Err: err}
}

func errorType(raw string) string {
	var body struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) != nil {
		return ""
	}
	return body.Error.Type
}

func statusForType(t string) int {
	switch t {
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "overloaded_error":
		return http.StatusServiceUnavailable
	case "api_error":
		return http.StatusInternalServerError
	case "authentication_error":
		return http.StatusUnauthorized
	case "invalid_request_error":
		return http.StatusBadRequest
	}
	return 0
}

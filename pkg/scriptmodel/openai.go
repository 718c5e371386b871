package scriptmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
)

// The OpenAI chat completions wire format (also what Ollama, vLLM and other
// compatible servers speak).

type oaRequest struct {
	Model    string      `json:"model"`
	Messages []oaMessage `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  []oaToolCall    `json:"tool_calls,omitempty"`
}

type oaToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// contentText reads a content that is a string or a list of parts.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var out string
	for _, p := range parts {
		if p.Text != "" {
			out += p.Text
		} else if len(p.Content) > 0 {
			out += contentText(p.Content)
		}
	}
	return out
}

func parseArgs(s string) map[string]any {
	args := map[string]any{}
	_ = json.Unmarshal([]byte(s), &args)
	return args
}

func (r oaRequest) neutral() Request {
	out := Request{API: "openai", Model: r.Model, Stream: r.Stream}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, t.Function.Name)
	}
	for _, m := range r.Messages {
		text := contentText(m.Content)
		if m.Role == "system" || m.Role == "developer" {
			out.System += text
			continue
		}
		msg := Message{Role: m.Role, Content: text}
		for _, c := range m.ToolCalls {
			msg.Calls = append(msg.Calls, Call{Name: c.Function.Name, Args: parseArgs(c.Function.Arguments)})
		}
		out.Messages = append(out.Messages, msg)
	}
	return out
}

var callSeq atomic.Int64

func callID(prefix string) string { return prefix + strconv.FormatInt(callSeq.Add(1), 10) }

func (s *Server) openAI(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		badRequest(w, err)
		return
	}
	var req oaRequest
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest(w, fmt.Errorf("decode chat completion request: %w", err))
		return
	}
	a := s.play(req.neutral())
	if rejected(w, a) {
		return
	}
	finish := "stop"
	calls := make([]oaToolCall, len(a.calls))
	for i, c := range a.calls {
		calls[i].ID, calls[i].Type = callID("call_"), "function"
		calls[i].Function.Name, calls[i].Function.Arguments = c.Name, argsJSON(c)
		finish = "tool_calls"
	}
	usage := map[string]int{"prompt_tokens": a.usage.in, "completion_tokens": a.usage.out, "total_tokens": a.usage.in + a.usage.out}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": a.text}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": callID("chatcmpl-"), "object": "chat.completion", "created": 1,
			"model": req.Model, "choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}}, "usage": usage})
		return
	}
	id := callID("chatcmpl-")
	out := newSSE(w)
	chunk := func(delta map[string]any, finish any) {
		out.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, piece := range pieces(a.text, 24) {
		chunk(map[string]any{"content": piece}, nil)
	}
	for i, c := range calls {
		idx := i
		head := oaToolCall{Index: &idx, ID: c.ID, Type: "function"}
		head.Function.Name = c.Function.Name
		chunk(map[string]any{"tool_calls": []oaToolCall{head}}, nil)
		for _, piece := range pieces(c.Function.Arguments, 16) {
			part := oaToolCall{Index: &idx}
			part.Function.Arguments = piece
			chunk(map[string]any{"tool_calls": []oaToolCall{part}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	out.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1, "model": req.Model,
		"choices": []any{}, "usage": usage})
	out.raw("[DONE]")
}

// pieces cuts s into parts of at most n bytes (a stream's deltas).
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

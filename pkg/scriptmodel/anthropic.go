package scriptmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// The Anthropic messages wire format.

type anRequest struct {
	Model    string          `json:"model"`
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     map[string]any  `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// neutral splits Anthropic's user messages that carry tool results into
// tool messages, as the OpenAI form has them.
func (r anRequest) neutral() Request {
	out := Request{API: "anthropic", Model: r.Model, Stream: r.Stream, System: contentText(r.System)}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, t.Name)
	}
	for _, m := range r.Messages {
		var blocks []anBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			out.Messages = append(out.Messages, Message{Role: m.Role, Content: contentText(m.Content)})
			continue
		}
		msg := Message{Role: m.Role}
		for _, b := range blocks {
			switch b.Type {
			case "text":
				msg.Content += b.Text
			case "tool_use":
				msg.Calls = append(msg.Calls, Call{Name: b.Name, Args: b.Input})
			case "tool_result":
				out.Messages = append(out.Messages, Message{Role: "tool", Content: contentText(b.Content), IsError: b.IsError})
			}
		}
		if msg.Content != "" || len(msg.Calls) > 0 || m.Role == "assistant" {
			out.Messages = append(out.Messages, msg)
		}
	}
	return out
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		badRequest(w, err)
		return
	}
	var req anRequest
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest(w, fmt.Errorf("decode messages request: %w", err))
		return
	}
	a := s.play(req.neutral())
	if rejected(w, a) {
		return
	}
	var blocks []anBlock
	if a.text != "" {
		blocks = append(blocks, anBlock{Type: "text", Text: a.text})
	}
	stop := "end_turn"
	for _, c := range a.calls {
		args := c.Args
		if args == nil {
			args = map[string]any{}
		}
		blocks = append(blocks, anBlock{Type: "tool_use", ID: callID("toolu_"), Name: c.Name, Input: args})
		stop = "tool_use"
	}
	id := callID("msg_")
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": a.usage.in, "output_tokens": a.usage.out}})
		return
	}
	out := newSSE(w)
	out.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": a.usage.in, "output_tokens": 1}}})
	for i, b := range blocks {
		switch b.Type {
		case "text":
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range pieces(b.Text, 24) {
				out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			out.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			args, _ := json.Marshal(b.Input)
			for _, piece := range pieces(string(args), 16) {
				out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		out.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	out.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": a.usage.out}})
	out.event("message_stop", map[string]any{"type": "message_stop"})
}

// Package llm is how every Sylk agent reaches a language model: request and
// response types, the Provider interface every adapter implements, streaming
// chunks with their state machine and accumulator, the model catalogue with
// aliases and prices, the error taxonomy with its classifier and retry
// policies, and context-window fitting. Providers live in pkg/llm/provider/*;
// the cluster-wide gate (priority queues, shared rate limits, budgets and
// circuit breakers) in pkg/llm/gate and its sibling packages.
package llm

import (
	"context"
	"time"
)

// Role is who wrote a message.
type Role string

// Roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of a conversation. An assistant message may carry tool
// calls; a tool message answers the call named by ToolCallID.
type Message struct {
	Role       Role
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	// IsError marks a tool result that reports a failure (for example a
	// validation error on malformed arguments, B-12 case 4).
	IsError bool
	// Relevance scores a message for context fitting (B-18); 0 means unscored.
	Relevance float64
}

// Tool describes a function the model may call. Schema is a JSON Schema object.
type Tool struct {
	Name        string
	Description string
	Schema      map[string]any
}

// ToolCall is a call the model asked for; Arguments is raw JSON text.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Attribution says who a call is for; it is recorded with the usage.
type Attribution struct {
	TenantID string
	// UserID is the user the call is made for; a member's usage report
	// holds only their own calls.
	UserID     string
	SessionID  string
	PipelineID string
	TaskID     string
	AgentID    string
	AgentType  string
	// UserInvoked marks a request a person is waiting on: it goes to the
	// user queue of the gate, is never rejected and preempts pipeline work.
	UserInvoked bool
}

// Request is one model call.
type Request struct {
	// ID identifies the request; the gate assigns one when empty.
	ID string
	// Provider names the provider; empty means the default provider.
	Provider string
	// Model is a model id or an alias (default, fast, powerful); empty means default.
	Model       string
	System      string
	Messages    []Message
	Tools       []Tool
	MaxTokens   int
	Temperature *float64
	Attribution
	// Priority is the gate class (100, 80, 60, 40, 20); 0 derives it from
	// the attribution (B-13).
	Priority int
	// TokenEstimate is reserved against budgets; 0 estimates it from the prompt.
	TokenEstimate int
	// TaskBudget and SessionBudget, when positive, override the configured
	// per-task and per-session token limits for this call (C-13).
	TaskBudget    int64
	SessionBudget int64
	CreatedAt     time.Time
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Total is input plus output.
func (u Usage) Total() int { return u.InputTokens + u.OutputTokens }

// Response is a completed (or, after an abort, partial) model answer.
type Response struct {
	Content      string
	ToolCalls    []ToolCall
	Usage        Usage
	FinishReason string
	Provider     string
	Model        string
	Latency      time.Duration
	// CostUSD is computed from the model catalogue.
	CostUSD float64
	// ChunkCount and StreamDuration are set for streamed responses.
	ChunkCount     int
	StreamDuration time.Duration
	// Partial is true when the stream ended without an end chunk.
	Partial bool
}

// ModelInfo is one catalogue entry (B-03).
type ModelInfo struct {
	ID   string
	Name string
	// MaxContext is the context window in tokens.
	MaxContext int
	// Prices in USD per million tokens.
	InputPricePerM  float64
	OutputPricePerM float64
}

// Cost is the USD cost of u on m.
func (m ModelInfo) Cost(u Usage) float64 {
	return (float64(u.InputTokens)*m.InputPricePerM + float64(u.OutputTokens)*m.OutputPricePerM) / 1e6
}

// Handler receives stream chunks in order. Returning an error halts
// generation (backpressure level 2, B-08); the partial response is kept.
type Handler func(Chunk) error

// Provider is one model vendor's adapter (B-03). Implementations are safe for
// concurrent use; Stream calls h from the calling goroutine only and returns
// after the last chunk.
type Provider interface {
	// Name is the provider's id: anthropic, openai, gemini, local.
	Name() string
	// Models lists the catalogue entries this provider serves.
	Models() []ModelInfo
	// Resolve maps an alias or empty string to a model id.
	Resolve(model string) string
	// Complete runs a call to the end.
	Complete(ctx context.Context, req *Request) (*Response, error)
	// Stream runs a call, handing every chunk to h: start first, end (with
	// usage and stop reason) last, or an error chunk when it fails.
	Stream(ctx context.Context, req *Request, h Handler) error
	// CountTokens counts the prompt tokens of req.
	CountTokens(ctx context.Context, req *Request) (int, error)
}

// Verifier is implemented by providers that can check their credentials
// cheaply (a models listing), used by credential verification (D-11).
type Verifier interface {
	Verify(ctx context.Context) error
}

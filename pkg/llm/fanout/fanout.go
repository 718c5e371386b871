// Package fanout carries a generation's stream over core NATS (B-06, B-09):
// every chunk is published as a stream message on
// <prefix>.llm.stream.<tenant>.<correlation id> for any agent or UI that
// follows the generation, and a StreamControl "cancel" sent to
// <prefix>.llm.stream.<tenant>.<correlation id>.control stops it early (a validator
// that saw something unsafe, a user's Ctrl+C in another process).
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/natsx"
)

// Meta is what every message of one generation carries.
type Meta struct {
	TenantID  string
	SessionID string
	Target    string
	Model     string
	AgentID   string
	Priority  int
}

// Chunk is the wire form of llm.Chunk.
type Chunk struct {
	Index      int                `json:"index"`
	Type       llm.ChunkType      `json:"type"`
	Text       string             `json:"text,omitempty"`
	ToolCall   *llm.ToolCallDelta `json:"tool_call,omitempty"`
	Usage      *llm.Usage         `json:"usage,omitempty"`
	StopReason string             `json:"stop_reason,omitempty"`
	Error      string             `json:"error,omitempty"`
	Timestamp  time.Time          `json:"timestamp"`
}

// Message is Message[StreamChunk] of B-06.
type Message struct {
	UUID          string            `json:"uuid"`
	CorrelationID string            `json:"correlation_id"`
	ParentID      string            `json:"parent_id"`
	TenantID      string            `json:"tenant_id,omitempty"`
	SessionID     string            `json:"session_id,omitempty"`
	Source        string            `json:"source"`
	Target        string            `json:"target,omitempty"`
	Type          string            `json:"type"`
	Priority      int               `json:"priority"`
	Metadata      map[string]string `json:"metadata"`
	Chunk         Chunk             `json:"chunk"`
}

// Control is a StreamControl message.
type Control struct {
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// ErrCancelled is the cause of a generation stopped by a control message.
var ErrCancelled = errors.New("llm stream cancelled by a control message")

// subject is a generation's: the tenant in it keeps one tenant's
// generations apart from another's, whatever their correlation ids.
func subject(bus *natsx.Bus, tenant, correlationID string) string {
	return bus.Subject("llm", "stream", natsx.Token(tenant), natsx.Token(correlationID))
}

// Handler publishes each chunk of the generation correlationID of tenant
// m.TenantID (from provider) and then hands it to next (which may be nil). Publishing is
// fire-and-forget core NATS: a slow follower never slows the generation.
func Handler(bus *natsx.Bus, provider, correlationID string, m Meta, next llm.Handler) llm.Handler {
	subj := subject(bus, m.TenantID, correlationID)
	return func(c llm.Chunk) error {
		msg := Message{UUID: uuid.NewString(), CorrelationID: correlationID, ParentID: correlationID, TenantID: m.TenantID, SessionID: m.SessionID,
			Source: provider, Target: m.Target, Type: "stream", Priority: m.Priority,
			Metadata: map[string]string{"model": m.Model, "agent_id": m.AgentID, "chunk_index": strconv.Itoa(c.Index), "chunk_type": string(c.Type)},
			Chunk:    Chunk{Index: c.Index, Type: c.Type, Text: c.Text, ToolCall: c.ToolCall, Usage: c.Usage, StopReason: c.StopReason, Timestamp: c.Timestamp}}
		if c.Err != nil {
			msg.Chunk.Error = c.Err.Error()
		}
		if b, err := json.Marshal(msg); err == nil {
			_ = bus.Conn.Publish(subj, b)
		}
		if next != nil {
			return next(c)
		}
		return nil
	}
}

// Subscribe calls fn for every message of tenant's generation
// correlationID, in order.
func Subscribe(bus *natsx.Bus, tenant, correlationID string, fn func(Message)) (*nats.Subscription, error) {
	sub, err := bus.Conn.Subscribe(subject(bus, tenant, correlationID), func(m *nats.Msg) {
		var msg Message
		if json.Unmarshal(m.Data, &msg) == nil {
			fn(msg)
		}
	})
	if err != nil {
		return nil, err
	}
	return sub, bus.Conn.Flush()
}

// Cancel asks whoever runs tenant's generation correlationID to stop it.
func Cancel(bus *natsx.Bus, tenant, correlationID, reason string) error {
	b, _ := json.Marshal(Control{Action: "cancel", Reason: reason})
	if err := bus.Conn.Publish(subject(bus, tenant, correlationID)+".control", b); err != nil {
		return fmt.Errorf("publish stream control: %w", err)
	}
	return bus.Conn.Flush()
}

// WithControl returns a context cancelled (cause wrapping ErrCancelled and
// the reason) when a cancel control message for tenant's correlationID
// arrives; call stop when the generation is over.
func WithControl(ctx context.Context, bus *natsx.Bus, tenant, correlationID string) (context.Context, func(), error) {
	cctx, cancel := context.WithCancelCause(ctx)
	sub, err := bus.Conn.Subscribe(subject(bus, tenant, correlationID)+".control", func(m *nats.Msg) {
		var c Control
		if json.Unmarshal(m.Data, &c) == nil && c.Action == "cancel" {
			cancel(fmt.Errorf("%w: %s", ErrCancelled, c.Reason))
		}
	})
	if err != nil {
		cancel(nil)
		return nil, nil, err
	}
	if err := bus.Conn.Flush(); err != nil {
		_ = sub.Unsubscribe()
		cancel(nil)
		return nil, nil, err
	}
	return cctx, func() { _ = sub.Unsubscribe(); cancel(nil) }, nil
}

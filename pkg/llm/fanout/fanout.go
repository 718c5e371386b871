// Package fanout carries a generation's stream over core NATS (B-06, B-09):
// every chunk is published as a sylk.llm.v1.StreamMessage on
// topology.LLMStreamSubject (the tenant and the correlation id) for any
// agent or UI that follows the generation, and a StreamControl CANCEL sent
// to topology.LLMStreamControlSubject stops it early (a validator that saw
// something unsafe, a user's Ctrl+C in another process).
package fanout

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
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

// ErrCancelled is the cause of a generation stopped by a control message.
var ErrCancelled = errors.New("llm stream cancelled by a control message")

// chunkTypes are the wire types of the chunk kinds.
var chunkTypes = map[llm.ChunkType]llmv1.ChunkType{
	llm.ChunkStart:     llmv1.ChunkType_CHUNK_TYPE_START,
	llm.ChunkText:      llmv1.ChunkType_CHUNK_TYPE_TEXT,
	llm.ChunkToolStart: llmv1.ChunkType_CHUNK_TYPE_TOOL_START,
	llm.ChunkToolDelta: llmv1.ChunkType_CHUNK_TYPE_TOOL_DELTA,
	llm.ChunkToolEnd:   llmv1.ChunkType_CHUNK_TYPE_TOOL_END,
	llm.ChunkEnd:       llmv1.ChunkType_CHUNK_TYPE_END,
	llm.ChunkError:     llmv1.ChunkType_CHUNK_TYPE_ERROR,
}

// wireChunk is the wire form of c.
func wireChunk(c llm.Chunk) *llmv1.StreamChunk {
	out := &llmv1.StreamChunk{Index: int32(c.Index), Type: chunkTypes[c.Type], Text: c.Text, StopReason: c.StopReason}
	if !c.Timestamp.IsZero() {
		out.CreateTime = timestamppb.New(c.Timestamp)
	}
	if t := c.ToolCall; t != nil {
		out.ToolCall = &llmv1.ToolCallDelta{Id: t.ID, Name: t.Name, ArgumentsDelta: t.ArgumentsDelta}
	}
	if u := c.Usage; u != nil {
		out.Usage = &llmv1.TokenUsage{InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens)}
	}
	if c.Err != nil {
		out.Error = c.Err.Error()
	}
	return out
}

// Handler publishes each chunk of the generation correlationID of tenant
// m.TenantID (from provider) and then hands it to next (which may be nil).
// Publishing is fire-and-forget core NATS: a slow follower never slows the
// generation.
func Handler(bus *natsx.Bus, provider, correlationID string, m Meta, next llm.Handler) llm.Handler {
	subj := topology.LLMStreamSubject(bus, m.TenantID, correlationID)
	return func(c llm.Chunk) error {
		msg := &llmv1.StreamMessage{Id: uuid.NewString(), CorrelationId: correlationID, ParentId: correlationID,
			TenantId: m.TenantID, SessionId: m.SessionID, Source: provider, Target: m.Target, Priority: int32(m.Priority),
			Model: m.Model, AgentId: m.AgentID, Chunk: wireChunk(c)}
		if b, err := proto.Marshal(msg); err == nil {
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
func Subscribe(bus *natsx.Bus, tenant, correlationID string, fn func(*llmv1.StreamMessage)) (*nats.Subscription, error) {
	sub, err := bus.Conn.Subscribe(topology.LLMStreamSubject(bus, tenant, correlationID), func(m *nats.Msg) {
		msg := &llmv1.StreamMessage{}
		if proto.Unmarshal(m.Data, msg) == nil {
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
	b, err := proto.Marshal(&llmv1.StreamControl{Action: llmv1.StreamControlAction_STREAM_CONTROL_ACTION_CANCEL, Reason: reason})
	if err != nil {
		return err
	}
	if err := bus.Conn.Publish(topology.LLMStreamControlSubject(bus, tenant, correlationID), b); err != nil {
		return fmt.Errorf("publish stream control: %w", err)
	}
	return bus.Conn.Flush()
}

// WithControl returns a context cancelled (cause wrapping ErrCancelled and
// the reason) when a cancel control message for tenant's correlationID
// arrives; call stop when the generation is over.
func WithControl(ctx context.Context, bus *natsx.Bus, tenant, correlationID string) (context.Context, func(), error) {
	cctx, cancel := context.WithCancelCause(ctx)
	sub, err := bus.Conn.Subscribe(topology.LLMStreamControlSubject(bus, tenant, correlationID), func(m *nats.Msg) {
		c := &llmv1.StreamControl{}
		if proto.Unmarshal(m.Data, c) == nil && c.GetAction() == llmv1.StreamControlAction_STREAM_CONTROL_ACTION_CANCEL {
			cancel(fmt.Errorf("%w: %s", ErrCancelled, c.GetReason()))
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

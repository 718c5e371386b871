// Package signal carries the LLM layer's cluster-wide control signals over
// core NATS (B-19): PauseAll and ResumeAll when a provider rate-limits,
// QuotaWarning at soft limits, CircuitStateChange, and RequestPreempted.
// Each signal is published once, by the replica whose Redis transition
// caused it.
package signal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"sylk.dev/sylk/pkg/natsx"
)

// Type is a signal kind.
type Type string

// Signal kinds.
const (
	PauseAll           Type = "pause_all"
	ResumeAll          Type = "resume_all"
	QuotaWarning       Type = "quota_warning"
	CircuitStateChange Type = "circuit_state_change"
	RequestPreempted   Type = "request_preempted"
)

// Signal is one control message (B-19 SignalMessage with PausePayload).
type Signal struct {
	ID       string    `json:"id"`
	Type     Type      `json:"type"`
	Provider string    `json:"provider,omitempty"`
	TargetID string    `json:"target_id,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	ResumeAt time.Time `json:"resume_at,omitzero"`
	Attempt  int       `json:"attempt,omitempty"`
	// Level is the quota warning level: 1 warning, 2 critical.
	Level  int               `json:"level,omitempty"`
	Data   map[string]string `json:"data,omitempty"`
	SentAt time.Time         `json:"sent_at"`
}

// Publisher sends signals.
type Publisher interface {
	Publish(ctx context.Context, s Signal) error
}

// Discard drops every signal.
type Discard struct{}

// Publish does nothing.
func (Discard) Publish(context.Context, Signal) error { return nil }

// NATS publishes on core NATS subjects <prefix>.llm.signal.<type>.
type NATS struct{ bus *natsx.Bus }

// NewNATS returns a publisher and subscriber on bus.
func NewNATS(bus *natsx.Bus) *NATS { return &NATS{bus: bus} }

// Subject is the subject of signal type t; "*" matches every type.
func (n *NATS) Subject(t Type) string { return n.bus.Subject("llm", "signal", string(t)) }

// Publish sends s, filling its id and time.
func (n *NATS) Publish(_ context.Context, s Signal) error {
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	if s.SentAt.IsZero() {
		s.SentAt = time.Now().UTC()
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := n.bus.Conn.Publish(n.Subject(s.Type), b); err != nil {
		return fmt.Errorf("publish signal %s: %w", s.Type, err)
	}
	return nil
}

// Subscribe calls fn for every signal of the given types (all when none).
// The caller unsubscribes.
func (n *NATS) Subscribe(fn func(Signal), types ...Type) (*nats.Subscription, error) {
	want := map[Type]bool{}
	for _, t := range types {
		want[t] = true
	}
	sub, err := n.bus.Conn.Subscribe(n.Subject("*"), func(m *nats.Msg) {
		var s Signal
		if json.Unmarshal(m.Data, &s) != nil {
			return
		}
		if len(want) == 0 || want[s.Type] {
			fn(s)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := n.bus.Conn.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

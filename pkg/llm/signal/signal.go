// Package signal carries the LLM layer's cluster-wide control signals over
// core NATS (B-19): PauseAll and ResumeAll when a provider rate-limits,
// QuotaWarning at soft limits, CircuitStateChange, and RequestPreempted.
// Each signal is published once, by the replica whose Redis transition
// caused it; Broadcast collects acknowledgements (B-20) and sends a signal
// once more, with the same id, only when an expected receiver did not ack.
package signal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
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
	return n.flushed(sub, err)
}

// Ack is a receiver's acknowledgement of a signal (B-20 SignalAck).
type Ack struct {
	SignalID string `json:"signal_id"`
	// SubscriberID names the receiver (a gate's replica id).
	SubscriberID string    `json:"subscriber_id"`
	AgentID      string    `json:"agent_id,omitempty"`
	ReceivedAt   time.Time `json:"received_at"`
	// State is what the receiver did ("paused", "resumed", ...).
	State string `json:"state,omitempty"`
}

// AckResult is who acknowledged a broadcast within its timeout.
type AckResult struct {
	SignalID string
	Acks     []Ack
	// Missing are the expected subscribers that did not ack, sorted.
	Missing []string
}

// ErrAckTimeout is wrapped by Broadcast when an expected subscriber did not
// ack in time, even after the signal was sent once more.
var ErrAckTimeout = errors.New("signal ack timeout")

// DefaultAckTimeout is used by Broadcast when given no positive timeout:
// waiting for acks never blocks forever.
const DefaultAckTimeout = 5 * time.Second

// Broadcast publishes s and waits for an ack from every subscriber in
// expect (B-20). When some have not acked within timeout it sends the same
// signal (same id) once more and waits for those again; subscribers that
// already handled it only ack again. It fails with ErrAckTimeout
// ("signal ack timeout: 1/2 responded, non-responsive: [b]") when some
// never ack; the result always lists who did. With nothing expected it only
// publishes.
func (n *NATS) Broadcast(ctx context.Context, s Signal, expect []string, timeout time.Duration) (AckResult, error) {
	if timeout <= 0 {
		timeout = DefaultAckTimeout
	}
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	if s.SentAt.IsZero() {
		s.SentAt = time.Now().UTC()
	}
	res := AckResult{SignalID: s.ID}
	b, err := json.Marshal(s)
	if err != nil {
		return res, err
	}
	if len(expect) == 0 {
		return res, n.bus.Conn.Publish(n.Subject(s.Type), b)
	}
	inbox := n.bus.Conn.NewRespInbox()
	acks := make(chan *nats.Msg, 100)
	sub, err := n.bus.Conn.ChanSubscribe(inbox, acks)
	if err != nil {
		return res, fmt.Errorf("signal %s: ack inbox: %w", s.Type, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	pending := map[string]bool{}
	for _, id := range expect {
		pending[id] = true
	}
	for try := 0; try < 2 && len(pending) > 0; try++ {
		if err := n.bus.Conn.PublishMsg(&nats.Msg{Subject: n.Subject(s.Type), Reply: inbox, Data: b}); err != nil {
			return res, fmt.Errorf("publish signal %s: %w", s.Type, err)
		}
		t := time.NewTimer(timeout)
	wait:
		for len(pending) > 0 {
			select {
			case <-ctx.Done():
				t.Stop()
				res.Missing = missing(pending)
				return res, context.Cause(ctx)
			case <-t.C:
				break wait
			case m := <-acks:
				var a Ack
				if json.Unmarshal(m.Data, &a) != nil || a.SignalID != s.ID || !pending[a.SubscriberID] {
					continue
				}
				delete(pending, a.SubscriberID)
				res.Acks = append(res.Acks, a)
			}
		}
		t.Stop()
	}
	if len(pending) > 0 {
		res.Missing = missing(pending)
		return res, fmt.Errorf("%w: %d/%d responded, non-responsive: %v", ErrAckTimeout, len(res.Acks), len(expect), res.Missing)
	}
	return res, nil
}

func missing(pending map[string]bool) []string {
	out := make([]string, 0, len(pending))
	for id := range pending {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// SubscribeAcked is Subscribe for a receiver named id that acknowledges
// every signal sent by Broadcast with the state fn returns. A signal sent
// again (same id) is acknowledged again without calling fn twice.
func (n *NATS) SubscribeAcked(id string, fn func(Signal) string, types ...Type) (*nats.Subscription, error) {
	want := map[Type]bool{}
	for _, t := range types {
		want[t] = true
	}
	var mu sync.Mutex
	seen := map[string]string{} // signal id -> state
	sub, err := n.bus.Conn.Subscribe(n.Subject("*"), func(m *nats.Msg) {
		var s Signal
		if json.Unmarshal(m.Data, &s) != nil {
			return
		}
		if len(want) > 0 && !want[s.Type] {
			return
		}
		mu.Lock()
		state, dup := seen[s.ID]
		mu.Unlock()
		if !dup {
			state = fn(s)
			mu.Lock()
			if len(seen) >= 1024 {
				clear(seen)
			}
			seen[s.ID] = state
			mu.Unlock()
		}
		if m.Reply == "" {
			return
		}
		b, err := json.Marshal(Ack{SignalID: s.ID, SubscriberID: id, ReceivedAt: time.Now().UTC(), State: state})
		if err == nil {
			_ = m.Respond(b)
		}
	})
	return n.flushed(sub, err)
}

// flushed returns a new subscription once the server has it, so that no
// signal sent after the call returns is missed.
func (n *NATS) flushed(sub *nats.Subscription, err error) (*nats.Subscription, error) {
	if err != nil {
		return nil, err
	}
	if err := n.bus.Conn.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

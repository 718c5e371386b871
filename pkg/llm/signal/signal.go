// Package signal carries the LLM layer's cluster-wide control signals over
// core NATS (B-19) as sylk.llm.v1.Signal messages: PAUSE_ALL and
// RESUME_ALL when a provider rate-limits, QUOTA_WARNING at soft limits,
// CIRCUIT_STATE_CHANGE, and REQUEST_PREEMPTED.
// Each signal is published once, by the replica whose Redis transition
// caused it; Broadcast collects acknowledgements (B-20) and sends a signal
// once more, with the same id, only when an expected receiver did not ack.
package signal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Publisher sends signals.
type Publisher interface {
	Publish(ctx context.Context, s *llmv1.Signal) error
}

// Discard drops every signal.
type Discard struct{}

// Publish does nothing.
func (Discard) Publish(context.Context, *llmv1.Signal) error { return nil }

// NATS publishes on core NATS subjects <prefix>.llm.signal.<type>.
type NATS struct{ bus *natsx.Bus }

// NewNATS returns a publisher and subscriber on bus.
func NewNATS(bus *natsx.Bus) *NATS { return &NATS{bus: bus} }

// subject is the subject of signal type t: its name in lower case without
// the prefix ("pause_all").
func (n *NATS) subject(t llmv1.SignalType) string {
	return topology.LLMSignalSubject(n.bus, strings.ToLower(strings.TrimPrefix(t.String(), "SIGNAL_TYPE_")))
}

// every is the subject matching every signal type.
func (n *NATS) every() string { return topology.LLMSignalSubject(n.bus, "*") }

// stamped is s with its id and send time set: s itself when it has both,
// else a copy, so that the caller's message is never changed.
func stamped(s *llmv1.Signal) *llmv1.Signal {
	if s.GetId() != "" && s.GetSendTime() != nil {
		return s
	}
	s = proto.CloneOf(s)
	if s.Id == "" {
		s.Id = uuid.NewString()
	}
	if s.SendTime == nil {
		s.SendTime = timestamppb.Now()
	}
	return s
}

// Publish sends s, filling its id and time when unset.
func (n *NATS) Publish(_ context.Context, s *llmv1.Signal) error {
	s = stamped(s)
	b, err := proto.Marshal(s)
	if err != nil {
		return err
	}
	if err := n.bus.Conn.Publish(n.subject(s.GetType()), b); err != nil {
		return fmt.Errorf("publish signal %s: %w", s.GetType(), err)
	}
	return nil
}

// receive decodes a signal of one of want (any when want is empty); a
// message that is not one is dropped.
func receive(m *nats.Msg, want []llmv1.SignalType) (*llmv1.Signal, bool) {
	s := &llmv1.Signal{}
	if proto.Unmarshal(m.Data, s) != nil {
		return nil, false
	}
	return s, len(want) == 0 || slices.Contains(want, s.GetType())
}

// Subscribe calls fn for every signal of the given types (all when none).
// The caller unsubscribes.
func (n *NATS) Subscribe(fn func(*llmv1.Signal), types ...llmv1.SignalType) (*nats.Subscription, error) {
	sub, err := n.bus.Conn.Subscribe(n.every(), func(m *nats.Msg) {
		if s, ok := receive(m, types); ok {
			fn(s)
		}
	})
	return n.flushed(sub, err)
}

// AckResult is who acknowledged a broadcast within its timeout.
type AckResult struct {
	SignalID string
	Acks     []*llmv1.SignalAck
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
func (n *NATS) Broadcast(ctx context.Context, s *llmv1.Signal, expect []string, timeout time.Duration) (AckResult, error) {
	if timeout <= 0 {
		timeout = DefaultAckTimeout
	}
	s = stamped(s)
	res := AckResult{SignalID: s.GetId()}
	b, err := proto.Marshal(s)
	if err != nil {
		return res, err
	}
	subject := n.subject(s.GetType())
	if len(expect) == 0 {
		return res, n.bus.Conn.Publish(subject, b)
	}
	inbox := n.bus.Conn.NewRespInbox()
	acks := make(chan *nats.Msg, 100)
	sub, err := n.bus.Conn.ChanSubscribe(inbox, acks)
	if err != nil {
		return res, fmt.Errorf("signal %s: ack inbox: %w", s.GetType(), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	pending := map[string]bool{}
	for _, id := range expect {
		pending[id] = true
	}
	for try := 0; try < 2 && len(pending) > 0; try++ {
		if err := n.bus.Conn.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: b}); err != nil {
			return res, fmt.Errorf("publish signal %s: %w", s.GetType(), err)
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
				a := &llmv1.SignalAck{}
				if proto.Unmarshal(m.Data, a) != nil || a.GetSignalId() != s.GetId() || !pending[a.GetSubscriberId()] {
					continue
				}
				delete(pending, a.GetSubscriberId())
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
func (n *NATS) SubscribeAcked(id string, fn func(*llmv1.Signal) llmv1.SignalAckState, types ...llmv1.SignalType) (*nats.Subscription, error) {
	var mu sync.Mutex
	seen := map[string]llmv1.SignalAckState{} // signal id -> state
	sub, err := n.bus.Conn.Subscribe(n.every(), func(m *nats.Msg) {
		s, ok := receive(m, types)
		if !ok {
			return
		}
		mu.Lock()
		state, dup := seen[s.GetId()]
		mu.Unlock()
		if !dup {
			state = fn(s)
			mu.Lock()
			if len(seen) >= 1024 {
				clear(seen)
			}
			seen[s.GetId()] = state
			mu.Unlock()
		}
		if m.Reply == "" {
			return
		}
		b, err := proto.Marshal(&llmv1.SignalAck{SignalId: s.GetId(), SubscriberId: id, ReceiveTime: timestamppb.Now(), State: state})
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

package natsx_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
)

// A message is not delivered while the handler works on the one before:
// its ack timer would run out in a local buffer and the server would
// deliver it again (and count the delivery towards MaxDeliver), though no
// handler had seen it.
func TestConsumeDoesNotExpireWaitingMessages(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := workQueue(t, bus, "WORK", "work", "slow", "waiting")
	const ackWait = time.Second
	var mu sync.Mutex
	handled := map[string]int{}
	go func() {
		_ = bus.Consume(ctx, natsx.ConsumerSpec{Stream: stream, Durable: "d", AckWait: ackWait},
			func(ctx context.Context, msg jetstream.Msg) error {
				var env messagev1.Envelope
				if err := natsx.Unmarshal(msg, &env); err != nil {
					return err
				}
				mu.Lock()
				handled[env.Id]++
				mu.Unlock()
				if env.Id != "slow" {
					return nil
				}
				// A long handler that keeps its own message in progress,
				// for longer than the ack wait.
				tick := time.NewTicker(ackWait / 5)
				defer tick.Stop()
				long := time.After(3 * ackWait)
				for {
					select {
					case <-long:
						return nil
					case <-tick.C:
						_ = msg.InProgress()
					}
				}
			})
	}()
	var cons jetstream.Consumer
	var err error
	require.Eventually(t, func() bool {
		cons, err = bus.JS.Consumer(ctx, stream, "d")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.Delivered.Stream == 2
	}, 15*time.Second, 20*time.Millisecond)
	ci, err := cons.Info(ctx)
	require.NoError(t, err)
	mu.Lock()
	require.Equal(t, map[string]int{"slow": 1, "waiting": 1}, handled, "each message handled once")
	mu.Unlock()
	require.Equal(t, uint64(2), ci.Delivered.Consumer, "two deliveries for two messages")
}

// A message whose handler panics is delivered again up to MaxDeliver, as
// one whose handler failed, and the consumer goes on with the others: the
// panic does not end the process.
func TestConsumeSurvivesAPanickingHandler(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	stream := workQueue(t, bus, "PANIC", "panic", "boom", "fine")
	var mu sync.Mutex
	handled := map[string]int{}
	testenv.Start(t, func(ctx context.Context) error {
		return bus.Consume(ctx, natsx.ConsumerSpec{Stream: stream, Durable: "d", MaxDeliver: 2, NakDelay: time.Millisecond},
			func(ctx context.Context, msg jetstream.Msg) error {
				var env messagev1.Envelope
				if err := natsx.Unmarshal(msg, &env); err != nil {
					return err
				}
				mu.Lock()
				handled[env.Id]++
				mu.Unlock()
				if env.Id == "boom" {
					panic("a handler bug")
				}
				return nil
			})
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled["fine"] == 1 && handled["boom"] == 2
	}, 15*time.Second, 10*time.Millisecond, "the panicking message is delivered MaxDeliver times, the other once")
}

// workQueue makes a work-queue stream of name on bus, for subjects
// <subject>.>, and publishes an envelope of each id to <subject>.a.
func workQueue(t *testing.T, bus *natsx.Bus, name, subject string, ids ...string) string {
	t.Helper()
	ctx := context.Background()
	stream := bus.Stream(name)
	_, err := bus.EnsureStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{bus.Subject(subject, ">")},
		Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	for _, id := range ids {
		_, err := bus.Publish(ctx, bus.Subject(subject, "a"), id, &messagev1.Envelope{Id: id})
		require.NoError(t, err)
	}
	return stream
}

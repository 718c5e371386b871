package natsx_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
)

// A consumer removed on the server while its service runs is made again:
// Consume goes on handling messages instead of returning as if stopped,
// which would leave the service up with nothing reading its inbox.
func TestConsumeSurvivesConsumerDeletion(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := workQueue(t, bus, "WORK", "work")

	var handled, readies atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, natsx.ConsumerSpec{Stream: stream, Durable: "d", Ready: func() { readies.Add(1) }},
			func(context.Context, jetstream.Msg) error { handled.Add(1); return nil })
	}()
	_, err := bus.Publish(ctx, bus.Subject("work", "a"), "first", &messagev1.Envelope{Id: "first"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, bus.JS.DeleteConsumer(ctx, stream, "d"))
	_, err = bus.Publish(ctx, bus.Subject("work", "a"), "second", &messagev1.Envelope{Id: "second"})
	require.NoError(t, err)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for handled.Load() < 2 {
		select {
		case err := <-done:
			t.Fatalf("Consume returned while its context was live: %v", err)
		case <-deadline:
			t.Fatal("the message published after the consumer was removed was not handled")
		case <-tick.C:
		}
	}
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int32(1), readies.Load(), "Ready is said once, not again when the consumer is made again")
}

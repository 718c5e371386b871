package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// A result a replica holds longer than the ack wait (queued behind a slow
// batch) is kept with in-progress acknowledgements and goes to nobody
// else; once it is no longer kept, it is redelivered within the ack wait.
func TestHeldResultsAreKeptPastTheAckWait(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	ctx := context.Background()
	require.NoError(t, topology.EnsureTasks(ctx, bus))
	const ackWait = time.Second
	cons, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{MaxDeliver: -1, AckWait: ackWait}))
	require.NoError(t, err)
	_, err = bus.Publish(ctx, topology.ResultSubject(bus), "r1", &taskv1.TaskResult{TenantId: "t1", RunId: "r", NodeId: "a", Attempt: 1})
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.Len(t, msgs, 1)

	held := newHeldResults()
	held.add(msgs[0])
	stop := held.keep(ackWait / 4)
	redelivered := func() bool {
		b, err := cons.FetchNoWait(1)
		require.NoError(t, err)
		n := 0
		for range b.Messages() {
			n++
		}
		return n > 0
	}
	require.Never(t, redelivered, 3*ackWait, 100*time.Millisecond, "a kept result is not handed to another replica")
	stop()
	require.Eventually(t, redelivered, 5*ackWait, 100*time.Millisecond, "a result no longer kept is redelivered")
}

// A stop waits for the decisions in flight, and no longer than its
// timeout.
func TestStopWaitsForDecisionsInFlight(t *testing.T) {
	t.Parallel()
	var f inflight
	require.True(t, f.wait(0), "nothing in flight")
	f.enter()
	f.enter()
	require.False(t, f.wait(10*time.Millisecond), "two in flight")
	done := make(chan bool)
	go func() { done <- f.wait(time.Minute) }()
	f.leave()
	f.leave()
	require.True(t, <-done, "the wait ends when the last one leaves")
	f.enter() // a new decision after the counter was back at zero
	require.False(t, f.wait(10*time.Millisecond))
	f.leave()
	require.True(t, f.wait(time.Minute))
}

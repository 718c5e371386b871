package signal_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/testenv"
)

// Two receivers ack a broadcast; a receiver that never answers is named,
// after the signal went out once more (handled once by the others).
func TestBroadcastAcks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	n := signal.NewNATS(testenv.NATS(t))
	var handled [2]atomic.Int32
	for i, id := range []string{"a", "b"} {
		sub, err := n.SubscribeAcked(id, func(s signal.Signal) string {
			handled[i].Add(1)
			return "paused " + s.Provider
		}, signal.PauseAll)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	res, err := n.Broadcast(ctx, signal.Signal{Type: signal.PauseAll, Provider: "p"}, []string{"a", "b"}, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, res.Acks, 2)
	require.Empty(t, res.Missing)
	for _, a := range res.Acks {
		require.Equal(t, res.SignalID, a.SignalID)
		require.Equal(t, "paused p", a.State)
		require.Contains(t, []string{"a", "b"}, a.SubscriberID)
	}

	res, err = n.Broadcast(ctx, signal.Signal{Type: signal.PauseAll, Provider: "q"}, []string{"a", "b", "gone"}, 100*time.Millisecond)
	require.ErrorIs(t, err, signal.ErrAckTimeout)
	require.ErrorContains(t, err, "signal ack timeout: 2/3 responded, non-responsive: [gone]")
	require.Equal(t, []string{"gone"}, res.Missing)
	require.Len(t, res.Acks, 2)
	require.Eventually(t, func() bool { return handled[0].Load() == 2 && handled[1].Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"the second send is acknowledged without being handled again")

	res, err = n.Broadcast(ctx, signal.Signal{Type: signal.ResumeAll}, nil, time.Second)
	require.NoError(t, err, "nobody expected: only published")
	require.Empty(t, res.Acks)
}

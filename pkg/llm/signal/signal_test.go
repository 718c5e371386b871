package signal_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
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
		sub, err := n.SubscribeAcked(id, func(s *llmv1.Signal) llmv1.SignalAckState {
			if s.GetProvider() == "p" {
				handled[i].Add(1)
			}
			return llmv1.SignalAckState_SIGNAL_ACK_STATE_PAUSED
		}, llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	pause := &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL, Provider: "p"}
	res, err := n.Broadcast(ctx, pause, []string{"a", "b"}, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, res.Acks, 2)
	require.Empty(t, res.Missing)
	require.Empty(t, pause.GetId(), "the caller's signal is not changed")
	for _, a := range res.Acks {
		require.Equal(t, res.SignalID, a.GetSignalId())
		require.Equal(t, llmv1.SignalAckState_SIGNAL_ACK_STATE_PAUSED, a.GetState())
		require.Contains(t, []string{"a", "b"}, a.GetSubscriberId())
		require.NotNil(t, a.GetReceiveTime())
	}

	res, err = n.Broadcast(ctx, pause, []string{"a", "b", "gone"}, 100*time.Millisecond)
	require.ErrorIs(t, err, signal.ErrAckTimeout)
	require.ErrorContains(t, err, "signal ack timeout: 2/3 responded, non-responsive: [gone]")
	require.Equal(t, []string{"gone"}, res.Missing)
	require.Len(t, res.Acks, 2)
	require.Eventually(t, func() bool { return handled[0].Load() == 2 && handled[1].Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"the second send is acknowledged without being handled again")

	res, err = n.Broadcast(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL}, nil, time.Second)
	require.NoError(t, err, "nobody expected: only published")
	require.Empty(t, res.Acks)
}

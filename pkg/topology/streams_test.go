package topology_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// TestDuplicateWindow: the streams remember message ids for the configured
// window (-nats.duplicate-window), and for DuplicateWindow without one.
func TestDuplicateWindow(t *testing.T) {
	ctx := context.Background()
	def := testenv.NATS(t)
	require.NoError(t, topology.EnsureTasks(ctx, def))
	s, err := def.JS.Stream(ctx, def.Stream(topology.StreamTasks))
	require.NoError(t, err)
	require.Equal(t, topology.DuplicateWindow, s.CachedInfo().Config.Duplicates)

	b, err := natsx.Connect(ctx, natsx.Config{URL: testenv.NATSURL(), Prefix: testenv.NATSPrefix(), DuplicateWindow: 2 * time.Second}, logx.Discard(), t.Name())
	require.NoError(t, err)
	t.Cleanup(func() {
		testenv.CleanupStreams(t, b)
		b.Conn.Close()
	})
	require.NoError(t, topology.EnsureTasks(ctx, b))
	require.NoError(t, topology.EnsureEvents(ctx, b))
	require.NoError(t, topology.EnsureAgents(ctx, b))
	for _, name := range []string{topology.StreamTasks, topology.StreamEvents, topology.StreamAgents} {
		s, err := b.JS.Stream(ctx, b.Stream(name))
		require.NoError(t, err)
		require.Equal(t, 2*time.Second, s.CachedInfo().Config.Duplicates, name)
	}

	bad := natsx.Config{URL: testenv.NATSURL(), Prefix: "x", DuplicateWindow: -time.Second}
	require.ErrorContains(t, bad.Validate(), "nats.duplicate-window")
}

package natsx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
)

// Stopping a service while it provisions is a clean stop: Consume returns
// nil, and provisioning errors wrap context.Canceled for callers to see.
func TestCancelWhileProvisioning(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := bus.EnsureStream(ctx, jetstream.StreamConfig{Name: bus.Stream("X"), Subjects: []string{bus.Subject("x", ">")}})
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	err = bus.Consume(ctx, natsx.ConsumerSpec{Stream: bus.Stream("X"), Durable: "d"}, func(context.Context, jetstream.Msg) error { return nil })
	require.NoError(t, err)
}

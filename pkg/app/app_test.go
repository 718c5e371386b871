package app

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// starting is a Service that embeds the start signal.
type starting struct{ StartSignal }

func (*starting) Register(*grpc.Server)         {}
func (*starting) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func TestStartSignal(t *testing.T) {
	t.Parallel()
	var s Starter = &starting{}
	started := s.Started()
	select {
	case <-started:
		t.Fatal("started before MarkStarted")
	default:
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); s.(*starting).MarkStarted() }()
	}
	wg.Wait()
	<-started
	require.Equal(t, started, s.Started(), "the same channel before and after")
}

func TestStartSignalAfterEveryPart(t *testing.T) {
	t.Parallel()
	s := &starting{}
	parts := s.After(2)
	parts[0]()
	parts[0]()
	select {
	case <-s.Started():
		t.Fatal("started before every part")
	default:
	}
	parts[1]()
	<-s.Started()

	none := &starting{}
	require.Empty(t, none.After(0))
	<-none.Started()
}

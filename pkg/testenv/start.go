package testenv

import (
	"context"
	"testing"
)

// Start runs run in a goroutine until the test ends; then it cancels run's
// context and fails the test unless run returns nil. stop does that
// earlier; later calls do nothing.
func Start(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stopped with error: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

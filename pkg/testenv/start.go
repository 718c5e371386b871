package testenv

import (
	"context"
	"testing"
	"time"
)

// stopWait is how long Start's stop waits for run to return once its
// context is cancelled.
const stopWait = 10 * time.Second

// Start runs run in a goroutine until the test ends; then it cancels run's
// context and fails the test unless run returns nil within ten seconds.
// stop does that earlier; later calls do nothing.
func Start(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	return start(t, run, stopWait)
}

func start(t testing.TB, run func(context.Context) error, wait time.Duration) (stop func()) {
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
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stopped with error: %v", err)
			}
		case <-timer.C:
			t.Errorf("did not stop within %s of its context's end", wait)
		}
	}
	t.Cleanup(stop)
	return stop
}

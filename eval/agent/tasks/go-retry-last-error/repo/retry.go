// Package retry calls a function again when it fails, waiting longer each
// time.
package retry

import "time"

// Policy says how often to try and how long to wait in between.
type Policy struct {
	// Attempts is the most calls made (at least one).
	Attempts int
	// Delay is the wait after the first failure; it doubles after each
	// further one.
	Delay time.Duration
	// Sleep waits; time.Sleep when nil.
	Sleep func(time.Duration)
}

// Do calls fn until it succeeds or the attempts are used up, and returns
// nil on success or the error of the last attempt.
func (p Policy) Do(fn func() error) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = time.Sleep
	}
	attempts := max(p.Attempts, 1)
	delay := p.Delay
	var err error
	for i := 0; i < attempts; i++ {
		if err := fn(); err == nil {
			return nil
		}
		if i < attempts-1 {
			sleep(delay)
			delay *= 2
		}
	}
	return err
}

package retry

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestDoSucceedsAfterFailures(t *testing.T) {
	var waits []time.Duration
	p := Policy{Attempts: 5, Delay: time.Millisecond, Sleep: func(d time.Duration) { waits = append(waits, d) }}
	calls := 0
	err := p.Do(func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Do = %v after %d calls; want nil after 3", err, calls)
	}
	if want := []time.Duration{time.Millisecond, 2 * time.Millisecond}; !reflect.DeepEqual(waits, want) {
		t.Fatalf("waits = %v; want %v", waits, want)
	}
}

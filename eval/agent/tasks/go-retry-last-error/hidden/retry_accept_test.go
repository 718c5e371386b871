package retry_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"example.com/go-retry-last-error"
)

func TestAcceptReturnsLastError(t *testing.T) {
	var waits []time.Duration
	p := retry.Policy{Attempts: 3, Delay: time.Second, Sleep: func(d time.Duration) { waits = append(waits, d) }}
	errs := []error{errors.New("first"), errors.New("second"), errors.New("third")}
	calls := 0
	err := p.Do(func() error {
		calls++
		return errs[calls-1]
	})
	if calls != 3 {
		t.Fatalf("fn was called %d times; want 3", calls)
	}
	if !errors.Is(err, errs[2]) {
		t.Fatalf("Do = %v; want the last error", err)
	}
	if fmt.Sprint(waits) != fmt.Sprint([]time.Duration{time.Second, 2 * time.Second}) {
		t.Fatalf("waits = %v", waits)
	}
}

func TestAcceptSingleAttemptError(t *testing.T) {
	boom := errors.New("boom")
	p := retry.Policy{Sleep: func(time.Duration) { t.Fatal("no wait expected") }}
	if err := p.Do(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v; want boom", err)
	}
}

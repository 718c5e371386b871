package llm

import (
	"context"
	"time"
)

// RetryPolicy is one tier's retry schedule (B-40). MaxRetries counts retries
// after the first attempt.
type RetryPolicy struct {
	MaxRetries    int
	Initial       time.Duration
	Max           time.Duration
	Multiplier    float64
	UseRetryAfter bool
}

// Delay is the wait before retry number n (1-based); 0 when n is out of range.
func (p RetryPolicy) Delay(n int) time.Duration {
	if n < 1 || n > p.MaxRetries {
		return 0
	}
	d := float64(p.Initial)
	for i := 1; i < n; i++ {
		d *= p.Multiplier
		if p.Max > 0 && time.Duration(d) >= p.Max {
			return p.Max
		}
	}
	if p.Max > 0 && time.Duration(d) > p.Max {
		return p.Max
	}
	return time.Duration(d)
}

// RetryPolicies maps tiers to policies; a tier without an entry is never retried.
type RetryPolicies map[Tier]RetryPolicy

// DefaultRetryPolicies are the seed's (B-40). Permanent and user-fixable
// errors have none.
func DefaultRetryPolicies() RetryPolicies {
	return RetryPolicies{
		TierTransient: {MaxRetries: 5, Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2},
		TierRateLimit: {MaxRetries: 10, Initial: time.Second, Max: 60 * time.Second, Multiplier: 2, UseRetryAfter: true},
		TierDegrading: {MaxRetries: 3, Initial: 5 * time.Second, Max: 30 * time.Second, Multiplier: 2},
	}
}

// Next says whether retry number n (1-based) of an error of tier t should
// happen, and after how long. Retry-After wins for policies that use it.
func (ps RetryPolicies) Next(t Tier, n int, err error) (time.Duration, bool) {
	p, ok := ps[t]
	if !ok || n > p.MaxRetries {
		return 0, false
	}
	d := p.Delay(n)
	if p.UseRetryAfter {
		if ra := RetryAfterOf(err); ra > 0 {
			d = ra
		}
	}
	return d, true
}

// Retry runs fn until it succeeds, returns an error the policies do not retry,
// or ctx ends. onRetry, when set, is told of each retry before its wait.
func Retry(ctx context.Context, c *Classifier, ps RetryPolicies, fn func(ctx context.Context) error, onRetry func(n int, tier Tier, wait time.Duration, err error)) error {
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		tier := c.Classify(err)
		wait, ok := ps.Next(tier, n, err)
		if !ok {
			return err
		}
		if onRetry != nil {
			onRetry(n, tier, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

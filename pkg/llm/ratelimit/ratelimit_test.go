package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/llm/ratelimit"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/testenv"
)

type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

type recorder struct {
	mu  sync.Mutex
	got []*llmv1.Signal
}

func (r *recorder) add(s *llmv1.Signal) { r.mu.Lock(); r.got = append(r.got, s); r.mu.Unlock() }
func (r *recorder) of(t llmv1.SignalType) []*llmv1.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*llmv1.Signal
	for _, s := range r.got {
		if s.GetType() == t {
			out = append(out, s)
		}
	}
	return out
}

// env is two limiters (two replicas) sharing one Redis and one NATS.
func env(t *testing.T, soft ratelimit.SoftLimit) (*ratelimit.Limiter, *ratelimit.Limiter, *clock, *recorder) {
	rdb := testenv.Redis(t)
	sig := signal.NewNATS(testenv.NATS(t))
	rec := &recorder{}
	sub, err := sig.Subscribe(rec.add)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c := &clock{}
	c.ms.Store(1_700_000_000_000)
	s := ratelimit.DefaultSettings()
	s.Soft = func(string) ratelimit.SoftLimit { return soft }
	a := ratelimit.New(rdb, s, sig, ratelimit.WithClock(c.now))
	b := ratelimit.New(rdb, s, sig, ratelimit.WithClock(c.now))
	return a, b, c, rec
}

func TestFirst429PausesEveryReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, c, rec := env(t, ratelimit.SoftLimit{})
	resumeAt, attempt, err := a.OnRateLimit(ctx, "anthropic", 0)
	require.NoError(t, err)
	require.Equal(t, 1, attempt)
	require.Equal(t, c.now().Add(time.Second), resumeAt, "the first 429 waits 1s")
	// A 429 from a call already in flight does not double the backoff.
	_, attempt, err = b.OnRateLimit(ctx, "anthropic", 0)
	require.NoError(t, err)
	require.Equal(t, 1, attempt)

	for _, l := range []*ratelimit.Limiter{a, b} {
		ok, wait, err := l.CanProceed(ctx, "anthropic")
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, time.Second, wait)
		st, err := l.State(ctx, "anthropic")
		require.NoError(t, err)
		require.Equal(t, ratelimit.Exceeded, st.State)
	}
	ok, _, err := a.CanProceed(ctx, "openai")
	require.NoError(t, err)
	require.True(t, ok, "limits are per provider")

	require.Eventually(t, func() bool { return len(rec.of(llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL)) == 1 }, 5*time.Second, 10*time.Millisecond)
	p := rec.of(llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL)[0]
	require.Equal(t, "anthropic", p.GetProvider())
	require.EqualValues(t, 1, p.GetAttempt())
	require.Equal(t, resumeAt.UnixMilli(), p.GetResumeTime().AsTime().UnixMilli())

	// Recovery: after the backoff exactly one replica resumes, once.
	c.advance(time.Second)
	okA, _, err := a.CanProceed(ctx, "anthropic")
	require.NoError(t, err)
	okB, _, err := b.CanProceed(ctx, "anthropic")
	require.NoError(t, err)
	require.True(t, okA && okB)
	require.Eventually(t, func() bool { return len(rec.of(llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL)) == 1 }, 5*time.Second, 10*time.Millisecond)

	// The next 429 (no 2xx in between) doubles: 2s.
	resumeAt, attempt, err = b.OnRateLimit(ctx, "anthropic", 0)
	require.NoError(t, err)
	require.Equal(t, 2, attempt)
	require.Equal(t, c.now().Add(2*time.Second), resumeAt)
	// A 2xx resets the attempt count and resumes.
	require.NoError(t, a.OnSuccess(ctx, "anthropic"))
	st, err := b.State(ctx, "anthropic")
	require.NoError(t, err)
	require.Equal(t, ratelimit.Status{State: ratelimit.OK}, st)
	_, attempt, err = a.OnRateLimit(ctx, "anthropic", 0)
	require.NoError(t, err)
	require.Equal(t, 1, attempt)
	require.Eventually(t, func() bool {
		return len(rec.of(llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL)) == 2 && len(rec.of(llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL)) == 3
	}, 5*time.Second, 10*time.Millisecond)
}

func TestRetryAfterWinsAndCap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, _, c, _ := env(t, ratelimit.SoftLimit{})
	for range 3 {
		_, _, err := a.OnRateLimit(ctx, "p", 0)
		require.NoError(t, err)
		c.advance(10 * time.Minute)
		ok, _, err := a.CanProceed(ctx, "p")
		require.NoError(t, err)
		require.True(t, ok)
	}
	resumeAt, attempt, err := a.OnRateLimit(ctx, "p", 7*time.Second)
	require.NoError(t, err)
	require.Equal(t, 4, attempt)
	require.Equal(t, c.now().Add(7*time.Second), resumeAt, "Retry-After wins whatever the attempt")

	for range 10 {
		c.advance(10 * time.Minute)
		_, _, err := a.CanProceed(ctx, "p")
		require.NoError(t, err)
		resumeAt, _, err = a.OnRateLimit(ctx, "p", 0)
		require.NoError(t, err)
		require.LessOrEqual(t, resumeAt.Sub(c.now()), 5*time.Minute)
	}
	require.Equal(t, 5*time.Minute, resumeAt.Sub(c.now()))
}

func TestSoftLimitWarnsOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, c, rec := env(t, ratelimit.SoftLimit{Requests: 10, Period: time.Hour, WarnAt: 0.8})
	for i := 1; i <= 9; i++ {
		l := a
		if i%2 == 0 {
			l = b
		}
		u, err := l.RecordUsage(ctx, "p", 100)
		require.NoError(t, err)
		if i >= 8 {
			require.Equal(t, 1, u.Level)
		} else {
			require.Equal(t, 0, u.Level)
		}
		ok, _, err := l.CanProceed(ctx, "p")
		require.NoError(t, err)
		require.True(t, ok, "a soft limit never pauses")
	}
	st, err := a.State(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, ratelimit.Warning, st.State)
	require.Eventually(t, func() bool { return len(rec.of(llmv1.SignalType_SIGNAL_TYPE_QUOTA_WARNING)) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, llmv1.QuotaLevel_QUOTA_LEVEL_WARNING, rec.of(llmv1.SignalType_SIGNAL_TYPE_QUOTA_WARNING)[0].GetLevel())

	c.advance(time.Hour)
	u, err := a.RecordUsage(ctx, "p", 1)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Usage{Requests: 1, Tokens: 1, PeriodStart: c.now()}, u, "counters reset after the period")
}

func TestWaitHonoursContext(t *testing.T) {
	t.Parallel()
	a, _, _, _ := env(t, ratelimit.SoftLimit{})
	_, _, err := a.OnRateLimit(t.Context(), "p", time.Hour)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, a.Wait(ctx, "p"), context.DeadlineExceeded)
}

package breaker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm/breaker"
	"sylk.dev/sylk/pkg/testenv"
)

type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func newRegistry(t *testing.T, c *clock, changes *[]breaker.Change, mu *sync.Mutex) *breaker.Registry {
	c.ms.Store(1_700_000_000_000)
	rdb := testenv.Redis(t)
	settings := func(res string) breaker.Settings {
		if res == "file" {
			return breaker.File
		}
		return breaker.LLM
	}
	return breaker.New(rdb, settings, breaker.WithClock(c.now), breaker.WithOnChange(func(_ context.Context, ch breaker.Change) {
		mu.Lock()
		*changes = append(*changes, ch)
		mu.Unlock()
	}))
}

func TestLLMBreakerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var c clock
	var changes []breaker.Change
	var mu sync.Mutex
	r := newRegistry(t, &c, &changes, &mu)
	const res = "llm:anthropic"

	for i := range 5 {
		ok, st, err := r.Allow(ctx, res)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, breaker.Closed, st, "failure %d", i)
		_, err = r.Record(ctx, res, false)
		require.NoError(t, err)
	}
	st, err := r.State(ctx, res)
	require.NoError(t, err)
	require.Equal(t, breaker.Open, st)
	c.advance(29 * time.Second)
	ok, _, err := r.Allow(ctx, res)
	require.NoError(t, err)
	require.False(t, ok, "fails fast during the cooldown")

	c.advance(time.Second)
	ok, st, err = r.Allow(ctx, res)
	require.NoError(t, err)
	require.True(t, ok, "the probe goes through")
	require.Equal(t, breaker.HalfOpen, st)
	ok, _, err = r.Allow(ctx, res)
	require.NoError(t, err)
	require.False(t, ok, "a single probe at a time")

	st, err = r.Record(ctx, res, false)
	require.NoError(t, err)
	require.Equal(t, breaker.Open, st, "a failed probe re-opens")

	c.advance(30 * time.Second)
	for i := range 3 {
		ok, st, err = r.Allow(ctx, res)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, breaker.HalfOpen, st)
		st, err = r.Record(ctx, res, true)
		require.NoError(t, err)
		if i < 2 {
			require.Equal(t, breaker.HalfOpen, st)
		}
	}
	require.Equal(t, breaker.Closed, st, "three successes close it")

	mu.Lock()
	require.Equal(t, []breaker.Change{
		{Resource: res, From: breaker.Closed, To: breaker.Open},
		{Resource: res, From: breaker.Open, To: breaker.HalfOpen},
		{Resource: res, From: breaker.HalfOpen, To: breaker.Open},
		{Resource: res, From: breaker.Open, To: breaker.HalfOpen},
		{Resource: res, From: breaker.HalfOpen, To: breaker.Closed},
	}, changes)
	mu.Unlock()
}

func TestBreakerTripsOnRateAndReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var c clock
	var changes []breaker.Change
	var mu sync.Mutex
	r := newRegistry(t, &c, &changes, &mu)
	var st breaker.State
	var err error
	for i := range 20 {
		st, err = r.Record(ctx, "llm:x", i%2 == 0)
		require.NoError(t, err)
		if i < 19 {
			require.Equal(t, breaker.Closed, st, "result %d", i)
		}
	}
	require.Equal(t, breaker.Open, st, "a full window at 0.5 trips")
	require.NoError(t, r.Reset(ctx, "llm:x"))
	st, err = r.State(ctx, "llm:x")
	require.NoError(t, err)
	require.Equal(t, breaker.Closed, st)

	for range 2 {
		st, err = r.Record(ctx, "file", false)
		require.NoError(t, err)
	}
	require.Equal(t, breaker.Open, st, "file trips after 2")
}

func TestProbeTimeoutReopens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var c clock
	var changes []breaker.Change
	var mu sync.Mutex
	r := newRegistry(t, &c, &changes, &mu)
	for range 5 {
		_, err := r.Record(ctx, "llm:y", false)
		require.NoError(t, err)
	}
	c.advance(30 * time.Second)
	ok, _, err := r.Allow(ctx, "llm:y")
	require.NoError(t, err)
	require.True(t, ok)
	c.advance(breaker.LLM.ProbeTimeout)
	ok, st, err := r.Allow(ctx, "llm:y")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, breaker.Open, st, "a probe that never reports counts as failed")
}

func TestSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := testenv.Redis(t)
	a := breaker.New(rdb, func(string) breaker.Settings { return breaker.LLM })
	b := breaker.New(rdb, func(string) breaker.Settings { return breaker.LLM })
	for range 5 {
		_, err := a.Record(ctx, "llm:z", false)
		require.NoError(t, err)
	}
	ok, st, err := b.Allow(ctx, "llm:z")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, breaker.Open, st)
}

package budget_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/testenv"
)

// Two replicas serving reservations from leases never hold more than the
// limit together, and once they flush, the counter is the actual usage.
func TestLeasesNeverOvershoot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := testenv.Redis(t)
	const limit = 10_000
	lim := budget.Limits{Tenant: limit, Session: 1 << 40}
	replicas := []*budget.Leases{
		budget.NewLeases(budget.New(rdb, lim), 2_000, time.Hour, nil),
		budget.NewLeases(budget.New(rdb, lim), 2_000, time.Hour, nil),
	}
	for _, l := range replicas {
		require.NoError(t, l.Load(ctx))
	}
	var held, maxHeld, granted, used, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := replicas[g%2]
			for i := range 40 {
				est := int64(37 + (g*7+i)%50)
				r, err := l.Reserve(ctx, budget.Scope{Tenant: "t", Session: "s"}, est)
				if err != nil {
					require.ErrorIs(t, err, budget.ErrTenantBudgetExceeded)
					refused.Add(1)
					continue
				}
				h := held.Add(est)
				for m := maxHeld.Load(); h > m && !maxHeld.CompareAndSwap(m, h); m = maxHeld.Load() {
				}
				granted.Add(1)
				actual := est * 3 / 4
				used.Add(actual)
				held.Add(-est)
				l.Settle(r, actual)
				l.Settle(r, actual) // idempotent
			}
		}()
	}
	wg.Wait()
	require.Positive(t, refused.Load(), "the load exceeds the budget")
	require.LessOrEqual(t, used.Load(), int64(limit))
	require.LessOrEqual(t, maxHeld.Load(), int64(limit))
	for _, l := range replicas {
		require.NoError(t, l.Flush(ctx, true))
		require.Zero(t, l.Leased(), "every lease went back")
	}
	u, err := budget.New(rdb, lim).Used(ctx, budget.Scope{Tenant: "t", Session: "s"})
	require.NoError(t, err)
	require.Equal(t, used.Load(), u[1], "the tenant counter is the actual usage")
	require.Equal(t, used.Load(), u[2], "the session counter too")
	require.Equal(t, used.Load(), u[0], "and the unlimited global counter, written in batches")
}

// Near the limit a lease is exactly a call's estimate, so a second replica
// still gets what the first does not use.
func TestLeasesShrinkNearTheLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := testenv.Redis(t)
	lim := budget.Limits{Task: 1_000}
	a := budget.NewLeases(budget.New(rdb, lim), 100_000, time.Hour, nil)
	b := budget.NewLeases(budget.New(rdb, lim), 100_000, time.Hour, nil)
	require.NoError(t, a.Load(ctx))
	s := budget.Scope{Task: "k"}
	r, err := a.Reserve(ctx, s, 500)
	require.NoError(t, err, "remaining/8 < 500: an exact lease")
	require.Zero(t, a.Leased())
	r2, err := b.Reserve(ctx, s, 500)
	require.NoError(t, err, "the other replica gets the rest")
	_, err = b.Reserve(ctx, s, 1)
	require.ErrorIs(t, err, budget.ErrTaskBudgetExceeded)
	a.Settle(r, 100)
	b.Settle(r2, 500)
	require.NoError(t, a.Flush(ctx, true))
	_, err = b.Reserve(ctx, s, 400)
	require.NoError(t, err, "what a did not use went back")
}

package budget_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

func TestScopes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := testenv.Redis(t)
	b := budget.New(rdb, budget.Limits{Global: -1, Session: 1000})
	s := budget.Scope{Tenant: "t1", Session: "s1", Task: "k1", Provider: "anthropic"}
	r, err := b.Reserve(ctx, s, 900)
	require.NoError(t, err)
	require.NoError(t, b.Settle(ctx, r, 900))

	r, err = b.Reserve(ctx, s, 100)
	require.NoError(t, err, "900 used + 100 = limit is allowed")
	require.NoError(t, b.Settle(ctx, r, 0))
	_, err = b.Reserve(ctx, s, 101)
	require.ErrorIs(t, err, budget.ErrSessionBudgetExceeded)
	require.ErrorIs(t, err, budget.ErrBudgetExceeded)

	_, err = b.Reserve(ctx, budget.Scope{Tenant: "t1", Session: "s2"}, 1_000_000)
	require.ErrorIs(t, err, budget.ErrSessionBudgetExceeded)
	_, err = b.Reserve(ctx, budget.Scope{Tenant: "t1"}, 1_000_000)
	require.NoError(t, err, "global -1 never blocks; no session means no session limit")

	// Global and task both exceeded: global is reported.
	b2 := budget.New(rdb, budget.Limits{Global: 10, Task: 10})
	_, err = b2.Reserve(ctx, budget.Scope{Task: "k2"}, 11)
	require.ErrorIs(t, err, budget.ErrGlobalBudgetExceeded)

	// A per-call task budget overrides the configured one.
	b3 := budget.New(testenv.Redis(t), budget.Limits{})
	_, err = b3.Reserve(ctx, budget.Scope{Task: "k3", TaskLimit: 50}, 51)
	require.ErrorIs(t, err, budget.ErrTaskBudgetExceeded)
	used, err := b3.Used(ctx, budget.Scope{Task: "k3"})
	require.NoError(t, err)
	require.Equal(t, int64(0), used[3], "a refused reservation holds nothing")
}

func TestSettleAdjusts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := budget.New(testenv.Redis(t), budget.Limits{Provider: 1000})
	s := budget.Scope{Provider: "openai"}
	r, err := b.Reserve(ctx, s, 500)
	require.NoError(t, err)
	require.NoError(t, b.Settle(ctx, r, 200))
	require.NoError(t, b.Settle(ctx, r, 200), "idempotent")
	used, err := b.Used(ctx, s)
	require.NoError(t, err)
	require.Equal(t, int64(200), used[4])
	_, err = b.Reserve(ctx, s, 801)
	require.ErrorIs(t, err, budget.ErrProviderBudgetExceeded)
}

// A refusal reaches a client as ResourceExhausted naming its scope; a
// scope that renews each period says when to retry, a lifetime one not.
func TestRefusalIsResourceExhausted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := budget.New(testenv.Redis(t), budget.Limits{Tenant: 10, Session: 100, Period: time.Hour})
	_, err := b.Reserve(ctx, budget.Scope{Tenant: "t", Session: "s"}, 11)
	st := status.Convert(apierr.Status(ctx, logx.Discard(), "call", err))
	require.Equal(t, codes.ResourceExhausted, st.Code())
	require.Equal(t, "tenant token budget exceeded: 0 used + 11 estimated > 10", st.Message())
	info := apierr.Info(st)
	require.Equal(t, budget.ReasonBudgetExceeded, info.GetReason())
	require.Equal(t, "tenant", info.GetMetadata()["scope"])
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	require.NotNil(t, retry)
	require.Positive(t, retry.GetRetryDelay().AsDuration())
	require.LessOrEqual(t, retry.GetRetryDelay().AsDuration(), time.Hour)

	_, err = b.Reserve(ctx, budget.Scope{Session: "s"}, 101)
	require.ErrorIs(t, err, budget.ErrSessionBudgetExceeded)
	require.NotErrorIs(t, err, budget.ErrTenantBudgetExceeded)
	st = status.Convert(apierr.Status(ctx, logx.Discard(), "call", err))
	require.Equal(t, "session", apierr.Info(st).GetMetadata()["scope"])
	for _, d := range st.Details() {
		_, isRetry := d.(*errdetails.RetryInfo)
		require.False(t, isRetry, "retrying will not renew a session's budget")
	}
}

// Two replicas reserving concurrently never hold more than the limit.
func TestConcurrentReplicasNeverOvershoot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := testenv.Redis(t)
	const limit = 10_000
	replicas := []*budget.Budgets{budget.New(rdb, budget.Limits{Tenant: limit}), budget.New(rdb, budget.Limits{Tenant: limit})}
	var granted, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := replicas[g%2]
			for i := range 40 {
				est := int64(37 + (g*7+i)%50)
				r, err := b.Reserve(ctx, budget.Scope{Tenant: "t"}, est)
				if err != nil {
					require.ErrorIs(t, err, budget.ErrTenantBudgetExceeded)
					refused.Add(1)
					continue
				}
				granted.Add(est)
				require.NoError(t, b.Settle(ctx, r, est))
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, granted.Load(), int64(limit))
	require.Positive(t, refused.Load())
	used, err := replicas[0].Used(ctx, budget.Scope{Tenant: "t"})
	require.NoError(t, err)
	require.Equal(t, granted.Load(), used[1])
}

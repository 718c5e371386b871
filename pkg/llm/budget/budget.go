// Package budget enforces hierarchical token budgets (B-16, C-13): global,
// tenant, session, task and provider. A call reserves its estimate in every
// scope atomically in Redis (one Lua script) before it starts, and settles
// to the actual usage after, so concurrent replicas never overshoot a limit.
package budget

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/redisx"
)

// ReasonBudgetExceeded is the ResourceExhausted reason of a call refused
// for its token budget; the error's metadata "scope" names the scope, and
// a scope that renews each period (global, tenant, provider) says when to
// retry.
const ReasonBudgetExceeded = "TOKEN_BUDGET_EXCEEDED"

// ErrBudgetExceeded matches (errors.Is) every scope's refusal. A refusal is
// an apierr error (ResourceExhausted) that a client sees as it is.
var ErrBudgetExceeded = apierr.New(codes.ResourceExhausted, ReasonBudgetExceeded, "token budget exceeded")

// Scope errors, checked in this order (B-16); a refusal wraps its scope's.
var (
	ErrGlobalBudgetExceeded   = fmt.Errorf("global %w", ErrBudgetExceeded)
	ErrTenantBudgetExceeded   = fmt.Errorf("tenant %w", ErrBudgetExceeded)
	ErrSessionBudgetExceeded  = fmt.Errorf("session %w", ErrBudgetExceeded)
	ErrTaskBudgetExceeded     = fmt.Errorf("task %w", ErrBudgetExceeded)
	ErrProviderBudgetExceeded = fmt.Errorf("provider %w", ErrBudgetExceeded)
)

var (
	scopeErrs  = []error{ErrGlobalBudgetExceeded, ErrTenantBudgetExceeded, ErrSessionBudgetExceeded, ErrTaskBudgetExceeded, ErrProviderBudgetExceeded}
	scopeNames = []string{"global", "tenant", "session", "task", "provider"}
	// periodic marks the scopes whose limit applies per Period.
	periodic = []bool{true, true, false, false, true}
)

// Limits are token limits; zero or negative is unlimited. Global, tenant and
// provider limits apply per Period; session and task limits to their lifetime.
type Limits struct {
	Global, Tenant, Session, Task, Provider int64
	Period                                  time.Duration
}

// Scope names what a call is charged to.
type Scope struct {
	Tenant, Session, Task, Provider string
	// SessionLimit and TaskLimit, when positive, override Limits for this
	// call (a per-task budget from the Architect).
	SessionLimit, TaskLimit int64
}

// lifetimeTTL bounds how long session and task counters are kept.
const lifetimeTTL = 30 * 24 * time.Hour

// KEYS: five counters. ARGV: estimate, five limits, five TTLs (ms).
var reserve = redis.NewScript(`
local est = tonumber(ARGV[1])
for i = 1, 5 do
  local limit = tonumber(ARGV[1 + i])
  if limit > 0 then
    local used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if used + est > limit then return {i, used} end
  end
end
for i = 1, 5 do
  local v = redis.call('INCRBY', KEYS[i], est)
  if v == est then redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[6 + i])) end
end
return {0, 0}
`)

var settle = redis.NewScript(`
local d = tonumber(ARGV[1])
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('INCRBY', KEYS[i], d) end
end
return 0
`)

// Budgets reserves and settles tokens.
type Budgets struct {
	rdb    *redisx.Client
	limits Limits
	now    func() time.Time
}

// New returns budgets with limits.
func New(rdb *redisx.Client, limits Limits) *Budgets {
	if limits.Period <= 0 {
		limits.Period = 24 * time.Hour
	}
	return &Budgets{rdb: rdb, limits: limits, now: time.Now}
}

// Reservation is tokens held for one call.
type Reservation struct {
	keys     []string
	Estimate int64
	settled  bool
}

func (b *Budgets) keys(s Scope) ([]string, []int64, []int64) {
	period := strconv.FormatInt(b.now().UnixMilli()/b.limits.Period.Milliseconds(), 10)
	pttl := (b.limits.Period + time.Hour).Milliseconds()
	sl, tl := b.limits.Session, b.limits.Task
	if s.SessionLimit > 0 {
		sl = s.SessionLimit
	}
	if s.TaskLimit > 0 {
		tl = s.TaskLimit
	}
	// A missing id means the scope does not apply: its counter is a
	// throw-away key and its limit is off.
	off := func(id string, l int64) int64 {
		if id == "" {
			return 0
		}
		return l
	}
	keys := []string{
		b.rdb.Key("llm", "{budget}", "global", period),
		b.rdb.Key("llm", "{budget}", "tenant", s.Tenant, period),
		b.rdb.Key("llm", "{budget}", "session", s.Tenant, s.Session),
		b.rdb.Key("llm", "{budget}", "task", s.Tenant, s.Task),
		b.rdb.Key("llm", "{budget}", "provider", s.Provider, period),
	}
	limits := []int64{b.limits.Global, off(s.Tenant, b.limits.Tenant), off(s.Session, sl), off(s.Task, tl), off(s.Provider, b.limits.Provider)}
	ttls := []int64{pttl, pttl, lifetimeTTL.Milliseconds(), lifetimeTTL.Milliseconds(), pttl}
	return keys, limits, ttls
}

// Reserve holds estimate tokens in every scope, or fails with the first
// scope (global, tenant, session, task, provider) whose usage plus the
// estimate would exceed its limit. Equal is allowed.
func (b *Budgets) Reserve(ctx context.Context, s Scope, estimate int64) (*Reservation, error) {
	keys, limits, argv := b.reserveArgs(s, estimate)
	return b.reserved(keys, limits, estimate, reserve.Run(ctx, b.rdb, keys, argv...))
}

func (b *Budgets) reserveArgs(s Scope, estimate int64) ([]string, []int64, []any) {
	keys, limits, ttls := b.keys(s)
	argv := []any{estimate}
	for _, l := range limits {
		argv = append(argv, l)
	}
	for _, t := range ttls {
		argv = append(argv, t)
	}
	return keys, limits, argv
}

func (b *Budgets) reserved(keys []string, limits []int64, estimate int64, c *redis.Cmd) (*Reservation, error) {
	res, err := c.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("reserve budget: %w", err)
	}
	if res[0] != 0 {
		return nil, b.exceeded(int(res[0]-1), fmt.Sprintf("%d used + %d estimated > %d", res[1], estimate, limits[res[0]-1]))
	}
	return &Reservation{keys: keys, Estimate: estimate}, nil
}

// exceeded is the refusal of scope i, detail saying by how much: the
// scope's error as an apierr error naming the scope, with when its period
// renews for a periodic scope.
func (b *Budgets) exceeded(i int, detail string) error {
	e := ErrBudgetExceeded.Withf("%v: %s", scopeErrs[i], detail).With("scope", scopeNames[i]).Wrap(scopeErrs[i])
	if periodic[i] {
		period := b.limits.Period.Milliseconds()
		now := b.now().UnixMilli()
		e.RetryAfter = time.Duration(period-now%period) * time.Millisecond
	}
	return e
}

// Load loads the scripts into Redis so that pipelined calls can use them.
func (b *Budgets) Load(ctx context.Context) error {
	return errors.Join(reserve.Load(ctx, b.rdb).Err(), settle.Load(ctx, b.rdb).Err())
}

// ReserveCmd queues Reserve on pipe; call the returned function after the
// pipeline ran.
func (b *Budgets) ReserveCmd(ctx context.Context, pipe redis.Pipeliner, s Scope, estimate int64) func() (*Reservation, error) {
	if estimate < 0 {
		estimate = 0
	}
	keys, limits, argv := b.reserveArgs(s, estimate)
	c := reserve.EvalSha(ctx, pipe, keys, argv...)
	return func() (*Reservation, error) { return b.reserved(keys, limits, estimate, c) }
}

// SettleCmd queues Settle on pipe.
func (b *Budgets) SettleCmd(ctx context.Context, pipe redis.Pipeliner, r *Reservation, actual int64) func() error {
	if r == nil || r.settled {
		return func() error { return nil }
	}
	r.settled = true
	d := actual - r.Estimate
	if d == 0 {
		return func() error { return nil }
	}
	c := settle.EvalSha(ctx, pipe, r.keys, d)
	return func() error {
		if err := c.Err(); err != nil {
			return fmt.Errorf("settle budget: %w", err)
		}
		return nil
	}
}

// Settle replaces the reservation by the actual usage (0 releases it). It
// is idempotent.
func (b *Budgets) Settle(ctx context.Context, r *Reservation, actual int64) error {
	if r == nil || r.settled {
		return nil
	}
	r.settled = true
	if d := actual - r.Estimate; d != 0 {
		if err := settle.Run(ctx, b.rdb, r.keys, d).Err(); err != nil {
			return fmt.Errorf("settle budget: %w", err)
		}
	}
	return nil
}

// Used returns the tokens used (and reserved) per scope: global, tenant,
// session, task, provider.
func (b *Budgets) Used(ctx context.Context, s Scope) ([]int64, error) {
	keys, _, _ := b.keys(s)
	vals, err := b.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(vals))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i], _ = strconv.ParseInt(str, 10, 64)
		}
	}
	return out, nil
}

package toolexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/redisx"
)

// SlotPool hands out subprocess slots. Pool (one process) and ClusterPool
// (every worker of the cluster) implement it.
type SlotPool interface {
	Acquire(ctx context.Context, class Class, priority int, timeout time.Duration, preempt context.CancelCauseFunc) (func(), error)
}

var (
	_ SlotPool = (*Pool)(nil)
	_ SlotPool = (*ClusterPool)(nil)
)

// ClusterPool is the subprocess slot pool shared by every worker of the
// cluster through Redis (spec C-21, C-22): total slots, reservePercent of
// them kept for user-interactive calls. Each held slot is a lease that
// expires unless renewed: the holder renews it every ttl/3 until released,
// so the slots of a worker that died come back within ttl. A call that finds
// no free slot, or Redis unreachable, polls until one frees up; pipeline
// calls give up after their timeout with ErrPoolTimeout. Unlike Pool, it does not preempt running
// pipeline calls of other workers for a user call; user calls have the
// reserve.
type ClusterPool struct {
	rc       *redisx.Client
	general  string
	user     string
	total    int
	reserve  int
	ttl      time.Duration
	interval time.Duration
}

// NewClusterPool makes a pool named name (workers sharing a name share the
// slots) of total slots with leases of ttl.
func NewClusterPool(rc *redisx.Client, name string, total, reservePercent int, ttl time.Duration) *ClusterPool {
	total = max(total, 1)
	return &ClusterPool{
		rc: rc, general: rc.Key("toolexec", "slots", name), user: rc.Key("toolexec", "slots", name, "user"),
		total: total, reserve: total * reservePercent / 100, ttl: max(ttl, 300*time.Millisecond), interval: 20 * time.Millisecond,
	}
}

// NewClusterPoolFor makes a cluster pool sized by cfg: cfg.Slots (2 x CPUs
// when 0) is then the budget of the whole cluster, and every worker sharing
// name must be given the same one.
func NewClusterPoolFor(rc *redisx.Client, name string, cfg Config, ttl time.Duration) *ClusterPool {
	return NewClusterPool(rc, name, cfg.slots(), cfg.UserReservePercent, ttl)
}

// clusterAcquire: KEYS are the pipeline and the user slots (sorted sets of
// lease members scored by expiry). A pipeline call may take the general
// slots only; a user call any free slot.
var clusterAcquire = redis.NewScript(`
local now = tonumber(ARGV[1])
local exp = now + tonumber(ARGV[2])
local total = tonumber(ARGV[3])
local reserve = tonumber(ARGV[4])
local user = ARGV[5] == '1'
for i = 1, 2 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
local g = redis.call('ZCARD', KEYS[1])
local u = redis.call('ZCARD', KEYS[2])
local ok
if user then
  ok = g + u < total
else
  ok = g + u < total and g < total - reserve
end
if not ok then return 0 end
local into = KEYS[1]
if user then into = KEYS[2] end
redis.call('ZADD', into, exp, ARGV[6])
for i = 1, 2 do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2) end
return 1
`)

// clusterRenew extends a lease that still exists (XX: a lease that already
// expired is not revived).
var clusterRenew = redis.NewScript(`
local n = redis.call('ZADD', KEYS[1], 'XX', 'CH', tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return n
`)

// Acquire takes a slot. preempt is not used (see ClusterPool). The returned
// release gives the slot back; it is safe to call more than once.
func (p *ClusterPool) Acquire(ctx context.Context, class Class, _ int, timeout time.Duration, _ context.CancelCauseFunc) (func(), error) {
	member, err := leaseID()
	if err != nil {
		return nil, err
	}
	key, user := p.general, "0"
	if class == ClassUser {
		key, user = p.user, "1"
	}
	var deadline <-chan time.Time
	if class == ClassPipeline && timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	wait := time.NewTicker(p.interval)
	defer wait.Stop()
	// Redis that does not answer is waited for like a slot that is not
	// free: a task must not fail for a store that comes back, and one that
	// does not come back in time goes back to the queue (ErrPoolTimeout).
	var unreachable error
	for {
		got, err := clusterAcquire.Run(ctx, p.rc, []string{p.general, p.user},
			time.Now().UnixMilli(), p.ttl.Milliseconds(), p.total, p.reserve, user, member).Int()
		if err == nil && got == 1 {
			return p.hold(key, member), nil
		}
		unreachable = err
		next := wait.C
		if err != nil && ctx.Err() == nil {
			next = time.After(unreachableBackoff)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-deadline:
			if unreachable != nil {
				return nil, fmt.Errorf("%w: acquire a subprocess slot: %w", ErrPoolTimeout, unreachable)
			}
			return nil, ErrPoolTimeout
		case <-next:
		}
	}
}

// unreachableBackoff is how often Acquire asks a Redis that did not answer
// again.
const unreachableBackoff = 250 * time.Millisecond

// hold renews a lease until it is released.
func (p *ClusterPool) hold(key, member string) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// A failed renewal is retried on the next tick; the lease
				// lasts ttl, three ticks.
				_ = clusterRenew.Run(ctx, p.rc, []string{key},
					time.Now().Add(p.ttl).UnixMilli(), member, (2 * p.ttl).Milliseconds()).Err()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			rctx, rcancel := context.WithTimeout(context.Background(), p.ttl)
			defer rcancel()
			// Should this fail, the lease expires on its own.
			_ = p.rc.ZRem(rctx, key, member).Err()
		})
	}
}

// Stats returns the slots held across the cluster (leases not expired).
func (p *ClusterPool) Stats(ctx context.Context) (Stats, error) {
	now := fmt.Sprint(time.Now().UnixMilli())
	g, err := p.rc.ZCount(ctx, p.general, "("+now, "+inf").Result()
	if err != nil {
		return Stats{}, err
	}
	u, err := p.rc.ZCount(ctx, p.user, "("+now, "+inf").Result()
	if err != nil {
		return Stats{}, err
	}
	return Stats{Total: p.total, Reserve: p.reserve, InUse: int(g + u)}, nil
}

func leaseID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lease id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

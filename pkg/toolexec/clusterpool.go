package toolexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
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
// no free slot polls until one frees up; pipeline calls give up after their
// timeout with ErrPoolTimeout. Unlike Pool, it does not preempt running
// pipeline calls of other workers for a user call; user calls have the
// reserve.
//
// With Redis unreachable, calls take slots from a Pool of this worker's
// own instead (degraded mode: 2 x CPUs, at most total), so that tasks still
// start; Redis is asked again at most every probeInterval, and the shared
// slots are used again once it answers. Each outage is logged once, when
// it begins and when it ends, not at every call.
type ClusterPool struct {
	rc       *redisx.Client
	general  string
	user     string
	total    int
	reserve  int
	ttl      time.Duration
	interval time.Duration
	// local holds the slots while Redis is unreachable.
	local *Pool
	log   *slog.Logger
	// mu guards the outage's state: down since when, and when Redis was
	// last asked during it.
	mu     sync.Mutex
	down   bool
	since  time.Time
	probed time.Time
}

// NewClusterPool makes a pool named name (workers sharing a name share the
// slots) of total slots with leases of ttl.
func NewClusterPool(rc *redisx.Client, name string, total, reservePercent int, ttl time.Duration) *ClusterPool {
	total = max(total, 1)
	return &ClusterPool{
		rc: rc, general: rc.Key("toolexec", "slots", name), user: rc.Key("toolexec", "slots", name, "user"),
		total: total, reserve: total * reservePercent / 100, ttl: max(ttl, 300*time.Millisecond), interval: 20 * time.Millisecond,
		local: NewPool(min(total, 2*runtime.NumCPU()), reservePercent), log: slog.New(slog.DiscardHandler),
	}
}

// NewClusterPoolFor makes a cluster pool sized by cfg: cfg.Slots (2 x CPUs
// when 0) is then the budget of the whole cluster, and every worker sharing
// name must be given the same one.
func NewClusterPoolFor(rc *redisx.Client, name string, cfg Config, ttl time.Duration) *ClusterPool {
	return NewClusterPool(rc, name, cfg.slots(), cfg.UserReservePercent, ttl)
}

// SetLogger sets where the pool says that Redis became unreachable and
// that it came back.
func (p *ClusterPool) SetLogger(l *slog.Logger) {
	if l != nil {
		p.log = l
	}
}

// Degraded reports whether the pool hands out local slots now, Redis
// being unreachable.
func (p *ClusterPool) Degraded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// Local is the pool of this worker's own slots used while Redis is
// unreachable.
func (p *ClusterPool) Local() *Pool { return p.local }

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

// Acquire takes a slot. preempt is used by local slots only (see
// ClusterPool). The returned release gives the slot back; it is safe to
// call more than once.
func (p *ClusterPool) Acquire(ctx context.Context, class Class, priority int, timeout time.Duration, preempt context.CancelCauseFunc) (func(), error) {
	member, err := leaseID()
	if err != nil {
		return nil, err
	}
	key, user := p.general, "0"
	if class == ClassUser {
		key, user = p.user, "1"
	}
	start := time.Now()
	var deadline <-chan time.Time
	if class == ClassPipeline && timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	wait := time.NewTicker(p.interval)
	defer wait.Stop()
	for {
		ask, degraded := p.shouldAsk()
		if !ask {
			return p.acquireLocal(ctx, class, priority, timeout, start, preempt)
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if degraded {
			rctx, cancel = context.WithTimeout(ctx, probeTimeout)
		}
		got, err := clusterAcquire.Run(rctx, p.rc, []string{p.general, p.user},
			time.Now().UnixMilli(), p.ttl.Milliseconds(), p.total, p.reserve, user, member).Int()
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			p.wentDown(err)
			return p.acquireLocal(ctx, class, priority, timeout, start, preempt)
		case err == nil:
			p.cameBack()
			if got == 1 {
				return p.hold(key, member), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-deadline:
			return nil, ErrPoolTimeout
		case <-wait.C:
		}
	}
}

// Timings of the degraded mode.
const (
	// probeInterval is how often Redis is asked again during an outage.
	probeInterval = time.Second
	// probeTimeout bounds such a question: a Redis that does not answer
	// must not hold up every task's start.
	probeTimeout = 500 * time.Millisecond
)

// shouldAsk says whether to ask Redis for a slot: always but during an
// outage, then once every probeInterval. degraded is whether Redis is down.
func (p *ClusterPool) shouldAsk() (ask, degraded bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down {
		return true, false
	}
	if now := time.Now(); now.Sub(p.probed) >= probeInterval {
		p.probed = now
		return true, true
	}
	return false, true
}

// acquireLocal takes one of this worker's own slots, within what is left
// of a pipeline call's timeout.
func (p *ClusterPool) acquireLocal(ctx context.Context, class Class, priority int, timeout time.Duration, start time.Time,
	preempt context.CancelCauseFunc) (func(), error) {
	if class == ClassPipeline && timeout > 0 {
		timeout -= time.Since(start)
		if timeout <= 0 {
			return nil, ErrPoolTimeout
		}
	}
	return p.local.Acquire(ctx, class, priority, timeout, preempt)
}

// wentDown records that Redis did not answer, and logs it once per outage.
func (p *ClusterPool) wentDown(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed = time.Now()
	if p.down {
		return
	}
	p.down, p.since = true, p.probed
	p.log.Warn("Redis is unreachable: subprocess slots are taken from this worker's own pool until it answers again",
		slog.Int("local_slots", p.local.Stats().Total), slog.Int("cluster_slots", p.total), slog.String("error", err.Error()))
}

// cameBack records that Redis answered, and logs the end of an outage.
func (p *ClusterPool) cameBack() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down {
		return
	}
	p.down = false
	p.log.Info("Redis answers again: subprocess slots are shared across the cluster again",
		slog.Duration("outage", time.Since(p.since)))
}

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

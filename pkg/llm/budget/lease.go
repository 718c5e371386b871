package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leases serve reservations from tokens leased in chunks from the shared
// Redis counters, so that most calls reserve and settle without a Redis
// round trip while the sum over every replica never exceeds a limit:
//
//   - A limited scope's counter in Redis holds every replica's leases plus
//     their settled overruns. A lease is granted by one Lua script, for
//     every scope a call needs at once, only when the counter plus the grant
//     stays within the limit.
//   - A call reserves its estimate from the local leases (a mutex and five
//     subtractions) and settles locally: the unused part of the estimate goes
//     back to the lease. When less than a chunk is left a background refill
//     asks for the next chunk, so a replica holds at most about two chunks.
//   - A grant is min(chunk, remaining/8) but at least what the call needs: as
//     the remaining budget shrinks, leases shrink with it until each call
//     reserves exactly its own estimate (the per-call behaviour of Reserve),
//     so a limit is never overshot and little sits unused in other replicas.
//     A background refill takes only a whole chunk, so that near the limit
//     nothing is leased ahead of need.
//   - Unlimited scopes have no lease: their usage is added to the counter in
//     batches (Flush, every FlushInterval from the gate).
//   - Unused leases go back to Redis after LeaseIdle without use, when their
//     period ends, and on Close.
type Leases struct {
	b     *Budgets
	chunk int64
	idle  time.Duration

	mu     sync.Mutex
	leases map[string]*lease
	// flushing serialises Flush.
	flushing sync.Mutex
	refills  sync.WaitGroup
	log      func(error)
	// local and leased count reservations served from the local leases and
	// those that waited for a lease from Redis.
	local, leased atomic.Int64
}

// Stats returns how many reservations were served from the local leases
// and how many waited for a lease from Redis.
func (l *Leases) Stats() (local, leased int64) { return l.local.Load(), l.leased.Load() }

type lease struct {
	limit int64
	ttl   int64
	// avail is leased and not reserved by a call; negative is an overrun to
	// charge to Redis at the next flush.
	avail int64
	// used is settled usage charged while the scope was unlimited, not yet
	// added to Redis.
	used      int64
	lastUse   time.Time
	refilling bool
}

// LeaseReservation is tokens held from the local leases for one call.
type LeaseReservation struct {
	keys         []string
	limits, ttls []int64
	Estimate     int64
	settled      bool
}

// KEYS: counters. ARGV per key: need, chunk, limit, ttl (ms). All or
// nothing: returns {0, grant...} or {i, used} for the first key i that
// cannot give its need.
var acquire = redis.NewScript(`
local n = #KEYS
local grants = {}
for i = 1, n do
  local need = tonumber(ARGV[4*i-3])
  local chunk = tonumber(ARGV[4*i-2])
  local limit = tonumber(ARGV[4*i-1])
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  local remaining = limit - used
  if need > 0 and remaining < need then return {i, used} end
  local g = math.floor(remaining / 8)
  if g > chunk then g = chunk end
  if g < need then g = need end
  -- A refill (need -1) takes only a whole chunk: near the limit every call
  -- reserves exactly its own estimate, and no replica holds a sliver
  -- ahead of need that another replica's call could have used.
  if need < 0 and g < chunk then g = 0 end
  grants[i] = g
end
local out = {0}
for i = 1, n do
  if grants[i] > 0 then
    local v = redis.call('INCRBY', KEYS[i], grants[i])
    if v == grants[i] then redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[4*i])) end
  end
  out[i + 1] = grants[i]
end
return out
`)

// KEYS: counters. ARGV per key: delta, ttl (ms). A positive delta creates a
// missing counter; a negative one only lowers an existing counter.
var adjust = redis.NewScript(`
for i = 1, #KEYS do
  local d = tonumber(ARGV[2*i-1])
  if d > 0 then
    local v = redis.call('INCRBY', KEYS[i], d)
    if v == d then redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2*i])) end
  elseif d < 0 and redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('INCRBY', KEYS[i], d)
  end
end
return 0
`)

// NewLeases serves b's limits from leases of at most chunk tokens per
// scope; chunk <= 0 leases exactly each call's estimate (every reservation
// is a Redis round trip). Unused leases return after idle without use.
func NewLeases(b *Budgets, chunk int64, idle time.Duration, logErr func(error)) *Leases {
	if idle <= 0 {
		idle = 2 * time.Second
	}
	if logErr == nil {
		logErr = func(error) {}
	}
	return &Leases{b: b, chunk: max(chunk, 0), idle: idle, leases: map[string]*lease{}, log: logErr}
}

// Load loads the scripts into Redis.
func (l *Leases) Load(ctx context.Context) error {
	return errors.Join(acquire.Load(ctx, l.b.rdb).Err(), adjust.Load(ctx, l.b.rdb).Err())
}

// Reserve holds estimate tokens in every scope of s, from the local leases
// when they have room, else by leasing more from Redis; it fails like
// Budgets.Reserve when a scope's limit would be exceeded.
func (l *Leases) Reserve(ctx context.Context, s Scope, estimate int64) (*LeaseReservation, error) {
	estimate = max(estimate, 0)
	keys, limits, ttls := l.b.keys(s)
	if r, ok := l.take(keys, limits, ttls, estimate); ok {
		l.local.Add(1)
		return r, nil
	}
	l.leased.Add(1)
	// Slow path: lease what the local leases lack, atomically in every
	// limited scope, then take.
	for attempt := 0; ; attempt++ {
		var akeys []string
		var argv []any
		var idx []int
		l.mu.Lock()
		for i, k := range keys {
			if limits[i] <= 0 {
				continue
			}
			le := l.leaseLocked(k, limits[i], ttls[i])
			need := estimate - le.avail
			if need <= 0 && attempt == 0 {
				continue
			}
			need = max(need, 0)
			akeys = append(akeys, k)
			idx = append(idx, i)
			argv = append(argv, need, l.chunk, limits[i], ttls[i])
		}
		l.mu.Unlock()
		if len(akeys) > 0 {
			res, err := acquire.Run(ctx, l.b.rdb, akeys, argv...).Int64Slice()
			if err != nil {
				return nil, fmt.Errorf("lease budget: %w", err)
			}
			if res[0] != 0 {
				i := idx[res[0]-1]
				return nil, l.b.exceeded(i, fmt.Sprintf("%d used or leased + %d estimated > %d", res[1], estimate, limits[i]))
			}
			l.mu.Lock()
			for j, k := range akeys {
				l.leaseLocked(k, limits[idx[j]], ttls[idx[j]]).avail += res[j+1]
			}
			l.mu.Unlock()
		}
		if r, ok := l.take(keys, limits, ttls, estimate); ok {
			return r, nil
		}
		// Concurrent calls took what was leased; lease again (bounded).
		if attempt >= 8 {
			return nil, fmt.Errorf("lease budget: contention after %d attempts", attempt+1)
		}
	}
}

func (l *Leases) leaseLocked(k string, limit, ttl int64) *lease {
	le := l.leases[k]
	if le == nil {
		le = &lease{}
		l.leases[k] = le
	}
	le.limit, le.ttl = limit, ttl
	return le
}

// take reserves from the local leases when every limited scope has room,
// starting a background refill of a lease that runs low.
func (l *Leases) take(keys []string, limits, ttls []int64, estimate int64) (*LeaseReservation, bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys {
		if limits[i] <= 0 {
			continue
		}
		le := l.leases[k]
		if le == nil || le.avail < estimate || le.limit != limits[i] {
			return nil, false
		}
	}
	for i, k := range keys {
		le := l.leaseLocked(k, limits[i], ttls[i])
		le.lastUse = now
		if limits[i] <= 0 {
			continue
		}
		le.avail -= estimate
		if l.chunk > 0 && le.avail < l.chunk && !le.refilling {
			le.refilling = true
			l.refills.Add(1)
			go l.refill(k, limits[i], ttls[i])
		}
	}
	return &LeaseReservation{keys: keys, limits: limits, ttls: ttls, Estimate: estimate}, true
}

// refillNeed asks acquire for a whole chunk ahead of need, or nothing.
const refillNeed = -1

// refill leases the next chunk of one scope ahead of need, while the
// remaining budget allows a whole one.
func (l *Leases) refill(k string, limit, ttl int64) {
	defer l.refills.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := acquire.Run(ctx, l.b.rdb, []string{k}, refillNeed, l.chunk, limit, ttl).Int64Slice()
	l.mu.Lock()
	defer l.mu.Unlock()
	le := l.leases[k]
	if le == nil {
		le = l.leaseLocked(k, limit, ttl)
	}
	le.refilling = false
	if err != nil {
		l.log(fmt.Errorf("refill budget lease: %w", err))
		return
	}
	if res[0] == 0 {
		le.avail += res[1]
	}
}

// Settle replaces the reservation by the actual usage (0 releases it),
// locally; Flush carries it to Redis. It is idempotent.
func (l *Leases) Settle(r *LeaseReservation, actual int64) {
	if r == nil || r.settled {
		return
	}
	r.settled = true
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range r.keys {
		le := l.leases[k]
		if le == nil {
			le = &lease{limit: r.limits[i], ttl: r.ttls[i], lastUse: time.Now()}
			l.leases[k] = le
		}
		if r.limits[i] > 0 {
			le.avail += r.Estimate - actual
		} else {
			le.used += actual
		}
	}
}

// Flush carries settled usage of unlimited scopes and overruns to Redis,
// and returns leases idle for longer than the idle time (all of them when
// all is true) in one round trip.
func (l *Leases) Flush(ctx context.Context, all bool) error {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	if all {
		l.refills.Wait()
	}
	now := time.Now()
	var keys []string
	var argv []any
	type undo struct {
		k                string
		used, avail, ttl int64
	}
	var taken []undo
	l.mu.Lock()
	for k, le := range l.leases {
		u := undo{k: k, used: le.used, ttl: le.ttl}
		switch {
		case le.avail < 0:
			u.avail = le.avail
		case le.avail > 0 && !le.refilling && (all || now.Sub(le.lastUse) >= l.idle):
			u.avail = le.avail
		}
		if d := u.used - u.avail; d != 0 {
			le.used -= u.used
			le.avail -= u.avail
			keys = append(keys, k)
			argv = append(argv, d, le.ttl)
			taken = append(taken, u)
		}
		if le.avail == 0 && le.used == 0 && !le.refilling && now.Sub(le.lastUse) >= l.idle {
			delete(l.leases, k)
		}
	}
	l.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	if err := adjust.Run(ctx, l.b.rdb, keys, argv...).Err(); err != nil {
		// Keep what was not carried over for the next flush.
		l.mu.Lock()
		for _, u := range taken {
			le := l.leases[u.k]
			if le == nil {
				le = &lease{ttl: u.ttl, lastUse: now}
				l.leases[u.k] = le
			}
			le.used += u.used
			le.avail += u.avail
		}
		l.mu.Unlock()
		return fmt.Errorf("flush budget leases: %w", err)
	}
	return nil
}

// Leased is the tokens this replica holds leased and unreserved per scope
// key (tests, reports).
func (l *Leases) Leased() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, le := range l.leases {
		if le.avail > 0 {
			n += le.avail
		}
	}
	return n
}

package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/redisx"
)

// slotLimiter holds the cluster-wide dispatch slots in Redis, so that every
// replica agrees on them (spec C-15, C-21): at most total nodes run at once
// across all runs; reservePercent of them are kept for user-interactive
// runs; the rest are shared fairly between the sessions that want slots
// (each gets at least one). A slot is a member per node attempt with an
// expiry, renewed while the attempt runs, so that the slots of a crashed
// replica come back on their own.
type slotLimiter struct {
	rc             *redisx.Client
	total          int
	reservePercent int
	ttl            time.Duration
}

// acquireScript: KEYS are the general slots, the session's slots, the
// active sessions and the interactive slots. Interactive work takes any free
// slot (the reserve first); other work gets at most its fair share of the
// general slots, less whatever interactive work took beyond the reserve.
var acquireScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local exp = now + tonumber(ARGV[2])
local total = tonumber(ARGV[3])
local reserve = tonumber(ARGV[4])
local interactive = ARGV[5] == '1'
local session = ARGV[6]
for i = 1, 4 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
local g = redis.call('ZCARD', KEYS[1])
local u = redis.call('ZCARD', KEYS[4])
local free
local into
if interactive then
  free = total - g - u
  into = KEYS[4]
else
  redis.call('ZADD', KEYS[3], exp, session)
  local s = redis.call('ZCARD', KEYS[2])
  local active = redis.call('ZCARD', KEYS[3])
  local cap = total - reserve
  local share = math.max(1, math.floor(cap / active))
  free = math.min(cap - g - math.max(0, u - reserve), share - s)
  into = KEYS[1]
end
local want = #ARGV - 6
local grant = math.max(0, math.min(want, free))
for i = 1, grant do
  redis.call('ZADD', into, exp, ARGV[6 + i])
  redis.call('ZADD', KEYS[2], exp, ARGV[6 + i])
end
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2) end
return grant
`)

func (l *slotLimiter) keys(tenant, session string) []string {
	if session == "" {
		session = "-"
	}
	return []string{l.rc.Key("orchestrator", "slots"), l.rc.Key("orchestrator", "slots", tenant, session),
		l.rc.Key("orchestrator", "sessions"), l.rc.Key("orchestrator", "slots-interactive")}
}

// slotMember names one node attempt's slot.
func slotMember(tenant, runID, node string, attempt int32) string {
	return fmt.Sprintf("%s/%s/%s/%d", tenant, runID, node, attempt)
}

// acquire takes up to len(members) slots for a session and returns how
// many it got; the first that many members hold them.
func (l *slotLimiter) acquire(ctx context.Context, tenant, session string, interactive bool, members []string) (int, error) {
	if len(members) == 0 {
		return 0, nil
	}
	inter := "0"
	if interactive {
		inter = "1"
	}
	args := []any{time.Now().UnixMilli(), l.ttl.Milliseconds(), l.total, l.total * l.reservePercent / 100, inter, tenant + "/" + orDash(session)}
	for _, m := range members {
		args = append(args, m)
	}
	n, err := acquireScript.Run(ctx, l.rc, l.keys(tenant, session), args...).Int()
	if err != nil {
		return 0, fmt.Errorf("acquire dispatch slots: %w", err)
	}
	return n, nil
}

// release gives slots back.
func (l *slotLimiter) release(ctx context.Context, tenant, session string, members []string) error {
	if len(members) == 0 {
		return nil
	}
	k := l.keys(tenant, session)
	ms := make([]any, len(members))
	for i, m := range members {
		ms[i] = m
	}
	_, err := l.rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, k[0], ms...)
		p.ZRem(ctx, k[1], ms...)
		p.ZRem(ctx, k[3], ms...)
		return nil
	})
	return err
}

// renew extends the slots of running attempts and keeps their session
// active.
func (l *slotLimiter) renew(ctx context.Context, tenant, session string, members []string) error {
	k := l.keys(tenant, session)
	exp := strconv.FormatInt(time.Now().Add(l.ttl).UnixMilli(), 10)
	_, err := l.rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddGT(ctx, k[2], redis.Z{Score: mustFloat(exp), Member: tenant + "/" + orDash(session)})
		for _, m := range members {
			for _, key := range []string{k[0], k[1], k[3]} {
				p.ZAddArgs(ctx, key, redis.ZAddArgs{XX: true, GT: true, Members: []redis.Z{{Score: mustFloat(exp), Member: m}}})
			}
		}
		for _, key := range k {
			p.PExpire(ctx, key, 2*l.ttl)
		}
		return nil
	})
	return err
}

func mustFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// waitingKey is the Redis sorted set of runs that had ready nodes but no
// slot: the most urgent (highest node priority, then oldest) first.
func (l *slotLimiter) waitingKey() string { return l.rc.Key("orchestrator", "waiting") }

// wait records a run that could not get all the slots it wanted.
func (l *slotLimiter) wait(ctx context.Context, tenant, runID string, priority int32, created time.Time) error {
	score := float64(int64(1<<20)-int64(priority))*1e13 + float64(created.UnixMilli())
	p := l.rc.TxPipeline()
	p.ZAdd(ctx, l.waitingKey(), redis.Z{Score: score, Member: tenant + "/" + runID})
	p.PExpire(ctx, l.waitingKey(), 24*time.Hour)
	_, err := p.Exec(ctx)
	return err
}

// satisfied takes a run off the waiting set: it got every slot it wanted,
// or it ended.
func (l *slotLimiter) satisfied(ctx context.Context, tenant, runID string) error {
	return l.rc.ZRem(ctx, l.waitingKey(), tenant+"/"+runID).Err()
}

// next returns up to n waiting runs, most urgent first. They stay in the
// set until satisfied, so a wake-up racing with another is never lost.
func (l *slotLimiter) next(ctx context.Context, n int) ([]runKey, error) {
	zs, err := l.rc.ZRangeWithScores(ctx, l.waitingKey(), 0, int64(n-1)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]runKey, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		for i := 0; i < len(m); i++ {
			if m[i] == '/' {
				out = append(out, runKey{Tenant: m[:i], ID: m[i+1:]})
				break
			}
		}
	}
	return out, nil
}

// settleSlots gives back a decision's global slots, wakes the runs that
// were waiting for them, and records this run when it is waiting itself.
func (s *Service) settleSlots(ctx context.Context, log *slog.Logger, eff *effects) {
	if s.slots == nil {
		return
	}
	if len(eff.release) > 0 {
		if err := s.slots.release(ctx, eff.tenant, eff.session, eff.release); err != nil {
			log.WarnContext(ctx, "release dispatch slots", logx.Err(err))
		}
		// Every waiting run gets a look, most urgent first: one that is over
		// its share gets nothing, so it cannot starve the others of the
		// freed slots.
		if keys, err := s.slots.next(ctx, maxWoken); err != nil {
			log.WarnContext(ctx, "read waiting runs", logx.Err(err))
		} else if len(keys) > 0 {
			go s.advanceRuns(keys)
		}
	}
	switch {
	case eff.waiting:
		if err := s.slots.wait(ctx, eff.tenant, eff.runID, eff.waitPrio, eff.created); err != nil {
			log.WarnContext(ctx, "record waiting run", logx.Err(err))
		}
	case eff.satisfied || eff.completed != "":
		if err := s.slots.satisfied(ctx, eff.tenant, eff.runID); err != nil {
			log.WarnContext(ctx, "clear waiting run", logx.Err(err))
		}
	}
}

// advanceRuns moves on runs that were waiting for global slots.
func (s *Service) advanceRuns(keys []runKey) {
	ctx := s.runCtx()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		if _, err := s.withRun(ctx, k.Tenant, k.ID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
			return s.advance(ctx, tx, run, eff)
		}); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "advance a waiting run", logx.KeyRunID, k.ID, logx.Err(err))
		}
	}
}

// renewSlots keeps the global slots of this replica's running attempts.
func (s *Service) renewSlots(ctx context.Context) {
	if s.slots == nil {
		return
	}
	running, err := ownedRunning(ctx, s.db, s.cfg.ReplicaID)
	if err != nil {
		s.log.WarnContext(ctx, "list running attempts", logx.Err(err))
		return
	}
	type sess struct{ tenant, session string }
	by := map[sess][]string{}
	for _, a := range running {
		k := sess{a.Tenant, a.Session}
		by[k] = append(by[k], slotMember(a.Tenant, a.RunID, a.Node, a.Attempt))
	}
	for k, ms := range by {
		if err := s.slots.renew(ctx, k.tenant, k.session, ms); err != nil {
			s.log.WarnContext(ctx, "renew dispatch slots", logx.Err(err))
		}
	}
}

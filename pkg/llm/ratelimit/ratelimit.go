// Package ratelimit is the per-provider adaptive rate limiter of B-14/B-15,
// with its state in Redis so that every replica obeys one limiter: a 429 on
// any replica backs off all of them (1s, doubling, capped at 5m; a
// Retry-After wins), PauseAll and ResumeAll go out once per transition, and
// soft limits (requests and tokens per period) warn once per level per
// period without ever pausing.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/redisx"
)

// State is a limiter state.
type State int

// States.
const (
	OK State = iota
	Warning
	Exceeded
)

func (s State) String() string {
	return [...]string{"ok", "warning", "exceeded"}[s]
}

// SoftLimit is a provider's subscription allowance (B-15, C-11); zero
// limits are unlimited (the provider's 429s are relied on).
type SoftLimit struct {
	Requests int64
	Tokens   int64
	Period   time.Duration
	// WarnAt is the fraction at which QuotaWarning fires (e.g. 0.8).
	WarnAt float64
}

// Settings tune the limiter.
type Settings struct {
	Base time.Duration
	Cap  time.Duration
	Soft func(provider string) SoftLimit
}

// DefaultSettings: 1s base, 5m cap, no soft limits.
func DefaultSettings() Settings {
	return Settings{Base: time.Second, Cap: 5 * time.Minute, Soft: func(string) SoftLimit { return SoftLimit{} }}
}

// Fields: st 1 exceeded, at attempt, until backoff end ms, ps period start
// ms, req, tok, lvl warned level this period.
var script = redis.NewScript(`
local k = KEYS[1]
local op = ARGV[1]
local now = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local h = redis.call('HMGET', k, 'st', 'at', 'until')
local st = tonumber(h[1] or '0')
local at = tonumber(h[2] or '0')
local untilMs = tonumber(h[3] or '0')
if op == 'limit' then
  local ra = tonumber(ARGV[4])
  local base = tonumber(ARGV[5])
  local cap = tonumber(ARGV[6])
  if st == 1 and now < untilMs then
    if ra > 0 and now + ra > untilMs then
      untilMs = now + ra
      redis.call('HSET', k, 'until', untilMs)
    end
    redis.call('PEXPIRE', k, ttl)
    return {0, at, untilMs}
  end
  at = at + 1
  local backoff = base * (2 ^ (at - 1))
  if backoff > cap then backoff = cap end
  if ra > 0 then backoff = ra end
  untilMs = now + backoff
  redis.call('HSET', k, 'st', 1, 'at', at, 'until', untilMs)
  redis.call('PEXPIRE', k, ttl)
  return {1, at, untilMs}
elseif op == 'proceed' then
  if st == 1 then
    if now >= untilMs then
      redis.call('HSET', k, 'st', 0)
      return {1, 1, at}
    end
    return {0, 0, untilMs - now}
  end
  return {1, 0, 0}
elseif op == 'success' then
  if st == 1 or at > 0 then
    redis.call('HSET', k, 'st', 0, 'at', 0)
    return {st, 0, 0}
  end
  return {0, 0, 0}
elseif op == 'usage' then
  local n = tonumber(ARGV[4])
  local period = tonumber(ARGV[5])
  local maxReq = tonumber(ARGV[6])
  local maxTok = tonumber(ARGV[7])
  local warnAt = tonumber(ARGV[8])
  local nreq = tonumber(ARGV[9] or '1')
  local u =  redis.call('HMGET', k, 'ps', 'req', 'tok', 'lvl')
  local ps = tonumber(u[1] or '0')
  local req = tonumber(u[2] or '0')
  local tok = tonumber(u[3] or '0')
  local lvl = tonumber(u[4] or '0')
  if ps == 0 or (period > 0 and now - ps >= period) then
    ps = now; req = 0; tok = 0; lvl = 0
  end
  req = req + nreq
  tok = tok + n
  local ratio = 0
  if maxReq > 0 and req / maxReq > ratio then ratio = req / maxReq end
  if maxTok > 0 and tok / maxTok > ratio then ratio = tok / maxTok end
  local level = 0
  if ratio >= 1 then level = 2 elseif ratio >= warnAt then level = 1 end
  local changed = 0
  if level > lvl then changed = 1; lvl = level end
  redis.call('HSET', k, 'ps', ps, 'req', req, 'tok', tok, 'lvl', lvl)
  redis.call('PEXPIRE', k, ttl)
  return {level, changed, req, tok, ps}
elseif op == 'state' then
  local lvl = tonumber(redis.call('HGET', k, 'lvl') or '0')
  return {st, at, untilMs, lvl}
end
return redis.error_reply('unknown op')
`)

// Limiter is the shared limiter.
type Limiter struct {
	rdb *redisx.Client
	s   Settings
	pub signal.Publisher
	now func() time.Time
}

// Option tunes a Limiter.
type Option func(*Limiter)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(l *Limiter) { l.now = now } }

// New returns a limiter publishing its signals on pub.
func New(rdb *redisx.Client, s Settings, pub signal.Publisher, opts ...Option) *Limiter {
	if s.Base <= 0 {
		s.Base = time.Second
	}
	if s.Cap <= 0 {
		s.Cap = 5 * time.Minute
	}
	if s.Soft == nil {
		s.Soft = func(string) SoftLimit { return SoftLimit{} }
	}
	if pub == nil {
		pub = signal.Discard{}
	}
	l := &Limiter{rdb: rdb, s: s, pub: pub, now: time.Now}
	for _, o := range opts {
		o(l)
	}
	return l
}

func (l *Limiter) key(provider string) string { return l.rdb.Key("llm", "rl", provider) }

func (l *Limiter) ttl(provider string) int64 {
	t := l.s.Cap + time.Hour
	if p := l.s.Soft(provider).Period; p+time.Hour > t {
		t = p + time.Hour
	}
	return t.Milliseconds()
}

func (l *Limiter) run(ctx context.Context, provider, op string, args ...any) ([]int64, error) {
	return l.result(provider, op, l.cmd(ctx, l.rdb, false, provider, op, args...))
}

// cmd runs op; pipelined cmds use EVALSHA only (Load must have run).
func (l *Limiter) cmd(ctx context.Context, s redis.Scripter, pipelined bool, provider, op string, args ...any) *redis.Cmd {
	argv := append([]any{op, l.now().UnixMilli(), l.ttl(provider)}, args...)
	if pipelined {
		return script.EvalSha(ctx, s, []string{l.key(provider)}, argv...)
	}
	return script.Run(ctx, s, []string{l.key(provider)}, argv...)
}

func (l *Limiter) result(provider, op string, c *redis.Cmd) ([]int64, error) {
	res, err := c.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("rate limiter %s %s: %w", provider, op, err)
	}
	return res, nil
}

// Load loads the script into Redis so that pipelined calls can use it.
func (l *Limiter) Load(ctx context.Context) error { return script.Load(ctx, l.rdb).Err() }

// ProceedCmd queues CanProceed on pipe; call the returned function after
// the pipeline ran.
func (l *Limiter) ProceedCmd(ctx context.Context, pipe redis.Pipeliner, provider string) func() (bool, time.Duration, error) {
	c := l.cmd(ctx, pipe, true, provider, "proceed")
	return func() (bool, time.Duration, error) {
		res, err := l.result(provider, "proceed", c)
		if err != nil {
			return false, 0, err
		}
		return l.proceeded(ctx, provider, res)
	}
}

// BatchCmd queues, for calls that succeeded since the last batch, one
// OnSuccess (when successes > 0) and one RecordUsage of requests calls and
// tokens tokens on pipe: the gate's batched bookkeeping.
func (l *Limiter) BatchCmd(ctx context.Context, pipe redis.Pipeliner, provider string, successes, requests int64, tokens int64) func() error {
	var c1 *redis.Cmd
	if successes > 0 {
		c1 = l.cmd(ctx, pipe, true, provider, "success")
	}
	args := append(l.usageArgs(provider, int(tokens)), requests)
	c2 := l.cmd(ctx, pipe, true, provider, "usage", args...)
	return func() error {
		var err error
		if c1 != nil {
			res, serr := l.result(provider, "success", c1)
			if serr != nil {
				err = serr
			} else {
				err = l.succeeded(ctx, provider, res)
			}
		}
		res, uerr := l.result(provider, "usage", c2)
		if uerr != nil {
			return errors.Join(err, uerr)
		}
		_, uerr = l.used(ctx, provider, res)
		return errors.Join(err, uerr)
	}
}

// StateCmd queues State on pipe.
func (l *Limiter) StateCmd(ctx context.Context, pipe redis.Pipeliner, provider string) func() (Status, bool, error) {
	c := l.cmd(ctx, pipe, true, provider, "state")
	return func() (Status, bool, error) {
		res, err := l.result(provider, "state", c)
		if err != nil {
			return Status{}, false, err
		}
		s, paused := l.status(res)
		return s, paused, nil
	}
}

// OnRateLimit records a 429 (B-14). The first 429 of an episode moves the
// provider to Exceeded with backoff base·2^(attempt−1) capped at Cap (1s,
// 2s, 4s ...), or the Retry-After when given, and publishes PauseAll. 429s
// from calls already in flight during the backoff do not double it again;
// a longer Retry-After extends it.
func (l *Limiter) OnRateLimit(ctx context.Context, provider string, retryAfter time.Duration) (time.Time, int, error) {
	res, err := l.run(ctx, provider, "limit", retryAfter.Milliseconds(), l.s.Base.Milliseconds(), l.s.Cap.Milliseconds())
	if err != nil {
		return time.Time{}, 0, err
	}
	resumeAt := time.UnixMilli(res[2])
	if res[0] == 1 {
		err = l.pub.Publish(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL, Provider: provider,
			ResumeTime: timestamppb.New(resumeAt), Attempt: int32(res[1]), Reason: "provider rate limit (429)"})
	}
	return resumeAt, int(res[1]), err
}

// CanProceed says whether a call may start now and, if not, how long to
// wait. The replica that finds the backoff over moves the provider back to
// OK and publishes ResumeAll, once.
func (l *Limiter) CanProceed(ctx context.Context, provider string) (bool, time.Duration, error) {
	res, err := l.run(ctx, provider, "proceed")
	if err != nil {
		return false, 0, err
	}
	return l.proceeded(ctx, provider, res)
}

func (l *Limiter) proceeded(ctx context.Context, provider string, res []int64) (bool, time.Duration, error) {
	if res[0] == 0 {
		return false, time.Duration(res[2]) * time.Millisecond, nil
	}
	var err error
	if res[1] == 1 {
		err = l.pub.Publish(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL, Provider: provider, Attempt: int32(res[2]),
			Reason: "rate-limit backoff over"})
	}
	return true, 0, err
}

// Wait blocks until CanProceed allows a call or ctx ends.
func (l *Limiter) Wait(ctx context.Context, provider string) error {
	for {
		ok, wait, err := l.CanProceed(ctx, provider)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// OnSuccess records a 2xx: the attempt count resets and the provider is OK.
// If that ends a backoff early, ResumeAll is published.
func (l *Limiter) OnSuccess(ctx context.Context, provider string) error {
	res, err := l.run(ctx, provider, "success")
	if err != nil {
		return err
	}
	return l.succeeded(ctx, provider, res)
}

func (l *Limiter) succeeded(ctx context.Context, provider string, res []int64) error {
	if res[0] == 1 {
		return l.pub.Publish(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL, Provider: provider, Reason: "provider answered"})
	}
	return nil
}

// Usage is the soft-limit status after recording a call (C-11).
type Usage struct {
	Requests, Tokens int64
	// Level: 0 ok, 1 warning, 2 critical (at or over the soft limit), as
	// llmv1.QuotaLevel numbers them.
	Level       int
	PeriodStart time.Time
}

// RecordUsage counts one call of tokens against the provider's soft limit
// and publishes QuotaWarning the first time each level is reached in a
// period. It never pauses anything.
func (l *Limiter) RecordUsage(ctx context.Context, provider string, tokens int) (Usage, error) {
	res, err := l.run(ctx, provider, "usage", l.usageArgs(provider, tokens)...)
	if err != nil {
		return Usage{}, err
	}
	return l.used(ctx, provider, res)
}

func (l *Limiter) usageArgs(provider string, tokens int) []any {
	sl := l.s.Soft(provider)
	warnAt := sl.WarnAt
	if warnAt <= 0 {
		warnAt = 0.8
	}
	return []any{tokens, sl.Period.Milliseconds(), sl.Requests, sl.Tokens, strconv.FormatFloat(warnAt, 'f', -1, 64)}
}

func (l *Limiter) used(ctx context.Context, provider string, res []int64) (Usage, error) {
	u := Usage{Level: int(res[0]), Requests: res[2], Tokens: res[3], PeriodStart: time.UnixMilli(res[4])}
	var err error
	if res[1] == 1 {
		err = l.pub.Publish(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_QUOTA_WARNING, Provider: provider, Level: llmv1.QuotaLevel(u.Level),
			Reason: fmt.Sprintf("soft limit: %d requests, %d tokens this period", u.Requests, u.Tokens)})
	}
	return u, err
}

// Status is a provider's limiter state.
type Status struct {
	State    State
	Attempt  int
	ResumeAt time.Time
}

// State returns provider's state: Exceeded during a backoff, else Warning
// when a soft-limit level was reached this period, else OK.
func (l *Limiter) State(ctx context.Context, provider string) (Status, error) {
	res, err := l.run(ctx, provider, "state")
	if err != nil {
		return Status{}, err
	}
	s, _ := l.status(res)
	return s, nil
}

// status decodes the state op; paused is true while the provider is marked
// exceeded, including after the backoff ended and before a CanProceed
// moved it back to OK.
func (l *Limiter) status(res []int64) (Status, bool) {
	s := Status{Attempt: int(res[1])}
	switch {
	case res[0] == 1 && l.now().UnixMilli() < res[2]:
		s.State, s.ResumeAt = Exceeded, time.UnixMilli(res[2])
	case res[3] > 0:
		s.State = Warning
	}
	return s, res[0] == 1
}

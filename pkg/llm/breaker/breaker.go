// Package breaker keeps circuit breakers whose state lives in Redis, so that
// every replica sees one breaker per resource (B-36, C-17): it trips on
// consecutive failures or on the failure rate over a full window, fails fast
// while open, lets exactly one probe through after the cooldown (half-open),
// and closes after enough successful probes.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/redisx"
)

// State is a breaker state.
type State int

// States.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "unknown"
}

// Settings tune one resource's breaker.
type Settings struct {
	ConsecutiveFailures int
	FailureRate         float64
	Window              int
	Cooldown            time.Duration
	SuccessThreshold    int
	// ProbeTimeout bounds a half-open probe; a probe that reports nothing
	// within it counts as failed.
	ProbeTimeout time.Duration
}

// Defaults per resource kind (B-36).
var (
	LLM        = Settings{ConsecutiveFailures: 5, FailureRate: 0.5, Window: 20, Cooldown: 30 * time.Second, SuccessThreshold: 3, ProbeTimeout: 2 * time.Minute}
	File       = Settings{ConsecutiveFailures: 2, FailureRate: 0.3, Window: 10, Cooldown: 10 * time.Second, SuccessThreshold: 2, ProbeTimeout: time.Minute}
	Network    = Settings{ConsecutiveFailures: 3, FailureRate: 0.5, Window: 20, Cooldown: 30 * time.Second, SuccessThreshold: 3, ProbeTimeout: time.Minute}
	Subprocess = Settings{ConsecutiveFailures: 3, FailureRate: 0.4, Window: 15, Cooldown: 20 * time.Second, SuccessThreshold: 2, ProbeTimeout: time.Minute}
)

// ErrOpen is returned to callers refused by an open breaker.
var ErrOpen = errors.New("circuit breaker open")

// keyTTL bounds how long an idle breaker's state is kept.
const keyTTL = 24 * time.Hour

// Fields: st state, cf consecutive failures, ring recent results ('1'
// failure), succ half-open successes, until open-until ms, probe probe lease
// until ms (0: no probe in flight).
var script = redis.NewScript(`
local k = KEYS[1]
local op = ARGV[1]
local now = tonumber(ARGV[2])
local maxcf = tonumber(ARGV[3])
local rate = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local cooldown = tonumber(ARGV[6])
local needed = tonumber(ARGV[7])
local probeTimeout = tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
local h = redis.call('HMGET', k, 'st', 'cf', 'ring', 'succ', 'until', 'probe')
local st = tonumber(h[1] or '0')
local cf = tonumber(h[2] or '0')
local ring = h[3] or ''
local succ = tonumber(h[4] or '0')
local untilMs = tonumber(h[5] or '0')
local probe = tonumber(h[6] or '0')
local function open()
  redis.call('HSET', k, 'st', 1, 'cf', 0, 'ring', '', 'succ', 0, 'until', now + cooldown, 'probe', 0)
  redis.call('PEXPIRE', k, ttl)
end
if op == 'allow' then
  if st == 0 then return {1, 0, 0, st} end
  if st == 1 then
    if now < untilMs then return {0, 1, 0, st} end
    redis.call('HSET', k, 'st', 2, 'succ', 0, 'probe', now + probeTimeout)
    redis.call('PEXPIRE', k, ttl)
    return {1, 2, 1, st}
  end
  if probe > now then return {0, 2, 0, st} end
  if probe > 0 then
    open()
    return {0, 1, 1, st}
  end
  redis.call('HSET', k, 'probe', now + probeTimeout)
  return {1, 2, 0, st}
elseif op == 'success' then
  if st == 0 then
    local n = tonumber(ARGV[10] or '1')
    if n > window then n = window end
    ring = string.sub(ring .. string.rep('0', n), -window)
    redis.call('HSET', k, 'cf', 0, 'ring', ring)
    redis.call('PEXPIRE', k, ttl)
    return {1, 0, 0, st}
  end
  if st == 2 then
    succ = succ + 1
    if succ >= needed then
      redis.call('DEL', k)
      return {1, 0, 1, st}
    end
    redis.call('HSET', k, 'succ', succ, 'probe', 0)
    return {1, 2, 0, st}
  end
  return {1, st, 0, st}
elseif op == 'failure' then
  if st == 0 then
    cf = cf + 1
    ring = string.sub(ring .. '1', -window)
    local fails = 0
    for i = 1, #ring do if string.sub(ring, i, i) == '1' then fails = fails + 1 end end
    if cf >= maxcf or (#ring >= window and fails / #ring >= rate) then
      open()
      return {1, 1, 1, st}
    end
    redis.call('HSET', k, 'cf', cf, 'ring', ring)
    redis.call('PEXPIRE', k, ttl)
    return {1, 0, 0, st}
  end
  if st == 2 then
    open()
    return {1, 1, 1, st}
  end
  return {1, st, 0, st}
elseif op == 'release' then
  if st == 2 and probe > now then redis.call('HSET', k, 'probe', 0) end
  return {1, st, 0, st}
elseif op == 'state' then
  return {1, st, 0, st}
end
return redis.error_reply('unknown op')
`)

// Change is a state transition.
type Change struct {
	Resource string
	From, To State
}

// Registry holds every breaker of one Redis prefix.
type Registry struct {
	rdb      *redisx.Client
	settings func(resource string) Settings
	now      func() time.Time
	onChange func(context.Context, Change)
}

// Option tunes a Registry.
type Option func(*Registry)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(r *Registry) { r.now = now } }

// WithOnChange is told of every state change, once, by the replica that made
// it (to broadcast SignalCircuitStateChange).
func WithOnChange(f func(context.Context, Change)) Option {
	return func(r *Registry) { r.onChange = f }
}

// New returns a registry; settings gives each resource's settings.
func New(rdb *redisx.Client, settings func(resource string) Settings, opts ...Option) *Registry {
	r := &Registry{rdb: rdb, settings: settings, now: time.Now}
	for _, o := range opts {
		o(r)
	}
	return r
}

func (r *Registry) run(ctx context.Context, resource, op string) (bool, State, error) {
	return r.result(ctx, resource, op, r.cmd(ctx, r.rdb, false, resource, op))
}

func (r *Registry) cmd(ctx context.Context, sc redis.Scripter, pipelined bool, resource, op string, extra ...any) *redis.Cmd {
	s := r.settings(resource)
	keys := []string{r.rdb.Key("llm", "cb", resource)}
	argv := []any{op, r.now().UnixMilli(), s.ConsecutiveFailures, strconv.FormatFloat(s.FailureRate, 'f', -1, 64), s.Window,
		s.Cooldown.Milliseconds(), s.SuccessThreshold, s.ProbeTimeout.Milliseconds(), keyTTL.Milliseconds()}
	argv = append(argv, extra...)
	if pipelined {
		return script.EvalSha(ctx, sc, keys, argv...)
	}
	return script.Run(ctx, sc, keys, argv...)
}

func (r *Registry) result(ctx context.Context, resource, op string, c *redis.Cmd) (bool, State, error) {
	res, err := c.Int64Slice()
	if err != nil {
		return false, Closed, fmt.Errorf("breaker %s %s: %w", resource, op, err)
	}
	st := State(res[1])
	if res[2] == 1 && r.onChange != nil {
		r.onChange(ctx, Change{Resource: resource, From: State(res[3]), To: st})
	}
	return res[0] == 1, st, nil
}

// Load loads the script into Redis so that pipelined calls can use it.
func (r *Registry) Load(ctx context.Context) error { return script.Load(ctx, r.rdb).Err() }

// AllowCmd queues Allow on pipe; call the returned function after the
// pipeline ran.
func (r *Registry) AllowCmd(ctx context.Context, pipe redis.Pipeliner, resource string) func() (bool, State, error) {
	c := r.cmd(ctx, pipe, true, resource, "allow")
	return func() (bool, State, error) { return r.result(ctx, resource, "allow", c) }
}

// RecordCmd queues Record on pipe.
func (r *Registry) RecordCmd(ctx context.Context, pipe redis.Pipeliner, resource string, success bool) func() (State, error) {
	op := "failure"
	if success {
		op = "success"
	}
	c := r.cmd(ctx, pipe, true, resource, op)
	return func() (State, error) {
		_, st, err := r.result(ctx, resource, op, c)
		return st, err
	}
}

// SuccessesCmd queues n successes of calls admitted while the breaker was
// closed (the gate's batched bookkeeping): in the closed state they count
// as n results in the window and reset the consecutive failures; in the
// half-open state as one probe success.
func (r *Registry) SuccessesCmd(ctx context.Context, pipe redis.Pipeliner, resource string, n int64) func() (State, error) {
	c := r.cmd(ctx, pipe, true, resource, "success", n)
	return func() (State, error) {
		_, st, err := r.result(ctx, resource, "success", c)
		return st, err
	}
}

// StateCmd queues State on pipe.
func (r *Registry) StateCmd(ctx context.Context, pipe redis.Pipeliner, resource string) func() (State, error) {
	c := r.cmd(ctx, pipe, true, resource, "state")
	return func() (State, error) {
		_, st, err := r.result(ctx, resource, "state", c)
		return st, err
	}
}

// Release gives back a half-open probe that was granted but not used (the
// call never reached the resource).
func (r *Registry) Release(ctx context.Context, resource string) error {
	_, _, err := r.run(ctx, resource, "release")
	return err
}

// Allow says whether a call to resource may go ahead. After the cooldown the
// first caller becomes the half-open probe; others are refused until it
// reports, and a probe that never reports re-opens the breaker.
func (r *Registry) Allow(ctx context.Context, resource string) (bool, State, error) {
	return r.run(ctx, resource, "allow")
}

// Record reports a call's outcome and returns the new state.
func (r *Registry) Record(ctx context.Context, resource string, success bool) (State, error) {
	op := "failure"
	if success {
		op = "success"
	}
	_, st, err := r.run(ctx, resource, op)
	return st, err
}

// State returns resource's state.
func (r *Registry) State(ctx context.Context, resource string) (State, error) {
	_, st, err := r.run(ctx, resource, "state")
	return st, err
}

// Reset closes the breaker and forgets its history (manual user reset).
func (r *Registry) Reset(ctx context.Context, resource string) error {
	return r.rdb.Del(ctx, r.rdb.Key("llm", "cb", resource)).Err()
}

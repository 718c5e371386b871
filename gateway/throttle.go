package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/redisx"
)

// throttle counts failed authentications per client address and per key
// prefix in Redis, so that every gateway replica sees the same counts: once
// either reaches its limit within the window, requests from that address
// or with keys of that prefix get 429 until the window ends. Keys that are
// known valid (cached) are not checked, so the common path asks nothing of
// Redis.
type throttle struct {
	redis    *redisx.Client
	addrMax  int64
	keyMax   int64
	window   time.Duration
	disabled bool
}

func newThrottle(r *redisx.Client, cfg Config) *throttle {
	return &throttle{redis: r, addrMax: cfg.AuthFailAddrLimit, keyMax: cfg.AuthFailKeyLimit, window: cfg.AuthFailWindow,
		disabled: r == nil || cfg.AuthFailAddrLimit <= 0 && cfg.AuthFailKeyLimit <= 0}
}

// waitScript returns the milliseconds until the first of KEYS whose count
// reached its limit (ARGV, one per key; 0 for no limit) drops it, or 0.
var waitScript = redis.NewScript(`
local wait = 0
for i, k in ipairs(KEYS) do
  local max = tonumber(ARGV[i])
  if max > 0 and tonumber(redis.call('GET', k) or '0') >= max then
    local t = redis.call('PTTL', k)
    if t > wait then wait = t end
  end
end
return wait`)

// failScript counts a failure on each of KEYS; a key's window (ARGV[1], in
// milliseconds) starts at its first failure.
var failScript = redis.NewScript(`
for _, k in ipairs(KEYS) do
  if redis.call('INCR', k) == 1 then redis.call('PEXPIRE', k, ARGV[1]) end
end
return 0`)

// keys are the counters of r with key: its client address's and its key
// prefix's (hashed, so that Redis holds no part of a key as sent).
func (t *throttle) keys(r *http.Request, key string) []string {
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	prefix := key[:min(len(key), keyDisplayLen)]
	sum := sha256.Sum256([]byte(prefix))
	return []string{
		t.redis.Key("gateway", "authfail", "addr", addr),
		t.redis.Key("gateway", "authfail", "key", hex.EncodeToString(sum[:8])),
	}
}

// wait returns how long r must wait before its key is looked up; 0 when it
// need not. A Redis that does not answer lets requests through (err says
// why): authentication does not depend on it.
func (t *throttle) wait(ctx context.Context, r *http.Request, key string) (time.Duration, error) {
	if t.disabled {
		return 0, nil
	}
	ms, err := waitScript.Run(ctx, t.redis, t.keys(r, key), t.addrMax, t.keyMax).Int64()
	if err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// fail counts a failed authentication of r with key.
func (t *throttle) fail(ctx context.Context, r *http.Request, key string) error {
	if t.disabled {
		return nil
	}
	return failScript.Run(ctx, t.redis, t.keys(r, key), t.window.Milliseconds()).Err()
}

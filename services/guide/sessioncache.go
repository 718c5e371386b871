package guide

import (
	"context"
	"sync"
	"time"
)

// The session check before a message is classified is served from an
// in-process copy, off the routing path's database round trips (as are the
// routing-failure lookup, failurefeedback.go, and the outbox row's
// deletion, outbox.go). Nothing a request depends on for durability moves:
// the message, its pending request and its counts are still committed in
// the message's own writes before its envelope is published, and those
// writes check again that the session is active.

// sessionCache remembers sessions seen active, by owner and id, for
// Config.LocalCacheTTL. Only the pre-check of SendMessage reads it; the
// message's transaction re-checks the state, so a stale entry can only let
// a request reach that check, never store a message in a session that is
// no longer active.
type sessionCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[sessionKey]cachedSession
}

type sessionKey struct{ tenant, user, id string }

type cachedSession struct {
	s       session
	expires time.Time
}

// maxCachedSessions bounds the cache; it is emptied when full.
const maxCachedSessions = 10000

func newSessionCache(ttl time.Duration) *sessionCache {
	return &sessionCache{ttl: ttl, m: map[sessionKey]cachedSession{}}
}

func (c *sessionCache) get(o owner, id string, now time.Time) (session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[sessionKey{o.tenant, o.user, id}]
	if !ok || now.After(e.expires) {
		return session{}, false
	}
	return e.s, true
}

func (c *sessionCache) put(o owner, s session, now time.Time) {
	if s.State != stateActive {
		c.forget(s.TenantID, s.ID)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedSessions {
		clear(c.m)
	}
	c.m[sessionKey{o.tenant, o.user, s.ID}] = cachedSession{s: s, expires: now.Add(c.ttl)}
}

// forget drops a session whose state this replica is changing.
func (c *sessionCache) forget(tenant, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.tenant == tenant && k.id == id {
			delete(c.m, k)
		}
	}
}

// activeSession loads one of the owner's sessions for a message, from the
// cache when it was seen active within the TTL.
func (s *Service) activeSession(ctx context.Context, o owner, id string) (session, error) {
	now := time.Now()
	if sess, ok := s.sessions.get(o, id, now); ok {
		return sess, nil
	}
	sess, err := getSession(ctx, s.db, o, id, false)
	if err != nil {
		return session{}, err
	}
	s.sessions.put(o, sess, now)
	return sess, nil
}

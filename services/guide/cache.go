package guide

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/topology"
)

// routeCache is routing tier 1 (spec A-36): routing decisions keyed by the
// normalised input, and knowledge answers keyed by agent, intent and
// subject (spec ). Every key has a TTL. Without Redis it is off.
type routeCache struct {
	rc  *redisx.Client
	log *slog.Logger
	cfg Config

	// local keeps the routes this replica read or wrote for
	// Config.LocalCacheTTL in front of Redis, so that a repeated message
	// does not wait for it; forgetRoute drops them here too, and another
	// replica's forget is seen within the TTL.
	mu    sync.Mutex
	local map[string]localRoute
}

type localRoute struct {
	cl      Classification
	expires time.Time
}

// maxLocalRoutes bounds the in-process routes; they are dropped when full.
const maxLocalRoutes = 10000

func (c *routeCache) localGet(key string) (Classification, bool) {
	if c.cfg.LocalCacheTTL <= 0 {
		return Classification{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.local[key]
	if !ok || time.Now().After(e.expires) {
		return Classification{}, false
	}
	return e.cl, true
}

func (c *routeCache) localPut(key string, cl Classification) {
	if c.cfg.LocalCacheTTL <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.local == nil || len(c.local) >= maxLocalRoutes {
		c.local = map[string]localRoute{}
	}
	c.local[key] = localRoute{cl: cl, expires: time.Now().Add(c.cfg.LocalCacheTTL)}
}

func (c *routeCache) localForget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.local, key)
}

// Archivalist answer lifetimes by intent (spec A-35: 1 to 60 minutes by
// query type). Records are immutable, so only the session or the TTL ends them.
var archivalistTTL = map[string]time.Duration{
	"RESUME":     time.Minute,
	"ACTIVITY":   2 * time.Minute,
	"GENERAL":    5 * time.Minute,
	"OUTCOME":    15 * time.Minute,
	"SIMILAR":    30 * time.Minute,
	"HISTORICAL": 60 * time.Minute,
}

// normalise folds case, whitespace and trailing punctuation, so that
// trivially different phrasings share a cache entry.
func normalise(text string) string {
	t := strings.Join(strings.Fields(strings.ToLower(text)), " ")
	return strings.TrimRight(t, " ?!.")
}

func hashKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:12])
}

func (c *routeCache) enabled() bool { return c != nil && c.rc != nil }

func (c *routeCache) routeKey(tenant, text string) string {
	return c.rc.Key("guide", "route", hashKey(tenant), hashKey(normalise(text)))
}

// route returns a cached routing decision for text.
func (c *routeCache) route(ctx context.Context, tenant, text string) (Classification, bool) {
	if !c.enabled() {
		return Classification{}, false
	}
	key := c.routeKey(tenant, text)
	if cl, ok := c.localGet(key); ok {
		return cl, true
	}
	raw, err := c.rc.Get(ctx, key).Bytes()
	if err != nil {
		if !errors.Is(err, redis.Nil) {
			c.log.WarnContext(ctx, "route cache read", logx.Err(err))
		}
		return Classification{}, false
	}
	var out Classification
	if err := json.Unmarshal(raw, &out); err != nil {
		return Classification{}, false
	}
	c.localPut(key, out)
	return out, true
}

// storeRoute caches a confident routing decision.
func (c *routeCache) storeRoute(ctx context.Context, tenant, text string, cl Classification) {
	if !c.enabled() || cl.Target == "" || cl.Confidence <= c.cfg.CacheThreshold {
		return
	}
	raw, err := json.Marshal(cl)
	if err != nil {
		return
	}
	key := c.routeKey(tenant, text)
	if err := c.rc.Set(ctx, key, raw, c.cfg.RouteCacheTTL).Err(); err != nil {
		c.log.WarnContext(ctx, "route cache write", logx.Err(err))
		return
	}
	c.localPut(key, cl)
}

// forgetRoute drops a routing decision found wrong.
func (c *routeCache) forgetRoute(ctx context.Context, tenant, text string) {
	if !c.enabled() {
		return
	}
	key := c.routeKey(tenant, text)
	c.localForget(key)
	if err := c.rc.Del(ctx, key).Err(); err != nil {
		c.log.WarnContext(ctx, "route cache delete", logx.Err(err))
	}
}

// answerKey is where an answer to a knowledge query is cached, with its
// lifetime, or "" when the query is not cacheable: only librarian and
// archivalist queries with an intent and a subject and a confidence above
// the threshold. repository is the session's: a librarian answer holds for
// the sessions of the tenant that work on the same one.
func (c *routeCache) answerKey(ctx context.Context, tenant, sessionID, repository string, cl Classification) (string, time.Duration) {
	if !c.enabled() || cl.Confidence <= c.cfg.CacheThreshold || cl.KnowledgeIntent == "" || cl.Subject == "" {
		return "", 0
	}
	switch cl.Target {
	case topology.AgentLibrarian:
		// Librarian answers are shared by the tenant's sessions; the
		// tenant's finished (re)index bumps its generation, which retires
		// them all.
		gen := c.generation(ctx, tenant)
		return c.rc.Key("guide", "answer", topology.AgentLibrarian, gen, hashKey(tenant), hashKey(repository),
			cl.KnowledgeIntent, hashKey(strings.ToLower(cl.Subject))), c.cfg.LibrarianCacheTTL
	case topology.AgentArchivalist:
		// History answers are per session (spec A-35: invalidated by the
		// session or the TTL).
		ttl := archivalistTTL[cl.KnowledgeIntent]
		if ttl == 0 {
			ttl = archivalistTTL["GENERAL"]
		}
		return c.rc.Key("guide", "answer", topology.AgentArchivalist, hashKey(tenant), sessionID,
			cl.KnowledgeIntent, hashKey(strings.ToLower(cl.Subject)+"|"+cl.TimeScope)), ttl
	}
	return "", 0
}

// generationKey is the librarian answers' generation of a tenant, or of
// every tenant when tenant is "" (an index that did not say whose it was).
func (c *routeCache) generationKey(tenant string) string {
	if tenant == "" {
		return c.rc.Key("guide", "answer", "librarian-generation")
	}
	return c.rc.Key("guide", "answer", "librarian-generation", hashKey(tenant))
}

func (c *routeCache) generation(ctx context.Context, tenant string) string {
	vals, err := c.rc.MGet(ctx, c.generationKey(""), c.generationKey(tenant)).Result()
	if err != nil {
		c.log.WarnContext(ctx, "route cache generation", logx.Err(err))
	}
	gen := make([]string, 2)
	for i := range gen {
		gen[i] = "0"
		if i < len(vals) {
			if v, ok := vals[i].(string); ok {
				gen[i] = v
			}
		}
	}
	return gen[0] + "." + gen[1]
}

// invalidateLibrarian retires a tenant's cached librarian answers (every
// tenant's when tenant is ""): files changed.
func (c *routeCache) invalidateLibrarian(ctx context.Context, tenant string) {
	if !c.enabled() {
		return
	}
	if err := c.rc.Incr(ctx, c.generationKey(tenant)).Err(); err != nil {
		c.log.WarnContext(ctx, "route cache invalidate", logx.Err(err))
	}
}

// answer is the agent's answer cached under key. An entry that does not
// decode (written by an older Guide) is a miss.
func (c *routeCache) answer(ctx context.Context, key string) (*messagev1.AgentAnswer, bool) {
	if !c.enabled() || key == "" {
		return nil, false
	}
	raw, err := c.rc.Get(ctx, key).Bytes()
	if err != nil {
		return nil, false
	}
	a := &messagev1.AgentAnswer{}
	if protojson.Unmarshal(raw, a) != nil {
		return nil, false
	}
	return a, true
}

// storeAnswer caches a's answer under key for ttl; a history answer is
// indexed by its session, which drops it when it ends.
func (c *routeCache) storeAnswer(ctx context.Context, tenant, sessionID, key string, ttl time.Duration, a *messagev1.AgentAnswer) {
	if !c.enabled() || key == "" || ttl <= 0 {
		return
	}
	raw, err := protojson.Marshal(a)
	if err != nil {
		return
	}
	pipe := c.rc.TxPipeline()
	pipe.Set(ctx, key, raw, ttl)
	if a.GetAgent() == topology.AgentArchivalist {
		idx := c.sessionIndexKey(tenant, sessionID)
		pipe.SAdd(ctx, idx, key)
		pipe.Expire(ctx, idx, time.Hour)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		c.log.WarnContext(ctx, "answer cache write", logx.Err(err))
	}
}

func (c *routeCache) sessionIndexKey(tenant, sessionID string) string {
	return c.rc.Key("guide", "answers", hashKey(tenant), sessionID)
}

// invalidateSession drops a finished session's cached history answers.
func (c *routeCache) invalidateSession(ctx context.Context, tenant, sessionID string) {
	if !c.enabled() {
		return
	}
	idx := c.sessionIndexKey(tenant, sessionID)
	keys, err := c.rc.SMembers(ctx, idx).Result()
	if err != nil {
		c.log.WarnContext(ctx, "answer cache invalidate", logx.Err(err))
		return
	}
	if err := c.rc.Del(ctx, append(keys, idx)...).Err(); err != nil {
		c.log.WarnContext(ctx, "answer cache invalidate", logx.Err(err))
	}
}

// watchLibrarian retires a tenant's cached librarian answers whenever one
// of its index runs finishes, or one of its repositories is deleted: files
// changed (spec A-35).
func (s *Service) watchLibrarian(ctx context.Context) error {
	sub, err := s.bus.Conn.Subscribe(topology.IndexProgressSubject(s.bus, "*"), func(m *nats.Msg) {
		n := &librarianv1.IndexNotice{}
		if proto.Unmarshal(m.Data, n) == nil && (n.GetProgress().GetDone() || n.GetDeleted()) {
			s.cache.invalidateLibrarian(ctx, n.GetTenantId())
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to librarian progress: %w", err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	return nil
}

package guide

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/logx"
)

// This file keeps per-message database round trips off the routing path:
// the session check before classification and the routing-failure lookup
// are served from in-process copies, and the outbox row is deleted
// in batches after the request has been answered. Nothing a request depends
// on for durability moves: the message, its pending request and its counts
// are still committed in the message's own transaction before its envelope
// is published, and the transaction re-checks that the session is active.

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

// failureIndex holds each tenant's routing failures grouped by request
// pattern and the agent routed to, so that classification does not query
// them per message (spec A-33: the intent gate looks up similar past
// failures). The Guide's own writes invalidate a tenant's copy; other
// replicas' writes are seen within Config.LocalCacheTTL.
type failureIndex struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]*tenantFailures
}

type tenantFailures struct {
	mu      sync.Mutex
	loaded  time.Time
	valid   bool
	tooMany bool
	// byKey maps pattern + "\x00" + routed_to to the agents it should have
	// been, most frequent first.
	byKey map[string][]failureCount
}

type failureCount struct {
	agent string
	n     int
}

// maxIndexedFailures bounds one tenant's in-process copy; a tenant with
// more is queried per message.
const maxIndexedFailures = 50000

func newFailureIndex(ttl time.Duration) *failureIndex {
	return &failureIndex{ttl: ttl, m: map[string]*tenantFailures{}}
}

func (f *failureIndex) tenant(t string) *tenantFailures {
	f.mu.Lock()
	defer f.mu.Unlock()
	tf, ok := f.m[t]
	if !ok {
		tf = &tenantFailures{}
		f.m[t] = tf
	}
	return tf
}

// invalidate drops the copy of a tenant whose failures changed.
func (f *failureIndex) invalidate(tenant string) {
	tf := f.tenant(tenant)
	tf.mu.Lock()
	tf.valid = false
	tf.mu.Unlock()
}

// lookup returns the failures of a pattern routed to an agent, most
// frequent first, with ok false when the tenant has too many to index.
func (f *failureIndex) lookup(ctx context.Context, db *pgxpool.Pool, tenant, pattern, routedTo string) ([]failureCount, bool, error) {
	tf := f.tenant(tenant)
	tf.mu.Lock()
	defer tf.mu.Unlock()
	if !tf.valid || time.Since(tf.loaded) > f.ttl {
		if err := tf.load(ctx, db, tenant); err != nil {
			return nil, false, err
		}
	}
	if tf.tooMany {
		return nil, false, nil
	}
	return tf.byKey[pattern+"\x00"+routedTo], true, nil
}

func (tf *tenantFailures) load(ctx context.Context, db *pgxpool.Pool, tenant string) error {
	started := time.Now()
	rows, err := db.Query(ctx, `SELECT pattern, routed_to, should_have_been, count(*) FROM routing_failures
		WHERE tenant_id = $1 GROUP BY pattern, routed_to, should_have_been LIMIT $2`, tenant, maxIndexedFailures+1)
	if err != nil {
		return fmt.Errorf("load routing failures: %w", err)
	}
	defer rows.Close()
	byKey := map[string][]failureCount{}
	n := 0
	for rows.Next() {
		var pattern, routed, should string
		var c int
		if err := rows.Scan(&pattern, &routed, &should, &c); err != nil {
			return fmt.Errorf("load routing failures: %w", err)
		}
		n++
		k := pattern + "\x00" + routed
		byKey[k] = append(byKey[k], failureCount{agent: should, n: c})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load routing failures: %w", err)
	}
	for _, v := range byKey {
		slices.SortFunc(v, func(a, b failureCount) int {
			return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.agent, b.agent))
		})
	}
	tf.byKey, tf.tooMany, tf.valid = byKey, n > maxIndexedFailures, true
	tf.loaded = started
	return nil
}

// dispatchMarks deletes the outbox rows of messages whose publications are
// all on the bus, in batches. The row spares a retried request (same
// request id), and the outbox relay (outbox.go), from republishing
// publications the streams would drop as duplicates, so it is deleted after
// the request has been answered, many messages to one statement, without
// waiting for the disk; a row left behind costs a duplicate the streams drop.
type dispatchMarks struct {
	mu      sync.Mutex
	pending map[string][]string // tenant -> message ids
	n       int
}

// maxPendingMarks bounds the outbox rows waiting for deletion; beyond it
// the oldest are dropped (the outbox relay or a retry then republishes
// duplicates, which the streams drop).
const maxPendingMarks = 100000

func newDispatchMarks() *dispatchMarks {
	return &dispatchMarks{pending: map[string][]string{}}
}

func (d *dispatchMarks) add(tenant, id string) {
	d.mu.Lock()
	if d.n >= maxPendingMarks {
		clear(d.pending)
		d.n = 0
	}
	d.pending[tenant] = append(d.pending[tenant], id)
	d.n++
	d.mu.Unlock()
}

func (d *dispatchMarks) take() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		return nil
	}
	out := d.pending
	d.pending, d.n = map[string][]string{}, 0
	return out
}

// marksInterval is how often the outbox rows are deleted: a batch a tenth
// of a second costs one round trip however many messages it holds.
const marksInterval = 100 * time.Millisecond

// run deletes the outbox rows every marksInterval until ctx is done, then
// deletes what is left.
func (d *dispatchMarks) run(ctx context.Context, db *pgxpool.Pool, log *slog.Logger, now func() time.Time) error {
	t := time.NewTicker(marksInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			d.flush(fctx, db, log, now())
			cancel()
			return nil
		case <-t.C:
			d.flush(ctx, db, log, now())
		}
	}
}

// flush deletes the pending outbox rows in one round trip: a transaction
// that does not wait for the disk, every tenant's rows at once.
func (d *dispatchMarks) flush(ctx context.Context, db *pgxpool.Pool, log *slog.Logger, at time.Time) {
	batch := d.take()
	if batch == nil {
		return
	}
	var tenants, ids []string
	for tenant, list := range batch {
		for _, id := range list {
			tenants, ids = append(tenants, tenant), append(ids, id)
		}
	}
	var b pgx.Batch
	b.Queue(`BEGIN`)
	b.Queue(`SET LOCAL synchronous_commit TO OFF`)
	b.Queue(`DELETE FROM outbox o USING unnest($1::text[], $2::uuid[]) AS u(tenant_id, id)
		WHERE o.message_id = u.id AND o.tenant_id = u.tenant_id`, tenants, ids)
	b.Queue(`COMMIT`)
	if err := db.SendBatch(ctx, &b).Close(); err != nil && ctx.Err() == nil {
		log.WarnContext(ctx, "clear dispatched messages from the outbox", slog.Int("messages", len(ids)), logx.Err(err))
	}
}

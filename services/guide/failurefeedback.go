package guide

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Past routing failures feed back into routing (spec ): a
// classification's confidence is lowered for each failure of the same
// request pattern to the same agent, from an in-process index of the
// tenant's failures.

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

// requestPattern is what a request is remembered by for routing failures:
// its content words, sorted.
func requestPattern(text string) string {
	var words []string
	for _, w := range wordPattern.FindAllString(strings.ToLower(text), -1) {
		if stopWords[w] || slices.Contains(words, w) {
			continue
		}
		words = append(words, w)
	}
	sort.Strings(words)
	return strings.Join(words, " ")
}

// applyFailureFeedback lowers a classification's confidence by the
// penalty for each recorded routing failure of the same request pattern
// to the same agent (spec ), and offers the agent the failures
// said it should have been.
func (s *Service) applyFailureFeedback(ctx context.Context, tenant, text string, cl *Classification) error {
	pattern := requestPattern(text)
	counts, ok, err := s.failures.lookup(ctx, s.db, tenant, pattern, cl.Target)
	if err != nil {
		return err
	}
	if !ok {
		if counts, err = queryFailures(ctx, s.db, tenant, pattern, cl.Target); err != nil {
			return err
		}
	}
	total := 0
	var better []string
	for _, c := range counts {
		total += c.n
		// A failure may name an agent routing cannot reach (a worker
		// whose task asked for help): its request goes where routeTarget says.
		if agent, ok := routeTarget(c.agent); ok && !slices.Contains(better, agent) {
			better = append(better, agent)
		}
	}
	if total == 0 {
		return nil
	}
	penalty := math.Min(0.5, float64(total)*s.cfg.FailurePenalty)
	cl.Confidence = math.Max(0, math.Round((cl.Confidence-penalty)*1000)/1000)
	cl.Reason += fmt.Sprintf("; lowered by %.2f for %d past misroute(s)", penalty, total)
	cands := slices.Clone(better)
	for _, c := range cl.Candidates {
		if !slices.Contains(cands, c) {
			cands = append(cands, c)
		}
	}
	cl.Candidates = cands
	return nil
}

// queryFailures counts the failures of a pattern routed to an agent by the
// agent it should have been, most frequent first.
func queryFailures(ctx context.Context, q querier, tenant, pattern, routedTo string) ([]failureCount, error) {
	rows, err := q.Query(ctx, `SELECT should_have_been, count(*) FROM routing_failures
		WHERE tenant_id = $1 AND pattern = $2 AND routed_to = $3 GROUP BY should_have_been ORDER BY count(*) DESC, should_have_been`,
		tenant, pattern, routedTo)
	if err != nil {
		return nil, fmt.Errorf("look up routing failures: %w", err)
	}
	defer rows.Close()
	var out []failureCount
	for rows.Next() {
		var c failureCount
		if err := rows.Scan(&c.agent, &c.n); err != nil {
			return nil, fmt.Errorf("look up routing failures: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up routing failures: %w", err)
	}
	return out, nil
}

package guide

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
)

// routingCountShards is how many rows each (tenant, intent type) counter
// is spread over: group commit writer i adds to shard i, other transactions
// to a random one of the rest, so that concurrent transactions do not queue
// on one row lock until each commit reaches the disk.
const routingCountShards = 16

// routeCountKey is one routing counter: a tenant's decisions of one intent
// type and one tenth of confidence.
type routeCountKey struct {
	tenant, intent string
	bucket         int16
}

// confidenceBucket is the tenth a confidence falls in, 0 to 9 (spec A-33:
// failure rate per confidence).
func confidenceBucket(c float64) int16 {
	return int16(min(max(int(c*10), 0), 9))
}

// bucketLabel names a tenth by its lower bound: "0.8".
func bucketLabel(b int16) string { return fmt.Sprintf("%.1f", float64(b)/10) }

// routeCounts gathers the routing decisions of a group commit, written
// once per counter at its end.
type routeCounts struct{ m map[routeCountKey]int64 }

func (c *routeCounts) add(k routeCountKey) {
	if c.m == nil {
		c.m = map[routeCountKey]int64{}
	}
	c.m[k]++
}

// aloneShard is the counter shard of a transaction outside group commit.
func aloneShard() int {
	return defaultCommitWriters + rand.IntN(routingCountShards-defaultCommitWriters)
}

// routeCountWrites add counts to shard, in key order so that concurrent
// writers lock rows in the same order.
func routeCountWrites(counts map[routeCountKey]int64, shard int) stmts {
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b routeCountKey) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.intent, b.intent), cmp.Compare(a.bucket, b.bucket))
	})
	var w stmts
	for _, k := range keys {
		w.add(`INSERT INTO routing_counts (tenant_id, intent_type, confidence_bucket, shard, routed) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant_id, intent_type, confidence_bucket, shard) DO UPDATE SET routed = routing_counts.routed + EXCLUDED.routed`,
			k.tenant, k.intent, k.bucket, shard, counts[k])
	}
	return w
}

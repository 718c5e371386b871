// Package search holds retrieval building blocks: an in-memory HNSW vector
// index safe for concurrent use, and reciprocal rank fusion.
package search

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
)

// HNSW parameters.
const (
	DefaultM              = 16
	DefaultEfConstruction = 100
	DefaultEfSearch       = 64
)

// IndexConfig sizes the graph.
type IndexConfig struct {
	Dims           int
	M              int
	EfConstruction int
	EfSearch       int
	// Workers is how many goroutines insert a large batch; 0 means
	// GOMAXPROCS.
	Workers int
}

// Index is an HNSW graph over unit vectors keyed by string, safe for
// concurrent use: searches share a read lock, changes take the write lock.
//
// Removal is by tombstone: a removed or replaced vector stays in the graph,
// is filtered out of results, and the graph is rebuilt from the live
// vectors once tombstones reach a quarter of them.
type Index struct {
	cfg IndexConfig

	mu    sync.RWMutex
	g     *graph
	live  map[string]int32
	keyOf map[int32]string
	nDead int
}

// Result is one neighbour: its key and cosine similarity.
type Result struct {
	Key   string
	Score float32
}

// NewIndex returns an empty index.
func NewIndex(cfg IndexConfig) (*Index, error) {
	if cfg.Dims < 1 {
		return nil, fmt.Errorf("search: index dimensions must be at least 1, got %d", cfg.Dims)
	}
	if cfg.M < 2 {
		cfg.M = DefaultM
	}
	if cfg.EfConstruction < 1 {
		cfg.EfConstruction = DefaultEfConstruction
	}
	if cfg.EfSearch < 1 {
		cfg.EfSearch = DefaultEfSearch
	}
	if cfg.Workers < 1 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	return &Index{cfg: cfg, g: newGraphImpl(cfg.M, cfg.EfConstruction, 1), live: map[string]int32{}, keyOf: map[int32]string{}}, nil
}

// Dims is the vector length the index accepts.
func (x *Index) Dims() int { return x.cfg.Dims }

// Add inserts or replaces vectors by key. Vectors must be unit length and
// of Dims() elements; others are rejected.
func (x *Index) Add(keys []string, vecs [][]float32) error {
	if len(keys) != len(vecs) {
		return fmt.Errorf("search: %d keys for %d vectors", len(keys), len(vecs))
	}
	for i, v := range vecs {
		if len(v) != x.cfg.Dims {
			return fmt.Errorf("search: vector %q has %d dimensions, want %d", keys[i], len(v), x.cfg.Dims)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.removeLocked(k)
	}
	first := x.g.insertBatch(vecs, x.cfg.Workers)
	for i, k := range keys {
		// A key repeated in the batch keeps its last vector.
		x.removeLocked(k)
		id := first + int32(i)
		x.live[k] = id
		x.keyOf[id] = k
	}
	x.maybeRebuildLocked()
	return nil
}

func (x *Index) removeLocked(k string) {
	if id, ok := x.live[k]; ok {
		delete(x.live, k)
		delete(x.keyOf, id)
		x.nDead++
	}
}

// maybeRebuildLocked rebuilds the graph from the live vectors once
// tombstones reach a quarter of them.
func (x *Index) maybeRebuildLocked() {
	if x.nDead == 0 || x.nDead*4 < len(x.live) {
		return
	}
	old := x.g
	ids := make([]int32, 0, len(x.keyOf))
	for id := range x.keyOf {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	x.g = newGraphImpl(x.cfg.M, x.cfg.EfConstruction, 1)
	vecs := make([][]float32, len(ids))
	for i, id := range ids {
		vecs[i] = old.vecs[id]
	}
	first := x.g.insertBatch(vecs, x.cfg.Workers)
	keyOf := make(map[int32]string, len(ids))
	for i, id := range ids {
		k := x.keyOf[id]
		nid := first + int32(i)
		keyOf[nid] = k
		x.live[k] = nid
	}
	x.keyOf = keyOf
	x.nDead = 0
}

// Delete removes keys; unknown keys are ignored.
func (x *Index) Delete(keys ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.removeLocked(k)
	}
	x.maybeRebuildLocked()
}

// Len is the number of live vectors held.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.live)
}

// Search returns up to k nearest keys to q, most similar first, considering
// at least EfSearch candidates.
func (x *Index) Search(q []float32, k int) []Result {
	if len(q) != x.cfg.Dims || k < 1 {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.live) == 0 {
		return nil
	}
	// Leave room for tombstones among the nearest.
	ef := max(k, x.cfg.EfSearch) + min(x.nDead, max(k, x.cfg.EfSearch))
	items := x.g.search(q, ef)
	out := make([]Result, 0, len(items))
	for _, it := range items {
		key, ok := x.keyOf[it.id]
		if !ok {
			continue
		}
		out = append(out, Result{Key: key, Score: 1 - it.d})
	}
	if len(out) > k {
		out = out[:k]
	}
	return out
}

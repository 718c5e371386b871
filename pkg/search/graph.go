package search

import (
	"math"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
)

// graph is a hierarchical navigable small world graph over unit vectors,
// with the standard layered insert (efConstruction candidates, neighbour
// selection heuristic, M links per node above layer 0 and 2M at layer 0)
// and beam search (efSearch candidates). Nodes are dense int32 ids.
//
// A batch of vectors is inserted by several goroutines at once: every
// node's links sit behind its own lock and the entry point behind the
// graph's, as in the usual parallel construction. Searches that run while
// nothing is inserted (Index guarantees it with its read lock) read links
// without locking.
type graph struct {
	m, m0, efC int
	ml         float64
	rng        *rand.Rand

	vecs   [][]float32
	sparse []sparseVec  // the non-zero entries of vecs, nil entries when dense
	links  [][][]int32  // node -> layer -> neighbours
	locks  []sync.Mutex // node -> guard of links[node] during a batch insert

	epMu   sync.Mutex
	entry  int32
	top    int
	hasAny bool

	visited sync.Pool
}

func newGraphImpl(m, efC int, seed int64) *graph {
	return &graph{m: m, m0: 2 * m, efC: efC, ml: 1 / math.Log(float64(m)), rng: rand.New(rand.NewSource(seed))}
}

// sparseVec is the non-zero entries of a vector. The offline embedder's
// vectors are about one fifth non-zero, so a dot product over them reads a
// fifth of the other vector: the same sum, in a fraction of the time.
type sparseVec struct {
	idx []int32
	val []float32
}

// sparseMax is the largest share of non-zero entries kept sparse; denser
// vectors use the plain dot product.
const sparseMax = 0.4

func toSparse(v []float32) sparseVec {
	nz := 0
	for _, x := range v {
		if x != 0 {
			nz++
		}
	}
	if float64(nz) > sparseMax*float64(len(v)) {
		return sparseVec{}
	}
	s := sparseVec{idx: make([]int32, 0, nz), val: make([]float32, 0, nz)}
	for i, x := range v {
		if x != 0 {
			s.idx = append(s.idx, int32(i))
			s.val = append(s.val, x)
		}
	}
	return s
}

// query is a vector prepared for many distance computations.
type query struct {
	v []float32
	s sparseVec
}

func newQuery(v []float32) query { return query{v: v, s: toSparse(v)} }

// to is the cosine distance from the query to b.
func (q *query) to(b []float32) float32 {
	if q.s.idx == nil {
		return dist(q.v, b)
	}
	return 1 - sparseDot(q.s, b)
}

func sparseDot(s sparseVec, b []float32) float32 {
	idx, val := s.idx, s.val[:len(s.idx)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(idx); i += 2 {
		s0 += val[i] * b[idx[i]]
		s1 += val[i+1] * b[idx[i+1]]
	}
	if i < len(idx) {
		s0 += val[i] * b[idx[i]]
	}
	return s0 + s1
}

// nodeDist is the distance between two nodes of the graph.
func (g *graph) nodeDist(a, b int32) float32 {
	if s := g.sparse[a]; s.idx != nil {
		return 1 - sparseDot(s, g.vecs[b])
	}
	if s := g.sparse[b]; s.idx != nil {
		return 1 - sparseDot(s, g.vecs[a])
	}
	return dist(g.vecs[a], g.vecs[b])
}

func dist(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		aa, bb := a[i:i+8:i+8], b[i:i+8:i+8]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
		s4 += aa[4] * bb[4]
		s5 += aa[5] * bb[5]
		s6 += aa[6] * bb[6]
		s7 += aa[7] * bb[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return 1 - (s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7)
}

// item is a node with its distance to a query.
type item struct {
	id int32
	d  float32
}

// minHeap and maxHeap order items by distance.
type minHeap []item

func (h *minHeap) push(x item) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].d <= a[i].d {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *minHeap) pop() item {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, s := 2*i+1, 2*i+2, i
		if l < n && a[l].d < a[s].d {
			s = l
		}
		if r < n && a[r].d < a[s].d {
			s = r
		}
		if s == i {
			break
		}
		a[s], a[i] = a[i], a[s]
		i = s
	}
	*h = a
	return top
}

type maxHeap []item

func (h *maxHeap) push(x item) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].d >= a[i].d {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *maxHeap) pop() item {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, s := 2*i+1, 2*i+2, i
		if l < n && a[l].d > a[s].d {
			s = l
		}
		if r < n && a[r].d > a[s].d {
			s = r
		}
		if s == i {
			break
		}
		a[s], a[i] = a[i], a[s]
		i = s
	}
	*h = a
	return top
}

// bitset marks visited nodes during one search.
type bitset []uint64

func (g *graph) getVisited() *bitset {
	words := (len(g.vecs) + 63) / 64
	if v, ok := g.visited.Get().(*bitset); ok && len(*v) >= words {
		clear(*v)
		return v
	}
	b := make(bitset, words+words/4+1)
	return &b
}

// searchLayer is the beam search of one layer from entry points eps,
// returning up to ef nearest items, unordered. With locked set it reads
// each node's links under the node's lock (a batch insert is running).
func (g *graph) searchLayer(q *query, eps []item, ef, layer int, locked bool) []item {
	vis := g.getVisited()
	defer g.visited.Put(vis)
	var cand minHeap
	var res maxHeap
	for _, e := range eps {
		(*vis)[e.id/64] |= 1 << (uint(e.id) % 64)
		cand.push(e)
		res.push(e)
	}
	for len(res) > ef {
		res.pop()
	}
	var buf []int32
	for len(cand) > 0 {
		c := cand.pop()
		if len(res) >= ef && c.d > res[0].d {
			break
		}
		var neigh []int32
		if locked {
			g.locks[c.id].Lock()
			if layer < len(g.links[c.id]) {
				buf = append(buf[:0], g.links[c.id][layer]...)
			} else {
				buf = buf[:0]
			}
			g.locks[c.id].Unlock()
			neigh = buf
		} else if layer < len(g.links[c.id]) {
			neigh = g.links[c.id][layer]
		}
		for _, n := range neigh {
			w, bit := n/64, uint64(1)<<(uint(n)%64)
			if (*vis)[w]&bit != 0 {
				continue
			}
			(*vis)[w] |= bit
			d := q.to(g.vecs[n])
			if len(res) < ef || d < res[0].d {
				cand.push(item{n, d})
				res.push(item{n, d})
				if len(res) > ef {
					res.pop()
				}
			}
		}
	}
	return res
}

// selectNeighbors keeps up to m of the candidates by the heuristic of the
// HNSW paper (a candidate is kept when it is closer to the base than to
// any neighbour kept so far), then fills up with the closest of the rest.
func (g *graph) selectNeighbors(cands []item, m int) []int32 {
	sortItems(cands)
	kept := make([]int32, 0, m)
	var pruned []int32
	for _, c := range cands {
		if len(kept) == m {
			break
		}
		good := true
		for _, k := range kept {
			if g.nodeDist(c.id, k) < c.d {
				good = false
				break
			}
		}
		if good {
			kept = append(kept, c.id)
		} else {
			pruned = append(pruned, c.id)
		}
	}
	for _, p := range pruned {
		if len(kept) == m {
			break
		}
		kept = append(kept, p)
	}
	return kept
}

func sortItems(a []item) {
	// Insertion sort is fast for the short lists involved; fall back to a
	// heap sort for long ones.
	if len(a) > 64 {
		h := minHeap(append([]item(nil), a...))
		// heapify
		for i := len(h)/2 - 1; i >= 0; i-- {
			siftDown(h, i)
		}
		for i := range a {
			a[i] = h.pop()
		}
		return
	}
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].d < a[j-1].d; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func siftDown(a minHeap, i int) {
	n := len(a)
	for {
		l, r, s := 2*i+1, 2*i+2, i
		if l < n && a[l].d < a[s].d {
			s = l
		}
		if r < n && a[r].d < a[s].d {
			s = r
		}
		if s == i {
			return
		}
		a[s], a[i] = a[i], a[s]
		i = s
	}
}

// insert adds vector v as the next id and returns it.
func (g *graph) insert(v []float32) int32 {
	return g.insertBatch([][]float32{v}, 1)
}

// parallelMin is the smallest batch inserted by several goroutines.
const parallelMin = 512

// insertBatch adds vectors as the next ids, with up to workers goroutines
// for a large batch, and returns the first id.
func (g *graph) insertBatch(vs [][]float32, workers int) int32 {
	first := int32(len(g.vecs))
	if len(vs) == 0 {
		// Nothing to insert (a rebuild after every vector was deleted).
		return first
	}
	levels := make([]int, len(vs))
	for i, v := range vs {
		levels[i] = int(-math.Log(1-g.rng.Float64()) * g.ml)
		g.vecs = append(g.vecs, v)
		g.links = append(g.links, make([][]int32, levels[i]+1))
	}
	g.sparse = append(g.sparse, make([]sparseVec, len(vs))...)
	if len(g.locks) < len(g.vecs) {
		// No insert is running: the locks are all free and can be replaced.
		g.locks = make([]sync.Mutex, max(len(g.vecs), 2*len(g.locks)))
	}
	for i, v := range vs {
		g.sparse[int(first)+i] = toSparse(v)
	}
	start := 0
	if !g.hasAny {
		g.entry, g.top, g.hasAny = first, levels[0], true
		start = 1
	}
	if workers < 2 || len(vs)-start < parallelMin {
		for i := start; i < len(vs); i++ {
			g.link(first+int32(i), levels[i], false)
		}
		return first
	}
	// Link in a shuffled order: vectors that arrive together (the chunks
	// of one file) are alike, and two alike nodes linked at the same time
	// cannot see each other.
	order := g.rng.Perm(len(vs) - start)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1) - 1)
				if n >= len(order) {
					return
				}
				i := start + order[n]
				g.link(first+int32(i), levels[i], true)
			}
		}()
	}
	wg.Wait()
	return first
}

// link connects node id, whose vector and level are set, into the graph.
// locked says other goroutines are linking at the same time.
func (g *graph) link(id int32, level int, locked bool) {
	q := newQuery(g.vecs[id])
	if locked {
		g.epMu.Lock()
	}
	entry, top := g.entry, g.top
	if locked {
		g.epMu.Unlock()
	}
	ep := []item{{entry, q.to(g.vecs[entry])}}
	for l := top; l > level; l-- {
		ep = []item{closest(g.searchLayer(&q, ep, 1, l, locked))}
	}
	for l := min(level, top); l >= 0; l-- {
		w := g.searchLayer(&q, ep, g.efC, l, locked)
		maxLinks := g.m
		if l == 0 {
			maxLinks = g.m0
		}
		neigh := g.selectNeighbors(append([]item(nil), w...), g.m)
		if locked {
			g.locks[id].Lock()
			// Another goroutine may already have linked to this node from
			// a layer above and back: keep those links too.
			if prev := g.links[id][l]; len(prev) > 0 {
				neigh = g.mergeLinks(id, neigh, prev, maxLinks)
			}
		}
		g.links[id][l] = neigh
		if locked {
			g.locks[id].Unlock()
		}
		for _, n := range neigh {
			if locked {
				g.locks[n].Lock()
			}
			nl := append(g.links[n][l], id)
			if len(nl) > maxLinks {
				// A full neighbour list is pruned by the same heuristic.
				cands := make([]item, len(nl))
				for i, x := range nl {
					cands[i] = item{x, g.nodeDist(n, x)}
				}
				nl = append(nl[:0], g.selectNeighbors(cands, maxLinks)...)
			}
			g.links[n][l] = nl
			if locked {
				g.locks[n].Unlock()
			}
		}
		ep = w
	}
	if level > top {
		if locked {
			g.epMu.Lock()
		}
		if level > g.top {
			g.entry, g.top = id, level
		}
		if locked {
			g.epMu.Unlock()
		}
	}
}

// mergeLinks joins two neighbour lists of node id, pruned to maxLinks by
// the selection heuristic when too long.
func (g *graph) mergeLinks(id int32, a, b []int32, maxLinks int) []int32 {
	out := append([]int32(nil), a...)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	if len(out) <= maxLinks {
		return out
	}
	cands := make([]item, len(out))
	for i, x := range out {
		cands[i] = item{x, g.nodeDist(id, x)}
	}
	return g.selectNeighbors(cands, maxLinks)
}

func closest(items []item) item {
	best := items[0]
	for _, it := range items[1:] {
		if it.d < best.d {
			best = it
		}
	}
	return best
}

// search returns up to ef nearest ids to q, nearest first.
func (g *graph) search(v []float32, ef int) []item {
	if !g.hasAny {
		return nil
	}
	q := newQuery(v)
	ep := []item{{g.entry, q.to(g.vecs[g.entry])}}
	for l := g.top; l > 0; l-- {
		ep = []item{closest(g.searchLayer(&q, ep, 1, l, false))}
	}
	res := g.searchLayer(&q, ep, ef, 0, false)
	sortItems(res)
	return res
}

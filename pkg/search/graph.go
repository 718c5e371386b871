package search

import (
	"math"
	"math/rand"
	"sync"
)

// graph is a hierarchical navigable small world graph over unit vectors,
// with the standard layered insert (efConstruction candidates, neighbour
// selection heuristic, M links per node above layer 0 and 2M at layer 0)
// and beam search (efSearch candidates). Nodes are dense int32 ids. It is
// not safe for concurrent use on its own: Index serialises changes and
// lets searches share a read lock.
type graph struct {
	m, m0, efC int
	ml         float64
	rng        *rand.Rand

	vecs   [][]float32
	links  [][][]int32 // node -> layer -> neighbours
	entry  int32
	top    int
	hasAny bool

	visited sync.Pool
}

func newGraphImpl(m, efC int, seed int64) *graph {
	return &graph{m: m, m0: 2 * m, efC: efC, ml: 1 / math.Log(float64(m)), rng: rand.New(rand.NewSource(seed))}
}

func dist(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return 1 - (s0 + s1 + s2 + s3)
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
// returning up to ef nearest items, unordered.
func (g *graph) searchLayer(q []float32, eps []item, ef, layer int) []item {
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
	for len(cand) > 0 {
		c := cand.pop()
		if len(res) >= ef && c.d > res[0].d {
			break
		}
		if layer >= len(g.links[c.id]) {
			continue
		}
		for _, n := range g.links[c.id][layer] {
			w, bit := n/64, uint64(1)<<(uint(n)%64)
			if (*vis)[w]&bit != 0 {
				continue
			}
			(*vis)[w] |= bit
			d := dist(q, g.vecs[n])
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
			if dist(g.vecs[c.id], g.vecs[k]) < c.d {
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
	id := int32(len(g.vecs))
	level := int(-math.Log(1-g.rng.Float64()) * g.ml)
	g.vecs = append(g.vecs, v)
	g.links = append(g.links, make([][]int32, level+1))
	if !g.hasAny {
		g.entry, g.top, g.hasAny = id, level, true
		return id
	}
	ep := []item{{g.entry, dist(v, g.vecs[g.entry])}}
	for l := g.top; l > level; l-- {
		ep = []item{closest(g.searchLayer(v, ep, 1, l))}
	}
	for l := min(level, g.top); l >= 0; l-- {
		w := g.searchLayer(v, ep, g.efC, l)
		maxLinks := g.m
		if l == 0 {
			maxLinks = g.m0
		}
		neigh := g.selectNeighbors(append([]item(nil), w...), g.m)
		g.links[id][l] = neigh
		for _, n := range neigh {
			nl := append(g.links[n][l], id)
			if len(nl) > maxLinks {
				// A full neighbour list drops its farthest link.
				worst, worstD := 0, float32(-1)
				for i, x := range nl {
					if d := dist(g.vecs[n], g.vecs[x]); d > worstD {
						worst, worstD = i, d
					}
				}
				nl[worst] = nl[len(nl)-1]
				nl = nl[:len(nl)-1]
			}
			g.links[n][l] = nl
		}
		ep = w
	}
	if level > g.top {
		g.entry, g.top = id, level
	}
	return id
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
func (g *graph) search(q []float32, ef int) []item {
	if !g.hasAny {
		return nil
	}
	ep := []item{{g.entry, dist(q, g.vecs[g.entry])}}
	for l := g.top; l > 0; l-- {
		ep = []item{closest(g.searchLayer(q, ep, 1, l))}
	}
	res := g.searchLayer(q, ep, ef, 0)
	sortItems(res)
	return res
}

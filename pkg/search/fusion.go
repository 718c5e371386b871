package search

import "sort"

// RRFK is the usual reciprocal rank fusion constant: a hit at rank r (from
// 1) in a list contributes weight/(RRFK+r).
const RRFK = 60

// Ranked is one fused result.
type Ranked struct {
	Key   string
	Score float64
}

// List is one ranking to fuse, best first, with its weight.
type List struct {
	Keys   []string
	Weight float64
}

// Fuse combines rankings by weighted reciprocal rank fusion and adds
// boost[key] to a key's fused score. Ties are broken by key for a stable
// order.
func Fuse(lists []List, boost map[string]float64) []Ranked {
	scores := map[string]float64{}
	for _, l := range lists {
		w := l.Weight
		if w == 0 {
			w = 1
		}
		seen := map[string]bool{}
		for i, k := range l.Keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			scores[k] += w / float64(RRFK+i+1)
		}
	}
	for k, b := range boost {
		if _, ok := scores[k]; ok {
			scores[k] += b
		}
	}
	out := make([]Ranked, 0, len(scores))
	for k, s := range scores {
		out = append(out, Ranked{Key: k, Score: s})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].Key < out[j].Key
	})
	return out
}

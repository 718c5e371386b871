package librarian

import (
	"path"
	"sort"
	"strings"
)

// Fusion of the lexical and semantic rankings.
//
// Reciprocal rank fusion alone let the semantic side decide rank 1: with
// the offline embedder a two-token line ("_uint8 uint8") is close to any
// query sharing one of its words, and a chunk second in both lists beat
// the chunk first in the lexical one. The rules here:
//   - the lexical list weighs more than the semantic one;
//   - a semantic hit with few tokens counts in proportion to its tokens;
//   - a strong lexical first hit (it defines what a short query names, or it
//     holds every term) stays first;
//   - ties go to the better lexical rank, then the better semantic rank,
//     then path and line: never to the chunk id;
//   - unless the query is about tests, test files, test data, examples and
//     vendored code rank below the code they exercise.
const (
	// rrfK is the reciprocal rank fusion constant: rank r (from 1) in a
	// list adds weight/(rrfK+r).
	rrfK = 60
	// lexicalWeight and semanticWeight weigh the two lists.
	lexicalWeight  = 1.0
	semanticWeight = 0.6
	// shortChunkTokens is the token count below which a semantic hit
	// counts in proportion.
	shortChunkTokens = 24
	// ancillaryFactor scales the score of test, example and vendored code.
	ancillaryFactor = 0.5
)

// fuse merges lexical and semantic rankings and boosts chunks that define
// a query identifier; scores are scaled so that first place in both lists
// scores about 1.
func (s *Service) fuse(pq parsedQuery, lex, sem []candidate) []candidate {
	type entry struct {
		c                candidate
		lexRank, semRank int // from 1; 0 = absent
		score            float64
	}
	byKey := map[string]*entry{}
	var order []*entry
	key := func(c candidate) string { return c.repoID + "/" + c.id }
	for i, c := range lex {
		if _, ok := byKey[key(c)]; ok {
			continue
		}
		e := &entry{c: c, lexRank: i + 1}
		byKey[key(c)], order = e, append(order, e)
	}
	for i, c := range sem {
		e, ok := byKey[key(c)]
		if !ok {
			e = &entry{c: c}
			byKey[key(c)], order = e, append(order, e)
		}
		if e.semRank == 0 {
			e.semRank = i + 1
		}
	}
	boosts := definitionBoosts(pq)
	for _, e := range order {
		if e.lexRank > 0 {
			e.score += lexicalWeight / float64(rrfK+e.lexRank)
		}
		if e.semRank > 0 {
			e.score += semanticWeight * shortFactor(e.c.content) / float64(rrfK+e.semRank)
		}
		e.score += boosts(e.c)
	}
	ancillary := !pq.aboutTests()
	for _, e := range order {
		if ancillary && isAncillaryPath(e.c.path) {
			e.score *= ancillaryFactor
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.score != b.score {
			return a.score > b.score
		}
		if ra, rb := rankOrLast(a.lexRank), rankOrLast(b.lexRank); ra != rb {
			return ra < rb
		}
		if ra, rb := rankOrLast(a.semRank), rankOrLast(b.semRank); ra != rb {
			return ra < rb
		}
		if a.c.path != b.c.path {
			return a.c.path < b.c.path
		}
		return a.c.lineStart < b.c.lineStart
	})
	// A strong lexical first hit stays first (unless it was demoted as a
	// test or example).
	if len(lex) > 0 && strongLexicalFirst(lex, boosts) && !(ancillary && isAncillaryPath(lex[0].path)) {
		first := byKey[key(lex[0])]
		for i, e := range order {
			if e == first {
				copy(order[1:i+1], order[:i])
				order[0] = first
				break
			}
		}
	}
	out := make([]candidate, 0, len(order))
	for _, e := range order {
		c := e.c
		c.score = e.score * (rrfK + 1) / (lexicalWeight + semanticWeight)
		out = append(out, c)
	}
	return out
}

func rankOrLast(r int) int {
	if r == 0 {
		return int(^uint(0) >> 1)
	}
	return r
}

// Definition boosts, on the fused score.
const (
	// identifierBoost lifts a chunk that defines a query identifier above
	// anything fusion alone can rank first.
	identifierBoost = 2.0 / (rrfK + 1)
	// nameBoost lifts a chunk whose symbol equals a query word
	// case-insensitively.
	nameBoost = 1.0 / (rrfK + 1)
)

// definitionBoosts returns the boost of a chunk: identifiers name what a
// short query looks for (in a longer one, a description, they are context
// and their definitions are not the answer), and a one-word query names
// what it looks for in any case.
func definitionBoosts(pq parsedQuery) func(candidate) float64 {
	idents := map[string]bool{}
	if pq.navigational() {
		for _, w := range pq.identifiers {
			idents[w] = true
		}
	}
	words := map[string]bool{}
	if len(pq.words) == 1 {
		words[strings.ToLower(pq.words[0])] = true
	}
	return func(c candidate) float64 {
		b := 0.0
		for _, n := range c.names {
			if idents[n] {
				return identifierBoost
			}
			if words[strings.ToLower(n)] {
				b = nameBoost
			}
		}
		return b
	}
}

// strongLexicalFirst reports whether the first lexical hit is one fusion
// must not displace: it defines what the query names, or it holds every
// term of the query. (Keeping it only when its score led the second by 30%
// lost rank 1 to the semantic side on a benchmark query and gained one
// elsewhere: hybrid is to be never worse than lexical at rank 1.) The
// semantic side reorders the rest and decides when the lexical first hit
// is only a fallback match.
func strongLexicalFirst(lex []candidate, boosts func(candidate) float64) bool {
	return boosts(lex[0]) > 0 || lex[0].match == matchAll
}

// shortFactor is the share of a semantic hit's weight a chunk keeps: the
// whole for chunks of shortChunkTokens tokens or more, in proportion below.
func shortFactor(content string) float64 {
	n := 0
	words(content, func(string) { n++ })
	if n >= shortChunkTokens {
		return 1
	}
	return float64(n) / shortChunkTokens
}

// demoteAncillary lowers test, example and vendored chunks below the rest
// unless the query is about tests (semantic mode; fuse does it for the
// others).
func demoteAncillary(pq parsedQuery, cands []candidate) []candidate {
	if pq.aboutTests() {
		return cands
	}
	for i := range cands {
		if isAncillaryPath(cands[i].path) {
			cands[i].score *= ancillaryFactor
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	return cands
}

// testWords mark a query about tests, examples or vendored code: those
// files are then the answer and keep their rank.
var testWords = map[string]bool{
	"test": true, "tests": true, "testing": true, "tested": true, "testdata": true, "unittest": true,
	"spec": true, "specs": true, "fixture": true, "fixtures": true, "mock": true, "mocks": true,
	"fake": true, "fakes": true, "stub": true, "stubs": true, "benchmark": true, "benchmarks": true,
	"example": true, "examples": true, "vendor": true, "vendored": true, "e2e": true,
}

// aboutTests reports whether the query asks about tests, examples or
// vendored code.
func (pq parsedQuery) aboutTests() bool {
	for _, w := range pq.words {
		for _, p := range identifierTokens(w) {
			if testWords[p] {
				return true
			}
		}
	}
	return false
}

// ancillaryDirs are directories of tests, test data, examples and
// vendored code.
var ancillaryDirs = map[string]bool{
	"test": true, "tests": true, "testdata": true, "__tests__": true, "spec": true, "specs": true,
	"fixtures": true, "testutil": true, "testutils": true, "mocks": true, "e2e": true,
	"example": true, "examples": true, "_examples": true, "vendor": true, "third_party": true, "node_modules": true,
}

// isAncillaryPath reports whether a repository path is a test, test data,
// an example or vendored code.
func isAncillaryPath(p string) bool {
	dir, base := path.Split(p)
	for _, seg := range strings.Split(strings.Trim(dir, "/"), "/") {
		if ancillaryDirs[seg] {
			return true
		}
	}
	name := strings.ToLower(base)
	stem := strings.TrimSuffix(name, path.Ext(name))
	switch {
	case strings.HasSuffix(stem, "_test"), strings.HasPrefix(stem, "test_"), strings.HasSuffix(stem, ".test"),
		strings.HasSuffix(stem, ".spec"), strings.HasSuffix(stem, "_spec"), strings.HasSuffix(stem, "_tests"),
		strings.HasSuffix(stem, "test") && len(stem) > 4 && base[len(stem)-4] == 'T':
		return true
	}
	return false
}

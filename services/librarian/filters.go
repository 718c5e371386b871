package librarian

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/FastFilter/xorfilter"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/embed"
)

// termFilters holds, per repository, an immutable XOR filter over the
// repository's vocabulary (every lexeme of its chunks and file names, the
// alphanumeric parts of each, and their stems) plus an exact set of the
// terms of chunks changed since the filter was built (G-14). They are
// internal to search, never a tool: a query none of whose words can be in a
// repository skips that repository's retrieval, and a query whose words are
// all in another repository of the tenant names it in also_exists_in.
//
// A filter answers "maybe" or "certainly not": false positives only cost
// a search, and a repository whose filter is being rebuilt answers "maybe"
// for everything, so a filter can never hide a match.
type termFilters struct {
	seed maphash.Seed

	mu    sync.RWMutex
	repos map[string]*repoFilter
}

// repoFilter is one repository's filter.
type repoFilter struct {
	ready   bool
	xor     *xorfilter.Xor8 // nil for an empty vocabulary
	pending map[uint64]struct{}
}

// maxPending is how many changed terms are kept beside a filter before it
// is rebuilt.
const maxPending = 20000

func newTermFilters() *termFilters {
	return &termFilters{seed: maphash.MakeSeed(), repos: map[string]*repoFilter{}}
}

func (t *termFilters) key(term string) uint64 { return maphash.String(t.seed, term) }

// filterTerms expands one vocabulary or query term into the keys a filter
// holds for it: the term, its alphanumeric parts and the stem of each.
func filterTerms(term string, fn func(string)) {
	term = strings.ToLower(term)
	fn(term)
	fn(embed.Stem(term))
	if strings.IndexFunc(term, func(r rune) bool { return !isWordRune(r) }) < 0 {
		return
	}
	for _, p := range strings.FieldsFunc(term, func(r rune) bool { return !isWordRune(r) }) {
		fn(p)
		fn(embed.Stem(p))
	}
}

func isWordRune(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 }

// markStale makes a repository answer "maybe" until its next rebuild.
func (t *termFilters) markStale(tenant, repoID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.repos[repoKey(tenant, repoID)]; f != nil {
		f.ready = false
	}
}

// ready reports whether a repository has a ready filter.
func (t *termFilters) ready(tenant, repoID string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	f := t.repos[repoKey(tenant, repoID)]
	return f != nil && f.ready
}

// drop forgets a repository.
func (t *termFilters) drop(tenant, repoID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.repos, repoKey(tenant, repoID))
}

// set installs a freshly built filter over vocab.
func (t *termFilters) set(tenant, repoID string, vocab []string) error {
	seen := make(map[uint64]struct{}, len(vocab)*2)
	for _, w := range vocab {
		filterTerms(w, func(s string) { seen[t.key(s)] = struct{}{} })
	}
	f := &repoFilter{ready: true, pending: map[uint64]struct{}{}}
	if len(seen) > 0 {
		keys := make([]uint64, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		xor, err := xorfilter.Populate(keys)
		if err != nil {
			return fmt.Errorf("build term filter: %w", err)
		}
		f.xor = xor
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.repos[repoKey(tenant, repoID)] = f
	return nil
}

// addPending adds the terms of changed chunks to a ready filter and
// reports whether the filter should now be rebuilt (it is not ready, or
// holds too many pending terms).
func (t *termFilters) addPending(tenant, repoID string, vocab []string) (rebuild bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.repos[repoKey(tenant, repoID)]
	if f == nil || !f.ready {
		return true
	}
	for _, w := range vocab {
		filterTerms(w, func(s string) { f.pending[t.key(s)] = struct{}{} })
	}
	return len(f.pending) > maxPending
}

// verdict is what a repository's filter says about a query.
type verdict int

const (
	verdictUnknown verdict = iota // no ready filter
	verdictNone                   // none of the terms can be there
	verdictSome                   // some of the terms may be there
	verdictAll                    // every term may be there
)

// probe checks a query's terms against one repository's filter. A term is
// present when the term, one of its parts or one of their stems is.
func (t *termFilters) probe(tenant, repoID string, terms []string) verdict {
	t.mu.RLock()
	defer t.mu.RUnlock()
	f := t.repos[repoKey(tenant, repoID)]
	if f == nil || !f.ready {
		return verdictUnknown
	}
	found := 0
	for _, term := range terms {
		hit := false
		filterTerms(term, func(s string) {
			if hit {
				return
			}
			k := t.key(s)
			if _, ok := f.pending[k]; ok || f.xor != nil && f.xor.Contains(k) {
				hit = true
			}
		})
		if hit {
			found++
		}
	}
	switch {
	case len(terms) == 0:
		return verdictUnknown
	case found == 0:
		return verdictNone
	case found == len(terms):
		return verdictAll
	}
	return verdictSome
}

// vocabulary reads a repository's distinct lexemes, of all its chunks or
// of the chunks ids only.
func (s store) vocabulary(ctx context.Context, tenant, repoID string, ids []string) ([]string, error) {
	var sql string
	args := []any{tenant, uuidParam(repoID)}
	if ids == nil {
		sql = `SELECT word FROM ts_stat(format(
			'SELECT tsv FROM chunks WHERE tenant_id = %L AND repository_id = %L::uuid', $1::text, $2::text))`
		args = []any{tenant, repoID}
	} else {
		sql = `SELECT DISTINCT unnest(tsvector_to_array(tsv)) FROM chunks
			WHERE tenant_id = $1 AND repository_id = $2 AND id = ANY($3)`
		args = append(args, ids)
	}
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read vocabulary: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, fmt.Errorf("read vocabulary: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read vocabulary: %w", err)
	}
	return out, nil
}

// rebuildFilter rebuilds a repository's filter from its stored chunks.
func (v *vectorStore) rebuildFilter(ctx context.Context, tenant, repoID string) error {
	vocab, err := v.st.vocabulary(ctx, tenant, repoID, nil)
	if err != nil {
		return err
	}
	return v.filters.set(tenant, repoID, vocab)
}

// updateFilter brings a repository's filter up to date after chunks
// changed: their terms join the pending set, or the whole filter is
// rebuilt when it was not ready or holds too many pending terms.
func (v *vectorStore) updateFilter(ctx context.Context, tenant, repoID string, changed []string) error {
	if len(changed) > 0 {
		vocab, err := v.st.vocabulary(ctx, tenant, repoID, changed)
		if err != nil {
			return err
		}
		if !v.filters.addPending(tenant, repoID, vocab) {
			return nil
		}
	} else if v.filters.ready(tenant, repoID) {
		return nil
	}
	return v.rebuildFilter(ctx, tenant, repoID)
}

// filterRepos drops the repositories whose filter rules out every word of
// the query. It applies to lexical search (a chunk matches only through
// its words), and to hybrid and semantic search with the offline embedder,
// whose features are the words of the text, their parts and stems: with
// none of them in a repository, its chunks share no feature with the
// query. A learned embedding model can match without shared words, so
// semantic retrieval with one is never skipped.
func (s *Service) filterRepos(tenant string, repos []string, pq parsedQuery, mode librarianv1.SearchMode) []string {
	switch mode {
	case librarianv1.SearchMode_SEARCH_MODE_LEXICAL:
	case librarianv1.SearchMode_SEARCH_MODE_REGEX:
		return repos
	default:
		if _, offline := s.embedder.(*embed.Hashing); !offline {
			return repos
		}
	}
	if len(pq.terms) == 0 {
		return repos
	}
	kept := repos[:0:0]
	for _, r := range repos {
		if s.vectors.filters.probe(tenant, r, pq.terms) != verdictNone {
			kept = append(kept, r)
		}
	}
	return kept
}

// alsoExistsIn lists the tenant's other repositories (not among searched)
// whose filter holds every word of the query.
func (s *Service) alsoExistsIn(ctx context.Context, tenant string, searched []string, pq parsedQuery) ([]string, error) {
	if len(pq.terms) == 0 {
		return nil, nil
	}
	all, err := s.store.tenantRepos(ctx, tenant)
	if err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, r := range searched {
		skip[r] = true
	}
	var out []string
	for _, r := range all {
		if !skip[r] && s.vectors.filters.probe(tenant, r, pq.terms) == verdictAll {
			out = append(out, r)
		}
	}
	return out, nil
}

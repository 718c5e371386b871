package librarian

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/redis/go-redis/v9"
)

// candidate is one chunk matched by a search, before snippets.
type candidate struct {
	repoID    string
	id        string
	path      string
	language  string
	lineStart int
	lineEnd   int
	symbol    string
	kind      string
	names     []string
	content   string
	score     float64
	// match is how a lexical candidate matched the query.
	match matchKind
}

// matchKind is how a lexical candidate matched: fusion keeps a strong
// lexical first hit first.
type matchKind int

const (
	matchNone matchKind = iota
	// matchDefinition: the chunk defines a word of a short query.
	matchDefinition
	// matchAll: the chunk holds every term (or its stem).
	matchAll
	// matchSome: the fallback, the chunk holds some of the rarest terms.
	matchSome
)

// errBadRegex means the database rejected a regular expression that Go
// accepted.
var errBadRegex = errors.New("regular expression not supported by the index")

// filters narrow a search.
type filters struct {
	repos     []string
	language  string
	kind      string
	pathRegex string
}

const candidateColumns = `repository_id::text, id, path, language, line_start, line_end, symbol, kind, names, content`

func scanCandidates(rows pgx.Rows, withScore bool) ([]candidate, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		var ls, le int32
		var names string
		dest := []any{&c.repoID, &c.id, &c.path, &c.language, &ls, &le, &c.symbol, &c.kind, &names, &c.content}
		if withScore {
			var sc float32
			dest = append(dest, &sc)
			err := r.Scan(dest...)
			c.score = float64(sc)
			c.lineStart, c.lineEnd, c.names = int(ls), int(le), strings.Fields(names)
			return c, err
		}
		err := r.Scan(dest...)
		c.lineStart, c.lineEnd, c.names = int(ls), int(le), strings.Fields(names)
		return c, err
	})
}

func repoParams(ids []string) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = uuidParam(id)
	}
	return out
}

// filterSQL is the WHERE tail shared by the search queries; parameters $1
// (tenant) .. $5 (path regex) are fixed.
const filterSQL = `tenant_id = $1 AND repository_id = ANY($2)
	AND ($3 = '' OR language = $3) AND ($4 = '' OR kind = $4) AND ($5 = '' OR path ~ $5)`

// tenantRepos lists the ids of the tenant's repositories.
func (s store) tenantRepos(ctx context.Context, tenant string) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text FROM repositories WHERE tenant_id = $1 ORDER BY id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	return out, nil
}

// Fallback query shaping: when too few chunks hold every term, chunks
// holding any of the query's rarest terms are ranked instead. Terms in more
// than rareShare of the chunks are left out (at least minRareTerms stay).
const (
	maxRareTerms = 8
	minRareTerms = 2
	rareShare    = 0.02
	// enoughAll is how many all-terms matches make the fallback
	// unnecessary.
	enoughAll = 10
	// minCommonDF is the least document frequency that can make a term
	// too common for the fallback.
	minCommonDF = 200
	// guessesAfter is how many every-term chunks precede the definitions
	// of a plain word of a short query.
	guessesAfter = 10
)

// lexicalChunks ranks chunks by full-text match: chunks defining a query
// identifier (or the word of a one-word query) first, then chunks holding
// every term (or its stem), then definitions of a plain word of a short
// query, then, when every-term chunks are few, chunks holding the rarest
// terms.
func (s store) lexicalChunks(ctx context.Context, tenant string, pq parsedQuery, f filters, limit int) ([]candidate, error) {
	base := []any{tenant, repoParams(f.repos), f.language, f.kind, f.pathRegex}
	var out []candidate
	seen := map[string]bool{}
	add := func(cs []candidate) {
		for _, c := range cs {
			k := c.repoID + "/" + c.id
			if !seen[k] {
				seen[k] = true
				out = append(out, c)
			}
		}
	}
	lead, guesses, err := s.definitionChunks(ctx, base, pq)
	if err != nil {
		return nil, err
	}
	add(lead)
	groups := termGroups(pq.terms)
	if len(groups) == 0 {
		add(guesses)
		return out, nil
	}
	rank := func(q string, m matchKind) error {
		rows, err := s.db.Query(ctx, `SELECT `+candidateColumns+`, ts_rank(tsv, q) AS score
			FROM chunks, to_tsquery('simple', $6) q
			WHERE `+filterSQL+` AND tsv @@ q
			ORDER BY score DESC, path, line_start LIMIT $7`, append(base, q, limit)...)
		if err != nil {
			return fmt.Errorf("search chunks: %w", err)
		}
		cs, err := scanCandidates(rows, true)
		if err != nil {
			return fmt.Errorf("search chunks: %w", err)
		}
		for i := range cs {
			cs[i].match = m
		}
		add(cs)
		return nil
	}
	before := len(out)
	if err := rank(groupQuery(groups, true), matchAll); err != nil {
		return nil, err
	}
	allMatches := len(out) - before
	// Guesses follow the best every-term chunks, not all of them.
	if at := before + min(allMatches, guessesAfter); len(guesses) > 0 && at < len(out) {
		rest := append([]candidate(nil), out[at:]...)
		out = out[:at]
		add(guesses)
		out = append(out, rest...)
	} else {
		add(guesses)
	}
	if len(groups) > 1 && allMatches < enoughAll {
		rare, err := s.rareTerms(ctx, tenant, f.repos, groups)
		if err != nil {
			return nil, err
		}
		if err := rank(groupQuery(rare, false), matchSome); err != nil {
			return nil, err
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// definitionChunks returns the chunks defining a word of a short query:
// definitions of an identifier, or of the one word of a one-word query,
// lead; a definition of one plain word of a longer query ("pool" in
// "where is the connection pool configured") is only a guess and follows
// the chunks that hold every term.
func (s store) definitionChunks(ctx context.Context, base []any, pq parsedQuery) (lead, guesses []candidate, err error) {
	if !pq.navigational() {
		return nil, nil, nil
	}
	names := append([]string(nil), pq.identifiers...)
	for _, w := range pq.words {
		if len(w) >= 3 && !stopWords[strings.ToLower(w)] {
			names = append(names, w)
		}
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	rows, err := s.db.Query(ctx, `SELECT `+candidateColumns+` FROM chunks
		WHERE `+filterSQL+` AND string_to_array(names, ' ') && $6::text[]
		ORDER BY path, line_start LIMIT $7`, append(base, names, 20)...)
	if err != nil {
		return nil, nil, fmt.Errorf("search definitions: %w", err)
	}
	defs, err := scanCandidates(rows, false)
	if err != nil {
		return nil, nil, fmt.Errorf("search definitions: %w", err)
	}
	// A capitalised word after the first is written as a name ("json
	// Unmarshal").
	ident := map[string]bool{}
	for _, w := range pq.identifiers {
		ident[w] = true
	}
	for i, w := range pq.words {
		if i > 0 && isUpper(w[0]) {
			ident[w] = true
		}
	}
	for _, c := range defs {
		c.match = matchDefinition
		named := len(pq.words) == 1
		for _, n := range c.names {
			named = named || ident[n]
		}
		if named {
			lead = append(lead, c)
		} else {
			guesses = append(guesses, c)
		}
	}
	return lead, guesses, nil
}

// rareTerms orders term groups (a term and its stem) by how many chunks
// hold them, rarest first, and keeps those held by at most rareShare of
// the chunks (at least minRareTerms, at most maxRareTerms). Terms without
// statistics count as rare; a group counts as common as its commonest form.
func (s store) rareTerms(ctx context.Context, tenant string, repos []string, groups [][]string) ([][]string, error) {
	var terms []string
	for _, g := range groups {
		terms = append(terms, g...)
	}
	rows, err := s.db.Query(ctx, `SELECT term, sum(df)::bigint FROM terms
		WHERE tenant_id = $1 AND repository_id = ANY($2) AND term = ANY($3) GROUP BY term`,
		tenant, repoParams(repos), terms)
	if err != nil {
		return nil, fmt.Errorf("read term statistics: %w", err)
	}
	df := map[string]int64{}
	for rows.Next() {
		var t string
		var n int64
		if err := rows.Scan(&t, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read term statistics: %w", err)
		}
		df[t] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read term statistics: %w", err)
	}
	var total int64
	if err := s.db.QueryRow(ctx, `SELECT coalesce(sum(chunk_count), 0)::bigint FROM repositories WHERE tenant_id = $1 AND id = ANY($2)`,
		tenant, repoParams(repos)).Scan(&total); err != nil {
		return nil, fmt.Errorf("read chunk count: %w", err)
	}
	groupDF := func(g []string) int64 {
		var n int64
		for _, t := range g {
			n = max(n, df[t])
		}
		return n
	}
	sorted := append([][]string(nil), groups...)
	sort.SliceStable(sorted, func(i, j int) bool { return groupDF(sorted[i]) < groupDF(sorted[j]) })
	// Small repositories keep every term: nothing is common there.
	limit := max(int64(float64(total)*rareShare), minCommonDF)
	var out [][]string
	for _, g := range sorted {
		if len(out) == maxRareTerms || len(out) >= minRareTerms && groupDF(g) > limit {
			break
		}
		out = append(out, g)
	}
	return out, nil
}

// cleanTerms keeps only [a-z0-9_] in each term so that query text can never
// carry text-search operators.
func cleanTerms(terms []string) []string {
	out := make([]string, 0, len(terms))
	for _, t := range terms {
		t = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
				return r
			}
			return -1
		}, t)
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// regexChunks returns chunks with a line matching the regular expression
// (POSIX in the database, then checked again in Go), in path order.
func (s store) regexChunks(ctx context.Context, tenant, expr string, f filters, limit int) ([]candidate, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+candidateColumns+` FROM chunks
		WHERE `+filterSQL+` AND content ~ $6
		ORDER BY path, line_start LIMIT $7`, tenant, repoParams(f.repos), f.language, f.kind, f.pathRegex, expr, limit)
	if err != nil {
		return nil, fmt.Errorf("regex search: %w", err)
	}
	defer rows.Close()
	cs, err := scanCandidates(rows, false)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "2201B" {
		return nil, errBadRegex
	}
	if err != nil {
		return nil, fmt.Errorf("regex search: %w", err)
	}
	out := cs[:0]
	for _, c := range cs {
		lines := strings.Split(c.content, "\n")
		for i, l := range lines {
			if re.MatchString(l) {
				// Narrow the chunk to the first matching line with context.
				from, to := max(0, i-2), min(len(lines)-1, i+2)
				c.content = strings.Join(lines[from:to+1], "\n")
				c.lineStart, c.lineEnd = c.lineStart+from, c.lineStart+to
				c.score = 1
				out = append(out, c)
				break
			}
		}
	}
	return out, nil
}

// chunksByID loads the chunks of semantic hits that pass the filters, in
// the hits' order, scored by similarity.
func (s store) chunksByID(ctx context.Context, tenant string, near []vectorHit, f filters) ([]candidate, error) {
	byRepo := map[string][]string{}
	for _, h := range near {
		byRepo[h.repoID] = append(byRepo[h.repoID], h.id)
	}
	found := map[string]candidate{}
	for repo, ids := range byRepo {
		rows, err := s.db.Query(ctx, `SELECT `+candidateColumns+` FROM chunks
			WHERE `+filterSQL+` AND id = ANY($6)`, tenant, repoParams([]string{repo}), f.language, f.kind, f.pathRegex, ids)
		if err != nil {
			return nil, fmt.Errorf("load semantic hits: %w", err)
		}
		cs, err := scanCandidates(rows, false)
		if err != nil {
			return nil, fmt.Errorf("load semantic hits: %w", err)
		}
		for _, c := range cs {
			found[c.repoID+"/"+c.id] = c
		}
	}
	out := make([]candidate, 0, len(found))
	for _, h := range near {
		if c, ok := found[h.repoID+"/"+h.id]; ok {
			c.score = float64(h.score)
			out = append(out, c)
			if len(out) == semanticCandidates {
				break
			}
		}
	}
	return out, nil
}

// repoGenerations returns the index generation of each repository, for
// cache keys.
func (s store) repoGenerations(ctx context.Context, tenant string, repos []string) (string, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text, generation FROM repositories
		WHERE tenant_id = $1 AND ($2::uuid[] IS NULL OR id = ANY($2)) ORDER BY id`, tenant, nilIfEmpty(repos))
	if err != nil {
		return "", fmt.Errorf("read generations: %w", err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id string
		var g int64
		if err := rows.Scan(&id, &g); err != nil {
			return "", fmt.Errorf("read generations: %w", err)
		}
		fmt.Fprintf(&b, "%s:%d,", id, g)
	}
	return b.String(), rows.Err()
}

func nilIfEmpty(ids []string) []pgtype.UUID {
	if len(ids) == 0 {
		return nil
	}
	return repoParams(ids)
}

// cachedHit is a hit as stored in the intent cache.
type cachedHit struct {
	Repo, Path, Snippet, Symbol, Kind, Language string
	Start, End                                  int
	Score                                       float64
}

type cachedResult struct {
	Hits      []cachedHit
	Tokens    int
	Truncated bool
}

// cachedSearch answers from the Redis intent cache (F-24) when the same
// search ran against the same index generations, else searches and stores
// the answer. A reindex bumps the generation, so stale answers are never
// served. Cache failures only cost the cache.
func (s *Service) cachedSearch(ctx context.Context, tenant string, sr searchRequest, origin string) (searchResult, error) {
	if s.redis == nil || s.cfg.CacheTTL <= 0 {
		return s.runSearch(ctx, tenant, sr, origin)
	}
	gens, err := s.store.repoGenerations(ctx, tenant, sr.repos)
	if err != nil {
		return searchResult{}, err
	}
	raw, _ := json.Marshal([]any{tenant, gens, sr.query, int32(sr.mode), sr.repos, sr.limit, sr.pathGlob, sr.language, sr.kind, sr.budget, s.embedder.Name()})
	sum := sha256.Sum256(raw)
	key := s.redis.Key("librarian", "search", hex.EncodeToString(sum[:16]))
	if data, err := s.redis.Get(ctx, key).Bytes(); err == nil {
		var cr cachedResult
		if json.Unmarshal(data, &cr) == nil {
			s.metrics.cache.WithLabelValues("hit").Inc()
			out := searchResult{tokens: cr.Tokens, truncated: cr.Truncated}
			for _, h := range cr.Hits {
				out.hits = append(out.hits, hit{repoID: h.Repo, path: h.Path, lineStart: h.Start, lineEnd: h.End,
					snippet: h.Snippet, score: h.Score, symbol: h.Symbol, kind: h.Kind, language: h.Language})
			}
			return out, nil
		}
	} else if !errors.Is(err, redis.Nil) {
		s.log.WarnContext(ctx, "read search cache", "error", err.Error())
	}
	s.metrics.cache.WithLabelValues("miss").Inc()
	res, err := s.runSearch(ctx, tenant, sr, origin)
	if err != nil {
		return res, err
	}
	cr := cachedResult{Tokens: res.tokens, Truncated: res.truncated}
	for _, h := range res.hits {
		cr.Hits = append(cr.Hits, cachedHit{Repo: h.repoID, Path: h.path, Snippet: h.snippet, Symbol: h.symbol,
			Kind: h.kind, Language: h.language, Start: h.lineStart, End: h.lineEnd, Score: h.score})
	}
	if data, err := json.Marshal(cr); err == nil {
		if err := s.storeCached(ctx, tenant, sr, key, data); err != nil {
			s.log.WarnContext(ctx, "write search cache", "error", err.Error())
		}
	}
	return res, nil
}

// cacheIndexKey is the Redis set naming the cached answers that searched
// a repository, so that a re-index can delete them.
func (s *Service) cacheIndexKey(tenant, repoID string) string {
	return s.redis.Key("librarian", "search-keys", tenant, repoID)
}

// storeCached writes an answer with its intent's lifetime and records it
// under every repository it searched.
func (s *Service) storeCached(ctx context.Context, tenant string, sr searchRequest, key string, data []byte) error {
	repos := sr.repos
	if len(repos) == 0 {
		all, err := s.store.tenantRepos(ctx, tenant)
		if err != nil {
			return err
		}
		repos = all
	}
	_, err := s.redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, data, s.cacheTTL(sr))
		for _, r := range repos {
			p.SAdd(ctx, s.cacheIndexKey(tenant, r), key)
		}
		return nil
	})
	return err
}

// invalidateCache deletes the cached answers that searched a repository
// (after a re-index changed it). Answers stored meanwhile are keyed by
// the old index generation and can no longer be read either.
func (s *Service) invalidateCache(ctx context.Context, tenant, repoID string) {
	if s.redis == nil {
		return
	}
	idx := s.cacheIndexKey(tenant, repoID)
	keys, err := s.redis.SMembers(ctx, idx).Result()
	if err != nil {
		s.log.WarnContext(ctx, "read search cache index", "error", err.Error())
		return
	}
	for start := 0; start < len(keys); start += 500 {
		if err := s.redis.Unlink(ctx, keys[start:min(start+500, len(keys))]...).Err(); err != nil {
			s.log.WarnContext(ctx, "invalidate search cache", "error", err.Error())
			return
		}
	}
	if err := s.redis.Unlink(ctx, idx).Err(); err != nil {
		s.log.WarnContext(ctx, "invalidate search cache", "error", err.Error())
	}
}

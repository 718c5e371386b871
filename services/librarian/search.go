package librarian

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// Snippet bounds.
const (
	snippetLines = 5
	snippetChars = 400
)

// errNoTerms means a query holds nothing searchable.
var errNoTerms = errors.New("query has no searchable words")

// hit is one ranked search result.
type hit struct {
	repoID    string
	path      string
	lineStart int
	lineEnd   int
	snippet   string
	score     float64
	symbol    string
	kind      string
	language  string
}

// searchRequest is a validated search.
type searchRequest struct {
	query    string
	mode     librarianv1.SearchMode
	repos    []string
	limit    int
	pathGlob string
	language string
	kind     string
	budget   int
	// intent sets the answer's lifetime in the intent cache; empty
	// classifies the query.
	intent intent
}

// searchResult is a search's answer.
type searchResult struct {
	hits      []hit
	tokens    int
	truncated bool
}

// search answers a plain query in hybrid mode with the default budget
// (used by the inbox).
func (s *Service) search(ctx context.Context, tenant, text string, repos []string, limit int, origin string) ([]hit, error) {
	res, err := s.cachedSearch(ctx, tenant, searchRequest{query: text, repos: repos, limit: limit, budget: s.cfg.SearchTokenBudget}, origin)
	return res.hits, err
}

// Candidate list sizes per retriever.
const (
	lexicalCandidates  = 100
	semanticCandidates = 100
)

// runSearch retrieves, fuses and cuts hits to the limit and budget.
func (s *Service) runSearch(ctx context.Context, tenant string, sr searchRequest, origin string) (searchResult, error) {
	start := time.Now()
	defer func() { s.metrics.searchDuration.WithLabelValues(origin).Observe(time.Since(start).Seconds()) }()
	repos := sr.repos
	if len(repos) == 0 {
		all, err := s.store.tenantRepos(ctx, tenant)
		if err != nil {
			return searchResult{}, err
		}
		repos = all
	}
	if len(repos) == 0 {
		return searchResult{}, nil
	}
	pq := parseQuery(sr.query)
	// Repositories whose term filter rules out every word of the query are
	// not searched; when none is left the answer is no_matches at once.
	repos = s.filterRepos(tenant, repos, pq, sr.mode)
	if len(repos) == 0 {
		return searchResult{}, nil
	}
	f := filters{repos: repos, language: sr.language, kind: sr.kind, pathRegex: globRegex(sr.pathGlob)}
	var cands []candidate
	switch sr.mode {
	case librarianv1.SearchMode_SEARCH_MODE_REGEX:
		c, err := s.store.regexChunks(ctx, tenant, sr.query, f, sr.limit*3)
		if err != nil {
			return searchResult{}, err
		}
		cands = c
	case librarianv1.SearchMode_SEARCH_MODE_LEXICAL:
		if len(pq.terms) == 0 {
			return searchResult{}, errNoTerms
		}
		c, err := s.store.lexicalChunks(ctx, tenant, pq, f, lexicalCandidates)
		if err != nil {
			return searchResult{}, err
		}
		cands = s.fuse(pq, c, nil)
	case librarianv1.SearchMode_SEARCH_MODE_SEMANTIC:
		c, err := s.semantic(ctx, tenant, sr.query, f)
		if err != nil {
			return searchResult{}, err
		}
		cands = demoteAncillary(pq, c)
	default:
		if len(pq.terms) == 0 {
			return searchResult{}, errNoTerms
		}
		// The two retrievers run side by side.
		type semResult struct {
			cands []candidate
			err   error
		}
		semCh := make(chan semResult, 1)
		go func() {
			c, err := s.semantic(ctx, tenant, sr.query, f)
			semCh <- semResult{c, err}
		}()
		lex, lexErr := s.store.lexicalChunks(ctx, tenant, pq, f, lexicalCandidates)
		sem := <-semCh
		if lexErr != nil {
			return searchResult{}, lexErr
		}
		if sem.err != nil {
			return searchResult{}, sem.err
		}
		cands = s.fuse(pq, lex, sem.cands)
	}
	return cutHits(cands, pq, sr.limit, sr.budget), nil
}

// semantic embeds the query and returns the nearest chunks that pass the
// filters, best first.
func (s *Service) semantic(ctx context.Context, tenant, query string, f filters) ([]candidate, error) {
	vecs, err := s.embedder.Embed(ctx, []string{query})
	if err != nil {
		return nil, fmt.Errorf("embed query: %w", err)
	}
	k := semanticCandidates
	if f.language != "" || f.kind != "" || f.pathRegex != "" {
		k *= 3
	}
	near := s.vectors.search(tenant, f.repos, vecs[0], k)
	kept := near[:0]
	for _, h := range near {
		if float64(h.score) >= s.cfg.SemanticMinScore {
			kept = append(kept, h)
		}
	}
	near = kept
	sort.Slice(near, func(i, j int) bool { return near[i].score > near[j].score })
	if len(near) == 0 {
		return nil, nil
	}
	return s.store.chunksByID(ctx, tenant, near, f)
}

// cutHits turns ranked candidates into hits: overlapping spans of one file
// merge into the better hit, and hits stop at the limit or when the next
// snippet would pass the token budget (4 characters a token).
func cutHits(cands []candidate, pq parsedQuery, limit, budget int) searchResult {
	type span struct{ start, end int }
	taken := map[string][]span{}
	var res searchResult
	for _, c := range cands {
		if len(res.hits) == limit {
			res.truncated = res.truncated || false
			break
		}
		snippet, from, to := bestSnippet(c.content, c.lineStart, pq)
		key := c.repoID + "\x00" + c.path
		overlaps := false
		for _, sp := range taken[key] {
			if from <= sp.end && sp.start <= to {
				overlaps = true
				break
			}
		}
		if overlaps {
			continue
		}
		cost := (len(snippet) + 3) / 4
		if res.tokens+cost > budget {
			res.truncated = true
			break
		}
		res.tokens += cost
		taken[key] = append(taken[key], span{from, to})
		res.hits = append(res.hits, hit{
			repoID: c.repoID, path: c.path, lineStart: c.lineStart, lineEnd: c.lineEnd,
			snippet: snippet, score: c.score, symbol: c.symbol, kind: c.kind, language: c.language,
		})
	}
	return res
}

// globRegex converts a path glob to an anchored POSIX regular expression:
// "**" spans directories, "*" and "?" stay within one.
func globRegex(glob string) string {
	if glob == "" {
		return ""
	}
	// A wildcard right after one that already covers it adds nothing, and
	// the database's regular expressions grow costly with every adjacent
	// one: "**/**/" is "**/", and "**" or "*" after "**" or "*" is dropped.
	const (
		other = iota
		anyDirs
		anyPath
		anyName
	)
	last := other
	var b strings.Builder
	b.WriteString("^")
	if !strings.Contains(glob, "/") {
		b.WriteString("(.*/)?")
		last = anyDirs
	}
	// Runes, not bytes: a byte of a multi-byte character quoted alone
	// would name another character.
	runes := []rune(glob)
	for i := 0; i < len(runes); i++ {
		c := runes[i]
		switch {
		case c == '*' && i+1 < len(runes) && runes[i+1] == '*':
			i++
			if i+1 < len(runes) && runes[i+1] == '/' {
				i++
				if last != anyDirs && last != anyPath {
					b.WriteString("(.*/)?")
					last = anyDirs
				}
			} else if last != anyPath {
				b.WriteString(".*")
				last = anyPath
			}
		case c == '*':
			if last != anyPath && last != anyName {
				b.WriteString("[^/]*")
				last = anyName
			}
		case c == '?':
			b.WriteString("[^/]")
			last = other
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
			last = other
		}
	}
	b.WriteString("$")
	return b.String()
}

// bestSnippet picks the window of at most snippetLines lines of content
// (whose first line is firstLine) that matches the query best, at most
// snippetChars characters, and returns it with its line range.
func bestSnippet(content string, firstLine int, pq parsedQuery) (string, int, int) {
	lines := strings.Split(content, "\n")
	// A line token matches a term when their stems meet, as in the index.
	stems := make(map[string]bool, len(pq.terms))
	for _, t := range pq.terms {
		stems[lexStem(t)] = true
	}
	scores := make([]int, len(lines))
	for i, l := range lines {
		for t := range tokenSet(l) {
			if stems[lexStem(t)] {
				scores[i]++
			}
		}
		for _, ident := range pq.identifiers {
			if strings.Contains(l, ident) {
				scores[i] += 2
			}
		}
	}
	width := min(snippetLines, len(lines))
	best, bestScore, sum := 0, -1, 0
	for i := range lines {
		sum += scores[i]
		if i >= width {
			sum -= scores[i-width]
		}
		if i >= width-1 && sum > bestScore {
			best, bestScore = i-width+1, sum
		}
	}
	from := best
	// Start at the first matching line of the window when there is one, so
	// the snippet opens on what matched and shows what follows it.
	for from < best+width-1 && scores[from] == 0 && bestScore > 0 {
		from++
	}
	to := min(from+width, len(lines)) - 1
	for from < to && strings.TrimSpace(lines[to]) == "" {
		to--
	}
	var b strings.Builder
	used := 0
	last := from
	for i := from; i <= to; i++ {
		l := lines[i]
		n := utf8.RuneCountInString(l) + 1
		if i == from {
			if n-1 > snippetChars {
				l = truncateRunes(l, snippetChars-1)
			}
		} else if used+n > snippetChars {
			break
		} else {
			b.WriteByte('\n')
		}
		b.WriteString(l)
		used += n
		last = i
	}
	return b.String(), firstLine + from, firstLine + last
}

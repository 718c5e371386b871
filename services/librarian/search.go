package librarian

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/identity"
)

// Snippet bounds.
const (
	snippetLines = 5
	snippetChars = 400
)

// maxCandidates bounds the chunks ranked by the database for one search;
// more than the page is fetched so that overlapping chunks can be merged.
const maxCandidates = 300

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
}

// SearchCode ranks the tenant's indexed chunks against a query.
func (s *Service) SearchCode(ctx context.Context, req *librarianv1.SearchCodeRequest) (*librarianv1.SearchCodeResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	query := strings.TrimSpace(req.GetQuery())
	switch {
	case query == "":
		return nil, invalid("query", "required")
	case !utf8.ValidString(query):
		return nil, invalid("query", "must be valid UTF-8")
	case utf8.RuneCountInString(query) > s.cfg.MaxQueryChars:
		return nil, invalid("query", "must be at most %d characters", s.cfg.MaxQueryChars)
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, invalid("page_size", "must not be negative")
	case size == 0:
		size = s.cfg.DefaultPageSize
	case size > s.cfg.MaxPageSize:
		size = s.cfg.MaxPageSize
	}
	if len(req.GetRepositories()) > maxSearchRepos {
		return nil, invalid("repositories", "at most %d repositories", maxSearchRepos)
	}
	var repos []string
	seen := map[string]bool{}
	for _, name := range req.GetRepositories() {
		rid, err := parseName(name, "repositories")
		if err != nil {
			return nil, err
		}
		if !seen[rid] {
			seen[rid] = true
			repos = append(repos, rid)
		}
	}
	if len(repos) > 0 {
		found, err := s.store.existingRepos(ctx, id.TenantID, repos)
		if err != nil {
			return nil, toStatus(ctx, s.log, "search code", err)
		}
		for _, rid := range repos {
			if !found[rid] {
				return nil, status.Errorf(codes.NotFound, "repositories: %s%s not found", repositoryPrefix, rid)
			}
		}
	}
	hits, err := s.search(ctx, id.TenantID, query, repos, size, "rpc")
	if errors.Is(err, errNoTerms) {
		return nil, invalid("query", "contains no searchable words")
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, "search code", err)
	}
	resp := &librarianv1.SearchCodeResponse{Hits: make([]*librarianv1.CodeHit, 0, len(hits))}
	for _, h := range hits {
		resp.Hits = append(resp.Hits, &librarianv1.CodeHit{
			Repository: repositoryPrefix + h.repoID,
			Path:       h.path,
			LineStart:  int32(h.lineStart),
			LineEnd:    int32(h.lineEnd),
			Snippet:    h.snippet,
			Score:      h.score,
		})
	}
	return resp, nil
}

// search returns up to limit hits for text in the tenant's chunks (in repos
// when non-empty), best first. Chunks whose best lines overlap a better
// hit's in the same file are merged into it.
func (s *Service) search(ctx context.Context, tenant, text string, repos []string, limit int, origin string) ([]hit, error) {
	start := time.Now()
	defer func() { s.metrics.searchDuration.WithLabelValues(origin).Observe(time.Since(start).Seconds()) }()
	pq := parseQuery(text)
	if len(pq.terms) == 0 {
		return nil, errNoTerms
	}
	cands, err := s.store.searchChunks(ctx, tenant, tsQuery(pq.terms), pq.identifiers, repos, min(limit*3, maxCandidates))
	if err != nil {
		return nil, err
	}
	type span struct{ start, end int }
	taken := map[string][]span{}
	hits := make([]hit, 0, limit)
	for _, c := range cands {
		if len(hits) == limit {
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
		taken[key] = append(taken[key], span{from, to})
		hits = append(hits, hit{
			repoID:    c.repoID,
			path:      c.path,
			lineStart: c.lineStart,
			lineEnd:   c.lineEnd,
			snippet:   snippet,
			score:     c.score,
		})
	}
	return hits, nil
}

// bestSnippet picks the window of at most snippetLines lines of content
// (whose first line is firstLine) that matches the query best, at most
// snippetChars characters, and returns it with its line range.
func bestSnippet(content string, firstLine int, pq parsedQuery) (string, int, int) {
	lines := strings.Split(content, "\n")
	terms := make(map[string]bool, len(pq.terms))
	for _, t := range pq.terms {
		terms[t] = true
	}
	scores := make([]int, len(lines))
	for i, l := range lines {
		for t := range tokenSet(l) {
			if terms[t] {
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

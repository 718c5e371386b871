package librarian

import (
	"context"
	"errors"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// noMatchesHint is what a search that found nothing suggests (G-14).
const noMatchesHint = "No code matches this query. Consider searching history or academic."

// SearchCode ranks the tenant's indexed chunks against a query.
func (s *Service) SearchCode(ctx context.Context, req *librarianv1.SearchCodeRequest) (*librarianv1.SearchCodeResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sr, err := s.searchRequestOf(req)
	if err != nil {
		return nil, err
	}
	if sr.repos, err = s.searchRepos(ctx, id.TenantID, req.GetRepositories()); err != nil {
		return nil, err
	}
	res, err := s.cachedSearch(ctx, id.TenantID, sr, "rpc")
	switch {
	case errors.Is(err, errNoTerms):
		return nil, apierr.Invalid("query", "contains no searchable words")
	case errors.Is(err, errBadRegex):
		return nil, apierr.Invalid("query", "uses regular expression syntax the index does not support")
	case err != nil:
		return nil, apierr.Status(ctx, s.log, "search code", err)
	}
	resp, err := s.searchResponse(ctx, id.TenantID, sr, res)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "search code", err)
	}
	return resp, nil
}

// searchRequestOf checks a search's fields (all but its repositories) and
// returns it validated.
func (s *Service) searchRequestOf(req *librarianv1.SearchCodeRequest) (searchRequest, error) {
	query := strings.TrimSpace(req.GetQuery())
	switch {
	case query == "":
		return searchRequest{}, apierr.Invalid("query", "required")
	case !plainText(query):
		return searchRequest{}, apierr.Invalid("query", "must be valid UTF-8 without NUL")
	case utf8.RuneCountInString(query) > s.cfg.MaxQueryChars:
		return searchRequest{}, apierr.Invalid("query", "must be at most %d characters", s.cfg.MaxQueryChars)
	}
	size, err := pageSize(req.GetPageSize(), s.cfg.DefaultPageSize, s.cfg.MaxPageSize)
	if err != nil {
		return searchRequest{}, err
	}
	budget := int(req.GetTokenBudget())
	switch {
	case budget < 0:
		return searchRequest{}, apierr.Invalid("token_budget", "must not be negative")
	case budget == 0 || budget > s.cfg.SearchTokenBudget:
		budget = s.cfg.SearchTokenBudget
	}
	mode := req.GetMode()
	if _, ok := librarianv1.SearchMode_name[int32(mode)]; !ok {
		return searchRequest{}, apierr.Invalid("mode", "unknown mode %d", mode)
	}
	if mode == librarianv1.SearchMode_SEARCH_MODE_REGEX {
		if _, err := regexp.Compile(query); err != nil {
			return searchRequest{}, apierr.Invalid("query", "is not a valid regular expression: %v", err)
		}
	}
	glob := strings.TrimSpace(req.GetPathGlob())
	if err := checkSearchFilters(glob, req); err != nil {
		return searchRequest{}, err
	}
	intent := intent(strings.ToLower(strings.TrimSpace(req.GetIntent())))
	if _, ok := intentTTLs[intent]; intent != "" && !ok {
		return searchRequest{}, apierr.Invalid("intent", "must be one of locate, pattern, explain, general")
	}
	return searchRequest{query: query, mode: mode, limit: size, pathGlob: glob,
		language: strings.ToLower(strings.TrimSpace(req.GetLanguage())), kind: strings.ToLower(strings.TrimSpace(req.GetSymbolKind())),
		budget: budget, intent: intent}, nil
}

// checkSearchFilters checks a search's path glob, language and symbol
// kind, and how many repositories it names.
func checkSearchFilters(glob string, req *librarianv1.SearchCodeRequest) error {
	if len(glob) > maxPathLen || !plainText(glob) {
		return apierr.Invalid("path_glob", "must be valid UTF-8 without NUL of at most %d bytes", maxPathLen)
	}
	if !plainText(req.GetLanguage()) {
		return apierr.Invalid("language", "must be valid UTF-8 without NUL")
	}
	if !plainText(req.GetSymbolKind()) {
		return apierr.Invalid("symbol_kind", "must be valid UTF-8 without NUL")
	}
	if glob != "" {
		if _, err := path.Match(strings.ReplaceAll(glob, "**", "*"), ""); err != nil {
			return apierr.Invalid("path_glob", "is not a valid glob")
		}
	}
	if len(req.GetRepositories()) > maxSearchRepos {
		return apierr.Invalid("repositories", "at most %d repositories", maxSearchRepos)
	}
	return nil
}

// searchRepos returns the ids of the repositories a search names, each
// once; every one must be the tenant's.
func (s *Service) searchRepos(ctx context.Context, tenant string, names []string) ([]string, error) {
	var repos []string
	seen := map[string]bool{}
	for _, name := range names {
		rid, err := parseName(name, "repositories")
		if err != nil {
			return nil, err
		}
		if !seen[rid] {
			seen[rid] = true
			repos = append(repos, rid)
		}
	}
	if len(repos) == 0 {
		return nil, nil
	}
	found, err := s.store.existingRepos(ctx, tenant, repos)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "search code", err)
	}
	for _, rid := range repos {
		if !found[rid] {
			return nil, repositoryNotFound(rid)
		}
	}
	return repos, nil
}

// searchResponse is the answer to sr: its hits, the other repositories
// holding the query's words, and a hint when nothing matched.
func (s *Service) searchResponse(ctx context.Context, tenant string, sr searchRequest, res searchResult) (*librarianv1.SearchCodeResponse, error) {
	resp := &librarianv1.SearchCodeResponse{Hits: make([]*librarianv1.CodeHit, 0, len(res.hits)), Status: "ok",
		Tokens: int32(res.tokens), Truncated: res.truncated}
	if sr.mode != librarianv1.SearchMode_SEARCH_MODE_REGEX && len(sr.repos) > 0 {
		also, err := s.alsoExistsIn(ctx, tenant, sr.repos, parseQuery(sr.query))
		if err != nil {
			return nil, err
		}
		for _, r := range also {
			resp.AlsoExistsIn = append(resp.AlsoExistsIn, repositoryPrefix+r)
		}
		if len(also) > 0 {
			resp.Suggestions = append(resp.Suggestions, "Related content in: "+strings.Join(resp.AlsoExistsIn, ", "))
		}
	}
	if len(res.hits) == 0 {
		resp.Status, resp.Hint = "no_matches", noMatchesHint
		if sr.pathGlob != "" || sr.language != "" || sr.kind != "" {
			resp.Hint += " Loosen the path_glob, language or symbol_kind filters."
		}
		if len(resp.AlsoExistsIn) > 0 {
			resp.Hint += " Its words appear in " + strings.Join(resp.AlsoExistsIn, ", ") + "."
		}
	}
	for _, h := range res.hits {
		resp.Hits = append(resp.Hits, &librarianv1.CodeHit{
			Repository: repositoryPrefix + h.repoID,
			Path:       h.path,
			LineStart:  int32(h.lineStart),
			LineEnd:    int32(h.lineEnd),
			Snippet:    h.snippet,
			Score:      h.score,
			Symbol:     h.symbol,
			SymbolKind: h.kind,
			Language:   h.language,
		})
	}
	return resp, nil
}

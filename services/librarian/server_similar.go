package librarian

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/embed"
	"sylk.dev/sylk/pkg/identity"
)

// Similar symbol bounds.
const (
	defaultSimilarSymbols = 10
	maxSimilarSymbols     = 50
)

// errNoSymbolChunk means a symbol resolves to no indexed chunk.
var errNoSymbolChunk = errors.New("symbol not found")

// FindSimilarSymbols returns the symbols whose chunks are nearest to the
// given symbol's chunk in the semantic index, across the tenant's
// repositories (G-16 find_similar_symbols).
func (s *Service) FindSimilarSymbols(ctx context.Context, req *librarianv1.FindSimilarSymbolsRequest) (*librarianv1.FindSimilarSymbolsResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultSimilarSymbols, maxSimilarSymbols)
	if err != nil {
		return nil, err
	}
	repoID, err := s.symbolTarget(ctx, id.TenantID, req.GetRepository(), req.GetSymbol(), "symbol")
	if err != nil {
		return nil, err
	}
	src, vec, err := s.store.symbolChunk(ctx, id.TenantID, repoID, req.GetSymbol(), s.embedder.Name())
	if errors.Is(err, errNoSymbolChunk) {
		return nil, apierr.NotFound("symbol", strconv.Quote(req.GetSymbol())).Withf("symbol: %q is not indexed in %s%s", req.GetSymbol(), repositoryPrefix, repoID)
	}
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "find similar symbols", err)
	}
	repos, err := s.store.tenantRepos(ctx, id.TenantID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "find similar symbols", err)
	}
	// Ask for more neighbours than wanted: the symbol itself, chunks that
	// define nothing and, with same_kind_only, other kinds are left out.
	k := size*3 + 1
	if req.GetSameKindOnly() {
		k = size*6 + 1
	}
	near := s.vectors.search(id.TenantID, repos, vec, k)
	sort.SliceStable(near, func(i, j int) bool { return near[i].score > near[j].score })
	f := filters{repos: repos}
	if req.GetSameKindOnly() {
		f.kind = src.kind
	}
	cands, err := s.store.chunksByID(ctx, id.TenantID, near, f)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "find similar symbols", err)
	}
	resp := &librarianv1.FindSimilarSymbolsResponse{Source: similarSymbol(src, 1)}
	seen := map[string]bool{src.repoID + "/" + src.symbol: true}
	for _, c := range cands {
		if len(resp.Symbols) == size {
			break
		}
		if c.symbol == "" || c.kind == kindImports || c.repoID == src.repoID && c.id == src.id || seen[c.repoID+"/"+c.symbol] {
			continue
		}
		seen[c.repoID+"/"+c.symbol] = true
		resp.Symbols = append(resp.Symbols, similarSymbol(c, c.score))
	}
	return resp, nil
}

func similarSymbol(c candidate, score float64) *librarianv1.SimilarSymbol {
	return &librarianv1.SimilarSymbol{
		Repository: repositoryPrefix + c.repoID,
		Symbol:     c.symbol,
		SymbolKind: c.kind,
		Path:       c.path,
		LineStart:  int32(c.lineStart),
		LineEnd:    int32(c.lineEnd),
		Language:   c.language,
		Score:      score,
	}
}

// symbolChunk resolves a symbol id or name to the chunk that defines it
// and that chunk's embedding: through the symbol table (Go) to the chunk
// holding the definition's first line, else by the chunks' own symbol
// names.
func (s store) symbolChunk(ctx context.Context, tenant, repoID, symbol, model string) (candidate, []float32, error) {
	row := s.db.QueryRow(ctx, `WITH def AS (
			SELECT path, line_start FROM symbols
			WHERE tenant_id = $1 AND repository_id = $2 AND (id = $3 OR name = $3)
			ORDER BY (id = $3) DESC, path, line_start LIMIT 1)
		SELECT `+prefixed("c.", candidateColumns)+`, c.embedding, c.model FROM chunks c
		LEFT JOIN def ON c.path = def.path AND c.line_start <= def.line_start AND c.line_end >= def.line_start
		WHERE c.tenant_id = $1 AND c.repository_id = $2
		  AND (def.path IS NOT NULL OR c.symbol = $3 OR $3 = ANY(string_to_array(c.names, ' ')))
		  AND (def.path IS NOT NULL OR NOT EXISTS (SELECT 1 FROM def))
		ORDER BY (c.symbol = $3) DESC, (c.symbol <> '') DESC, c.line_end - c.line_start, c.path, c.line_start
		LIMIT 1`, tenant, uuidParam(repoID), symbol)
	var c candidate
	var names string
	var emb []byte
	var chunkModel string
	err := row.Scan(&c.repoID, &c.id, &c.path, &c.language, &c.lineStart, &c.lineEnd, &c.symbol, &c.kind, &names, &c.content, &emb, &chunkModel)
	if errors.Is(err, pgx.ErrNoRows) {
		return candidate{}, nil, errNoSymbolChunk
	}
	if err != nil {
		return candidate{}, nil, fmt.Errorf("resolve symbol: %w", err)
	}
	if chunkModel != model {
		return candidate{}, nil, apierr.FailedPrecondition(reasonEmbeddingStale,
			"symbol: the chunk of %q was embedded by another model; index the repository again", symbol)
	}
	vec, err := embed.Decode(emb)
	if err != nil {
		return candidate{}, nil, fmt.Errorf("decode embedding: %w", err)
	}
	return c, vec, nil
}

// prefixed qualifies each column of a comma-separated list.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

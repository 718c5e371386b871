package librarian

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// Symbol query limits.
const (
	maxSymbolLen    = 1000
	maxSymbolResult = 1000
	maxSourceLines  = 400
)

// symbolTarget validates the repository and symbol of a symbol request and
// returns the repository id.
func (s *Service) symbolTarget(ctx context.Context, tenant, repoName, symbol, field string) (string, error) {
	repoID, err := parseName(repoName, "repository")
	if err != nil {
		return "", err
	}
	switch {
	case strings.TrimSpace(symbol) == "":
		return "", apierr.Invalid(field, "required")
	case len(symbol) > maxSymbolLen || !plainText(symbol):
		return "", apierr.Invalid(field, "must be valid UTF-8 without NUL of at most %d bytes", maxSymbolLen)
	}
	if _, err := s.store.getRepo(ctx, tenant, repoID); err != nil {
		return "", apierr.Status(ctx, s.log, "look up repository", err)
	}
	return repoID, nil
}

func edgeKindOK(k string) bool { return k == "" || slices.Contains(edgeKinds, k) }

// GetSymbol returns one definition by qualified name.
func (s *Service) GetSymbol(ctx context.Context, req *librarianv1.GetSymbolRequest) (*librarianv1.GetSymbolResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	repoID, err := s.symbolTarget(ctx, id.TenantID, req.GetRepository(), req.GetSymbol(), "symbol")
	if err != nil {
		return nil, err
	}
	rows, err := s.store.db.Query(ctx, `SELECT `+symbolColumns+` FROM symbols
		WHERE tenant_id = $1 AND repository_id = $2 AND (id = $3 OR name = $3)
		ORDER BY (id = $3) DESC, path, line_start LIMIT 1`, id.TenantID, uuidParam(repoID), req.GetSymbol())
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get symbol", err)
	}
	syms, err := pgx.CollectRows(rows, scanSymbol)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get symbol", err)
	}
	if len(syms) == 0 {
		return nil, apierr.NotFound("symbol", strconv.Quote(truncateRunes(req.GetSymbol(), 100)))
	}
	sym := syms[0]
	if req.GetIncludeSource() {
		src, err := s.symbolSource(ctx, id.TenantID, repoID, sym)
		if err != nil {
			return nil, apierr.Status(ctx, s.log, "get symbol", err)
		}
		sym.Source = src
	}
	return &librarianv1.GetSymbolResponse{Symbol: sym}, nil
}

// symbolSource reads the lines of a definition from the indexed chunks.
func (s *Service) symbolSource(ctx context.Context, tenant, repoID string, sym *librarianv1.Symbol) (string, error) {
	rows, err := s.store.db.Query(ctx, `SELECT line_start, content FROM chunks
		WHERE tenant_id = $1 AND repository_id = $2 AND path = $3 AND line_end >= $4 AND line_start <= $5
		ORDER BY line_start`, tenant, uuidParam(repoID), sym.GetPath(), sym.GetLineStart(), sym.GetLineEnd())
	if err != nil {
		return "", fmt.Errorf("read symbol source: %w", err)
	}
	defer rows.Close()
	lines := map[int]string{}
	for rows.Next() {
		var start int32
		var content string
		if err := rows.Scan(&start, &content); err != nil {
			return "", fmt.Errorf("read symbol source: %w", err)
		}
		for i, l := range strings.Split(content, "\n") {
			lines[int(start)+i] = l
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read symbol source: %w", err)
	}
	var b strings.Builder
	end := min(int(sym.GetLineEnd()), int(sym.GetLineStart())+maxSourceLines-1)
	for n := int(sym.GetLineStart()); n <= end; n++ {
		if n > int(sym.GetLineStart()) {
			b.WriteByte('\n')
		}
		b.WriteString(lines[n])
	}
	return b.String(), nil
}

// GetFileSymbols lists the definitions of one file, in line order.
func (s *Service) GetFileSymbols(ctx context.Context, req *librarianv1.GetFileSymbolsRequest) (*librarianv1.GetFileSymbolsResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if p := req.GetPath(); p != "" && !validRelPath(p) {
		return nil, apierr.Invalid("path", "must be a clean relative path inside the repository")
	}
	if !plainText(req.GetKind()) {
		return nil, apierr.Invalid("kind", "must be valid UTF-8 without NUL")
	}
	repoID, err := s.symbolTarget(ctx, id.TenantID, req.GetRepository(), req.GetPath(), "path")
	if err != nil {
		return nil, err
	}
	rows, err := s.store.db.Query(ctx, `SELECT `+symbolColumns+` FROM symbols
		WHERE tenant_id = $1 AND repository_id = $2 AND path = $3 AND ($4 = '' OR kind = $4)
		ORDER BY line_start, id LIMIT $5`, id.TenantID, uuidParam(repoID), req.GetPath(), req.GetKind(), maxSymbolResult)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get file symbols", err)
	}
	syms, err := pgx.CollectRows(rows, scanSymbol)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get file symbols", err)
	}
	return &librarianv1.GetFileSymbolsResponse{Symbols: syms}, nil
}

// GetDependencies lists a symbol's (or file's) outgoing edges.
func (s *Service) GetDependencies(ctx context.Context, req *librarianv1.GetDependenciesRequest) (*librarianv1.GetDependenciesResponse, error) {
	edges, err := s.edges(ctx, req.GetRepository(), req.GetSymbol(), req.GetEdgeKind(), "source")
	if err != nil {
		return nil, err
	}
	return &librarianv1.GetDependenciesResponse{Edges: edges}, nil
}

// GetDependents lists a symbol's (or import path's) incoming edges. A
// method is also matched by unresolved calls of its name ("*.Name").
func (s *Service) GetDependents(ctx context.Context, req *librarianv1.GetDependentsRequest) (*librarianv1.GetDependentsResponse, error) {
	edges, err := s.edges(ctx, req.GetRepository(), req.GetSymbol(), req.GetEdgeKind(), "target")
	if err != nil {
		return nil, err
	}
	return &librarianv1.GetDependentsResponse{Edges: edges}, nil
}

func (s *Service) edges(ctx context.Context, repoName, symbol, kind, column string) ([]*librarianv1.Edge, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if !edgeKindOK(kind) {
		return nil, apierr.Invalid("edge_kind", "must be one of %s, or empty", strings.Join(edgeKinds, ", "))
	}
	repoID, err := s.symbolTarget(ctx, id.TenantID, repoName, symbol, "symbol")
	if err != nil {
		return nil, err
	}
	targets := []string{symbol}
	if column == "target" {
		// A method "pkg.Recv.Name" is also called as "*.Name" where the
		// receiver's type was not resolved.
		var kindOf string
		err := s.store.db.QueryRow(ctx, `SELECT kind FROM symbols WHERE tenant_id = $1 AND repository_id = $2 AND id = $3 LIMIT 1`,
			id.TenantID, uuidParam(repoID), symbol).Scan(&kindOf)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, apierr.Status(ctx, s.log, "list edges", err)
		}
		if kindOf == kindMethod {
			targets = append(targets, "*."+symbol[strings.LastIndex(symbol, ".")+1:])
		}
	}
	rows, err := s.store.db.Query(ctx, `SELECT source, target, kind, path, line FROM edges
		WHERE tenant_id = $1 AND repository_id = $2 AND `+column+` = ANY($3) AND ($4 = '' OR kind = $4)
		ORDER BY path, line, target LIMIT $5`, id.TenantID, uuidParam(repoID), targets, kind, maxSymbolResult)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list edges", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*librarianv1.Edge, error) {
		e := &librarianv1.Edge{}
		err := r.Scan(&e.Source, &e.Target, &e.Kind, &e.Path, &e.Line)
		return e, err
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list edges", err)
	}
	return out, nil
}

const symbolColumns = `id, name, kind, path, package, signature, doc, line_start, line_end`

func scanSymbol(r pgx.CollectableRow) (*librarianv1.Symbol, error) {
	sym := &librarianv1.Symbol{}
	err := r.Scan(&sym.Id, &sym.Name, &sym.Kind, &sym.Path, &sym.Package, &sym.Signature, &sym.Doc, &sym.LineStart, &sym.LineEnd)
	return sym, err
}

package librarian

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Index states as stored.
const (
	statePending  = "PENDING"
	stateIndexing = "INDEXING"
	stateReady    = "READY"
	stateFailed   = "FAILED"
)

// repository is one stored repository.
type repository struct {
	ID          string
	DisplayName string
	Path        string
	State       string
	FileCount   int64
	ChunkCount  int64
	IndexError  string
	CreateTime  time.Time
	IndexTime   *time.Time
}

// indexStats describes one index run.
type indexStats struct {
	filesIndexed int64
	filesSkipped int64
	chunks       int64
	skipped      map[string]int
}

// store holds the librarian's SQL. Every statement is scoped by tenant.
type store struct {
	db *pgxpool.Pool
}

const repoColumns = `id::text, display_name, path, index_state, file_count, chunk_count, index_error, create_time, index_time`

func scanRepo(row pgx.Row) (repository, error) {
	var r repository
	err := row.Scan(&r.ID, &r.DisplayName, &r.Path, &r.State, &r.FileCount, &r.ChunkCount, &r.IndexError, &r.CreateTime, &r.IndexTime)
	return r, err
}

// uuidParam converts a validated id string for binary protocol use.
func uuidParam(id string) pgtype.UUID {
	u, err := uuid.Parse(id)
	if err != nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: u, Valid: true}
}

// insertRepo stores a new repository. A duplicate path for the tenant
// returns errDuplicatePath.
func insertRepo(ctx context.Context, tx pgx.Tx, tenant string, r repository) (repository, error) {
	row := tx.QueryRow(ctx, `INSERT INTO repositories (tenant_id, id, display_name, path, index_state)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant_id, path) DO NOTHING
		RETURNING `+repoColumns,
		tenant, uuidParam(r.ID), r.DisplayName, r.Path, statePending)
	out, err := scanRepo(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return repository{}, errDuplicatePath
	}
	if err != nil {
		return repository{}, fmt.Errorf("insert repository: %w", err)
	}
	return out, nil
}

// repoIDByPath returns the id of the tenant's repository at path.
func (s store) repoIDByPath(ctx context.Context, tenant, path string) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT id::text FROM repositories WHERE tenant_id = $1 AND path = $2`, tenant, path).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errNotFound
	}
	if err != nil {
		return "", fmt.Errorf("look up repository by path: %w", err)
	}
	return id, nil
}

// getRepo returns the tenant's repository id, or errNotFound.
func (s store) getRepo(ctx context.Context, tenant, id string) (repository, error) {
	r, err := scanRepo(s.db.QueryRow(ctx, `SELECT `+repoColumns+` FROM repositories WHERE tenant_id = $1 AND id = $2`,
		tenant, uuidParam(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return repository{}, errNotFound
	}
	if err != nil {
		return repository{}, fmt.Errorf("get repository %s: %w", id, err)
	}
	return r, nil
}

// listRepos returns up to limit of the tenant's repositories with ids after
// after ("" for the first page), oldest first.
func (s store) listRepos(ctx context.Context, tenant, after string, limit int) ([]repository, error) {
	var afterID pgtype.UUID
	if after != "" {
		afterID = uuidParam(after)
	}
	rows, err := s.db.Query(ctx, `SELECT `+repoColumns+` FROM repositories
		WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id > $2)
		ORDER BY id LIMIT $3`, tenant, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (repository, error) { return scanRepo(r) })
	if err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	return out, nil
}

// existingRepos returns which of ids the tenant has.
func (s store) existingRepos(ctx context.Context, tenant string, ids []string) (map[string]bool, error) {
	params := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		params[i] = uuidParam(id)
	}
	rows, err := s.db.Query(ctx, `SELECT id::text FROM repositories WHERE tenant_id = $1 AND id = ANY($2)`, tenant, params)
	if err != nil {
		return nil, fmt.Errorf("check repositories: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check repositories: %w", err)
	}
	set := make(map[string]bool, len(found))
	for _, id := range found {
		set[id] = true
	}
	return set, nil
}

// hasIndexed reports whether the tenant has a repository that was indexed
// successfully at least once.
func (s store) hasIndexed(ctx context.Context, tenant string) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM repositories WHERE tenant_id = $1 AND index_time IS NOT NULL)`, tenant).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check indexed repositories: %w", err)
	}
	return ok, nil
}

// setState records a state change outside an index transaction; msg is the
// index error for FAILED.
func (s store) setState(ctx context.Context, tenant, id, state, msg string) error {
	_, err := s.db.Exec(ctx, `UPDATE repositories SET index_state = $3, index_error = $4 WHERE tenant_id = $1 AND id = $2`,
		tenant, uuidParam(id), state, msg)
	if err != nil {
		return fmt.Errorf("set repository %s %s: %w", id, state, err)
	}
	return nil
}

// Batches are written once they hold this many chunks or bytes of content.
const (
	batchChunks = 1000
	batchBytes  = 8 << 20
)

// replaceIndex swaps the repository's files and chunks for what w reads, in
// tx: readers keep seeing the previous index until tx commits. It marks the
// repository READY with the new counts and returns the updated row.
func replaceIndex(ctx context.Context, tx pgx.Tx, tenant, id string, w *walker) (repository, indexStats, error) {
	repoID := uuidParam(id)
	// Serialise concurrent indexes of one repository on its row.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM repositories WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenant, repoID); err != nil {
		return repository{}, indexStats{}, fmt.Errorf("lock repository: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM files WHERE tenant_id = $1 AND repository_id = $2`, tenant, repoID); err != nil {
		return repository{}, indexStats{}, fmt.Errorf("delete previous index: %w", err)
	}
	var (
		stats     indexStats
		fileRows  [][]any
		chunkRows [][]any
		pending   int
	)
	flush := func() error {
		if len(fileRows) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"files"},
				[]string{"tenant_id", "repository_id", "path", "language", "size_bytes", "line_count", "sha256"},
				pgx.CopyFromRows(fileRows)); err != nil {
				return fmt.Errorf("write files: %w", err)
			}
		}
		if len(chunkRows) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"chunks"},
				[]string{"tenant_id", "repository_id", "path", "language", "line_start", "line_end", "content", "tokens"},
				pgx.CopyFromRows(chunkRows)); err != nil {
				return fmt.Errorf("write chunks: %w", err)
			}
		}
		fileRows, chunkRows, pending = fileRows[:0], chunkRows[:0], 0
		return nil
	}
	err := w.walk(ctx, func(f sourceFile) error {
		fileRows = append(fileRows, []any{tenant, repoID, f.path, f.language, f.size, int32(f.lineCount), f.sha256})
		for _, c := range f.chunks {
			chunkRows = append(chunkRows, []any{tenant, repoID, f.path, f.language, int32(c.lineStart), int32(c.lineEnd), c.content, c.tokens})
			pending += len(c.content) + len(c.tokens)
		}
		stats.filesIndexed++
		stats.chunks += int64(len(f.chunks))
		if len(chunkRows) >= batchChunks || pending >= batchBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		return repository{}, indexStats{}, err
	}
	if err := flush(); err != nil {
		return repository{}, indexStats{}, err
	}
	stats.skipped = w.skipped
	for _, n := range w.skipped {
		stats.filesSkipped += int64(n)
	}
	r, err := scanRepo(tx.QueryRow(ctx, `UPDATE repositories
		SET index_state = $3, index_error = '', file_count = $4, chunk_count = $5, index_time = now()
		WHERE tenant_id = $1 AND id = $2
		RETURNING `+repoColumns, tenant, repoID, stateReady, stats.filesIndexed, stats.chunks))
	if err != nil {
		return repository{}, indexStats{}, fmt.Errorf("mark repository ready: %w", err)
	}
	return r, stats, nil
}

// candidate is one chunk matched by a search, before snippets.
type candidate struct {
	repoID    string
	path      string
	lineStart int
	lineEnd   int
	content   string
	score     float64
}

// identifierBoost is added to a chunk's rank for each query identifier its
// content holds verbatim, so exact names outrank mere word matches.
const identifierBoost = 1.0

// searchChunks ranks the tenant's chunks against query (an OR tsquery),
// restricted to repos when non-empty.
func (s store) searchChunks(ctx context.Context, tenant, query string, identifiers, repos []string, limit int) ([]candidate, error) {
	var repoParam []pgtype.UUID
	if len(repos) > 0 {
		repoParam = make([]pgtype.UUID, len(repos))
		for i, id := range repos {
			repoParam[i] = uuidParam(id)
		}
	}
	if identifiers == nil {
		identifiers = []string{}
	}
	rows, err := s.db.Query(ctx, `
		WITH q AS (SELECT to_tsquery('simple', $2) AS query)
		SELECT c.repository_id::text, c.path, c.line_start, c.line_end, c.content,
		       ts_rank_cd(to_tsvector('simple', c.tokens), q.query, 32)
		       + $4::float8 * (SELECT count(*) FROM unnest($3::text[]) AS ident WHERE strpos(c.content, ident) > 0) AS score
		FROM chunks c, q
		WHERE c.tenant_id = $1
		  AND to_tsvector('simple', c.tokens) @@ q.query
		  AND ($5::uuid[] IS NULL OR c.repository_id = ANY($5))
		ORDER BY score DESC, c.path, c.line_start
		LIMIT $6`,
		tenant, query, identifiers, identifierBoost, repoParam, limit)
	if err != nil {
		return nil, fmt.Errorf("search chunks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		var ls, le int32
		err := r.Scan(&c.repoID, &c.path, &ls, &le, &c.content, &c.score)
		c.lineStart, c.lineEnd = int(ls), int(le)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("search chunks: %w", err)
	}
	return out, nil
}

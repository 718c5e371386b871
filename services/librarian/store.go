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
	URL         string
	LastCommit  string
	Generation  int64
	// EmbedModel embedded the chunks of the last successful index.
	EmbedModel string
	// PublicRemote says the remote must resolve to public addresses at
	// every fetch (a member registered it; clone.go).
	PublicRemote bool
	// Operation is the id of its latest index operation, "" before any.
	Operation string
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

// repoColumns ends with the repository's latest index operation, so that
// every read of a repository says which operation to follow.
const repoColumns = `id::text, display_name, path, index_state, file_count, chunk_count, index_error, create_time, index_time, url, last_commit, generation, embed_model, public_remote,
	COALESCE((SELECT o.id::text FROM operations o WHERE o.tenant_id = repositories.tenant_id AND o.repository_id = repositories.id
		ORDER BY o.start_time DESC LIMIT 1), '')`

func scanRepo(row pgx.Row) (repository, error) {
	var r repository
	err := row.Scan(&r.ID, &r.DisplayName, &r.Path, &r.State, &r.FileCount, &r.ChunkCount, &r.IndexError, &r.CreateTime, &r.IndexTime, &r.URL, &r.LastCommit, &r.Generation, &r.EmbedModel, &r.PublicRemote, &r.Operation)
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
	row := tx.QueryRow(ctx, `INSERT INTO repositories (tenant_id, id, display_name, path, index_state, url, public_remote)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (tenant_id, path) DO NOTHING
		RETURNING `+repoColumns,
		tenant, uuidParam(r.ID), r.DisplayName, r.Path, statePending, r.URL, r.PublicRemote)
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
		return "", repositoryNotFound(path)
	}
	if err != nil {
		return "", fmt.Errorf("look up repository by path: %w", err)
	}
	return id, nil
}

// getRepo returns the tenant's repository id (repositoryNotFound when it
// has none).
func (s store) getRepo(ctx context.Context, tenant, id string) (repository, error) {
	r, err := scanRepo(s.db.QueryRow(ctx, `SELECT `+repoColumns+` FROM repositories WHERE tenant_id = $1 AND id = $2`,
		tenant, uuidParam(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return repository{}, repositoryNotFound(id)
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

// batchBytes bounds the content held before a batch is written.
const batchBytes = 8 << 20

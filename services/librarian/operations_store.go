package librarian

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
)

// Operation kinds and phases as stored.
const (
	opKindCreate = "create"
	opKindIndex  = "index"

	phaseCloning  = "CLONING"
	phaseScanning = "SCANNING"
	phaseLexical  = "LEXICAL"
	phaseSymbols  = "SYMBOLS"
	phaseSemantic = "SEMANTIC"
	phaseDone     = "DONE"
)

// operationPrefix starts an operation's name.
const operationPrefix = "operations/"

// operation is one stored index operation.
type operation struct {
	ID, RepoID, Kind string
	Full             bool
	progress
	CancelRequested bool
	Done            bool
	ErrorCode       int32
	ErrorMessage    string
	StartTime       time.Time
	UpdateTime      time.Time
}

// progress is what a running operation reports.
type progress struct {
	Phase                   string
	FilesTotal, FilesDone   int64
	ChunksTotal, ChunksDone int64
	LexicalReady            bool
	SemanticReady           bool
	FileErrors              int64
	ErrorSamples            []string
}

const opColumns = `id::text, repository_id::text, kind, full_index, phase, files_total, files_done, chunks_total, chunks_done,
	lexical_ready, semantic_ready, file_errors, error_samples, cancel_requested, done, error_code, error_message, start_time, update_time`

func scanOperation(row pgx.Row) (operation, error) {
	var o operation
	err := row.Scan(&o.ID, &o.RepoID, &o.Kind, &o.Full, &o.Phase, &o.FilesTotal, &o.FilesDone, &o.ChunksTotal, &o.ChunksDone,
		&o.LexicalReady, &o.SemanticReady, &o.FileErrors, &o.ErrorSamples, &o.CancelRequested, &o.Done, &o.ErrorCode,
		&o.ErrorMessage, &o.StartTime, &o.UpdateTime)
	return o, err
}

// operationNotFound says the tenant has no operation id.
func operationNotFound(id string) error { return apierr.NotFound("operation", operationPrefix+id) }

// insertOperation records a new running operation of a repository and
// marks the repository INDEXING, in one transaction. A repository with a
// running operation gets errIndexBusy naming it.
func (s store) insertOperation(ctx context.Context, tenant string, o operation) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO operations (tenant_id, id, repository_id, kind, full_index, phase)
			VALUES ($1, $2, $3, $4, $5, $6)`, tenant, uuidParam(o.ID), uuidParam(o.RepoID), o.Kind, o.Full, o.Phase); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE repositories SET index_state = $3, index_error = '' WHERE tenant_id = $1 AND id = $2`,
			tenant, uuidParam(o.RepoID), stateIndexing)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		var running string
		_ = s.db.QueryRow(ctx, `SELECT id::text FROM operations WHERE tenant_id = $1 AND repository_id = $2 AND NOT done`,
			tenant, uuidParam(o.RepoID)).Scan(&running)
		return errIndexBusy.Withf("repository is being indexed by %s%s; follow it, or cancel it first", operationPrefix, running)
	}
	if err != nil {
		return fmt.Errorf("record operation: %w", err)
	}
	return nil
}

// getOperation returns one of the tenant's operations.
func (s store) getOperation(ctx context.Context, tenant, id string) (operation, error) {
	o, err := scanOperation(s.db.QueryRow(ctx, `SELECT `+opColumns+` FROM operations WHERE tenant_id = $1 AND id = $2`,
		tenant, uuidParam(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return o, operationNotFound(id)
	}
	if err != nil {
		return o, fmt.Errorf("get operation: %w", err)
	}
	return o, nil
}

// listOperations returns the tenant's operations newest first, after the
// (start time, id) of a previous page when set, of one repository when
// repoID is set.
func (s store) listOperations(ctx context.Context, tenant, repoID string, after *operation, limit int) ([]operation, error) {
	args := []any{tenant, limit}
	where := ""
	if repoID != "" {
		args = append(args, uuidParam(repoID))
		where += fmt.Sprintf(" AND repository_id = $%d", len(args))
	}
	if after != nil {
		args = append(args, after.StartTime, uuidParam(after.ID))
		where += fmt.Sprintf(" AND (start_time, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	rows, err := s.db.Query(ctx, `SELECT `+opColumns+` FROM operations WHERE tenant_id = $1`+where+`
		ORDER BY start_time DESC, id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (operation, error) { return scanOperation(r) })
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return out, nil
}

// saveProgress writes a running operation's progress (and its heartbeat)
// and reports whether a cancel was asked for, by this replica or another.
func (s store) saveProgress(ctx context.Context, tenant, id string, p progress) (bool, error) {
	var cancel bool
	err := s.db.QueryRow(ctx, `UPDATE operations SET phase = $3, files_total = $4, files_done = $5, chunks_total = $6,
			chunks_done = $7, lexical_ready = $8, semantic_ready = $9, file_errors = $10, error_samples = COALESCE($11::text[], '{}'), update_time = now()
		WHERE tenant_id = $1 AND id = $2 AND NOT done RETURNING cancel_requested`,
		tenant, uuidParam(id), p.Phase, p.FilesTotal, p.FilesDone, p.ChunksTotal, p.ChunksDone, p.LexicalReady,
		p.SemanticReady, p.FileErrors, p.ErrorSamples).Scan(&cancel)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("save operation progress: %w", err)
	}
	return cancel, nil
}

// finishOperation records an operation's end: its last progress and, when
// it failed, the code and message.
func (s store) finishOperation(ctx context.Context, tenant, id string, p progress, code codes.Code, msg string) error {
	_, err := s.db.Exec(ctx, `UPDATE operations SET phase = $3, files_total = $4, files_done = $5, chunks_total = $6,
			chunks_done = $7, lexical_ready = $8, semantic_ready = $9, file_errors = $10, error_samples = COALESCE($11::text[], '{}'),
			done = true, error_code = $12, error_message = $13, update_time = now()
		WHERE tenant_id = $1 AND id = $2`,
		tenant, uuidParam(id), p.Phase, p.FilesTotal, p.FilesDone, p.ChunksTotal, p.ChunksDone, p.LexicalReady,
		p.SemanticReady, p.FileErrors, p.ErrorSamples, int32(code), msg)
	if err != nil {
		return fmt.Errorf("finish operation: %w", err)
	}
	return nil
}

// requestCancel marks one of the tenant's operations for cancellation;
// its runner sees the mark at its next progress write.
func (s store) requestCancel(ctx context.Context, tenant, id string) error {
	_, err := s.db.Exec(ctx, `UPDATE operations SET cancel_requested = true WHERE tenant_id = $1 AND id = $2 AND NOT done`,
		tenant, uuidParam(id))
	if err != nil {
		return fmt.Errorf("cancel operation: %w", err)
	}
	return nil
}

// lostMessage is the error of an operation whose process stopped.
const lostMessage = "the librarian running this index stopped (restarted or crashed) before it finished; index the repository again"

// expireOperations marks failed the running operations whose runner has
// not written for staleAfter (their process is gone), and their
// repositories FAILED when they are still INDEXING. tenant "" covers every
// tenant: the sweep at startup is maintenance of the whole table.
func (s store) expireOperations(ctx context.Context, tenant string, staleAfter time.Duration) (int64, error) {
	tag, err := s.db.Exec(ctx, `WITH lost AS (
			UPDATE operations SET done = true, error_code = $2, error_message = $3, update_time = now()
			WHERE NOT done AND update_time < now() - make_interval(secs => $4) AND ($1 = '' OR tenant_id = $1)
			RETURNING tenant_id, repository_id)
		UPDATE repositories r SET index_state = $5, index_error = $3
		FROM lost WHERE r.tenant_id = lost.tenant_id AND r.id = lost.repository_id AND r.index_state = $6`,
		tenant, int32(codes.Aborted), lostMessage, staleAfter.Seconds(), stateFailed, stateIndexing)
	if err != nil {
		return 0, fmt.Errorf("expire lost operations: %w", err)
	}
	return tag.RowsAffected(), nil
}

// toOperationProto is the API form of an operation; repo is its
// repository once it succeeded.
func toOperationProto(o operation, repo *librarianv1.Repository) *librarianv1.Operation {
	out := &librarianv1.Operation{
		Name: operationPrefix + o.ID,
		Done: o.Done,
		Metadata: &librarianv1.IndexOperationMetadata{
			Repository:      repositoryPrefix + o.RepoID,
			Phase:           phaseToProto(o.Phase),
			FilesTotal:      o.FilesTotal,
			FilesDone:       o.FilesDone,
			ChunksTotal:     o.ChunksTotal,
			ChunksDone:      o.ChunksDone,
			LexicalReady:    o.LexicalReady,
			SemanticReady:   o.SemanticReady,
			Errors:          o.FileErrors,
			ErrorSamples:    o.ErrorSamples,
			StartTime:       timestamppb.New(o.StartTime),
			UpdateTime:      timestamppb.New(o.UpdateTime),
			CancelRequested: o.CancelRequested,
		},
	}
	if o.ErrorCode != 0 {
		out.Error = &librarianv1.OperationError{Code: o.ErrorCode, Message: o.ErrorMessage}
	} else if o.Done {
		out.Repository = repo
	}
	return out
}

func phaseToProto(p string) librarianv1.IndexPhase {
	switch p {
	case phaseCloning:
		return librarianv1.IndexPhase_INDEX_PHASE_CLONING
	case phaseScanning:
		return librarianv1.IndexPhase_INDEX_PHASE_SCANNING
	case phaseLexical:
		return librarianv1.IndexPhase_INDEX_PHASE_LEXICAL
	case phaseSymbols:
		return librarianv1.IndexPhase_INDEX_PHASE_SYMBOLS
	case phaseSemantic:
		return librarianv1.IndexPhase_INDEX_PHASE_SEMANTIC
	case phaseDone:
		return librarianv1.IndexPhase_INDEX_PHASE_DONE
	}
	return librarianv1.IndexPhase_INDEX_PHASE_UNSPECIFIED
}

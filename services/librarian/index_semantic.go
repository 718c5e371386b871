package librarian

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"sylk.dev/sylk/pkg/embed"
)

// semanticBatch is how many chunks are embedded and written at a time in
// the semantic phase.
const semanticBatch = 512

// semantic is an index run's second phase: the full-text index is
// committed and searchable; the chunks not embedded by the current model
// (new and changed ones, and any an interrupted run left) are embedded in
// batches, each committed on its own, then the repository is READY. An
// interrupted phase leaves the rest to the next run, which picks up
// whatever is still unembedded.
func (r *indexRun) semantic(ctx context.Context) error {
	db := r.s.store.db
	repoID := uuidParam(r.repo.ID)
	var total int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM chunks WHERE tenant_id = $1 AND repository_id = $2 AND model <> $3`,
		r.tenant, repoID, r.model).Scan(&total); err != nil {
		return fmt.Errorf("count chunks to embed: %w", err)
	}
	r.progress.semanticTotal(total)
	after := ""
	for {
		n, last, err := r.embedBatch(ctx, after)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		r.res.chunksEmbed += int64(n)
		r.progress.chunks(n)
		after = last
	}
	bump := 0
	if r.res.chunksEmbed > 0 {
		// The vectors changed: answers cached on the old generation go.
		bump = 1
	}
	repo, err := scanRepo(db.QueryRow(ctx, `UPDATE repositories SET index_state = $3, index_error = '', generation = generation + $4
		WHERE tenant_id = $1 AND id = $2 RETURNING `+repoColumns, r.tenant, repoID, stateReady, bump))
	if err != nil {
		return fmt.Errorf("mark repository ready: %w", err)
	}
	r.res.repo = repo
	r.progress.update(func(p *progress) { p.SemanticReady = true }, true)
	if r.res.chunksEmbed > 0 {
		r.res.changed = true
	}
	return nil
}

// embedBatch embeds the next chunks (by id, after after) that the current
// model has not embedded, returning how many and the last id. A chunk
// whose content changed meanwhile (another run rewrote it) is left alone.
func (r *indexRun) embedBatch(ctx context.Context, after string) (int, string, error) {
	db := r.s.store.db
	repoID := uuidParam(r.repo.ID)
	rows, err := db.Query(ctx, `SELECT id, symbol, content, content_hash FROM chunks
		WHERE tenant_id = $1 AND repository_id = $2 AND model <> $3 AND id > $4 ORDER BY id LIMIT $5`,
		r.tenant, repoID, r.model, after, semanticBatch)
	if err != nil {
		return 0, "", fmt.Errorf("read chunks to embed: %w", err)
	}
	var ids, texts []string
	var hashes [][]byte
	for rows.Next() {
		var c chunk
		if err := rows.Scan(&c.id, &c.symbol, &c.content, &c.hash); err != nil {
			rows.Close()
			return 0, "", fmt.Errorf("read chunks to embed: %w", err)
		}
		ids, hashes, texts = append(ids, c.id), append(hashes, c.hash), append(texts, embedText("", &c))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, "", fmt.Errorf("read chunks to embed: %w", err)
	}
	if len(ids) == 0 {
		return 0, "", nil
	}
	vecs, err := r.s.embedder.Embed(ctx, texts)
	if err != nil {
		return 0, "", fmt.Errorf("embed chunks: %w", err)
	}
	encoded := make([][]byte, len(vecs))
	for i, v := range vecs {
		encoded[i] = embed.Encode(v)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE chunks c SET embedding = v.e, model = $3
			FROM unnest($4::text[], $5::bytea[], $6::bytea[]) AS v(id, e, h)
			WHERE c.tenant_id = $1 AND c.repository_id = $2 AND c.id = v.id AND c.content_hash = v.h`,
			r.tenant, repoID, r.model, ids, encoded, hashes)
		return err
	})
	if err != nil {
		return 0, "", fmt.Errorf("write embeddings: %w", err)
	}
	return len(ids), ids[len(ids)-1], nil
}

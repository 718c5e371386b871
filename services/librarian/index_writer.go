package librarian

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"sylk.dev/sylk/pkg/embed"
)

// indexWriter writes changed files in batches inside one transaction.
type indexWriter struct {
	s        *Service
	tx       pgx.Tx
	tenant   string
	repoID   string
	existing map[string][]byte
	pending  []sourceFile
	bytes    int
	res      *indexResult
	progress *opTracker
}

func (w *indexWriter) put(ctx context.Context, f sourceFile) error {
	if old, ok := w.existing[f.path]; ok && bytes.Equal(old, f.sha256) {
		return nil
	}
	w.pending = append(w.pending, f)
	for _, c := range f.chunks {
		w.bytes += len(c.content) + len(c.tokens)
	}
	if len(w.pending) >= 200 || w.bytes >= batchBytes {
		return w.flush(ctx)
	}
	return nil
}

// flush embeds the pending files' chunks (reusing the stored embedding of
// any chunk whose content is unchanged), replaces their rows and writes
// them.
func (w *indexWriter) flush(ctx context.Context) error {
	if len(w.pending) == 0 {
		return nil
	}
	paths := make([]string, len(w.pending))
	for i, f := range w.pending {
		paths[i] = f.path
	}
	reuse, err := w.replace(ctx, paths)
	if err != nil {
		return err
	}
	if err := w.embed(ctx, reuse); err != nil {
		return err
	}
	if err := w.write(ctx); err != nil {
		return err
	}
	w.res.changed = true
	w.pending, w.bytes = w.pending[:0], 0
	return nil
}

// replace deletes the stored rows of the files at paths, returning the
// embeddings of their chunks by content hash, for reuse.
func (w *indexWriter) replace(ctx context.Context, paths []string) (map[string][]float32, error) {
	reuse := map[string][]float32{}
	if len(w.existing) == 0 {
		return reuse, nil
	}
	repoID := uuidParam(w.repoID)
	rows, err := w.tx.Query(ctx, `SELECT content_hash, embedding FROM chunks
		WHERE tenant_id = $1 AND repository_id = $2 AND path = ANY($3) AND model = $4`,
		w.tenant, repoID, paths, w.s.embedder.Name())
	if err != nil {
		return nil, fmt.Errorf("load previous embeddings: %w", err)
	}
	for rows.Next() {
		var h, e []byte
		if err := rows.Scan(&h, &e); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load previous embeddings: %w", err)
		}
		if v, err := embed.Decode(e); err == nil {
			reuse[string(h)] = v
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load previous embeddings: %w", err)
	}
	if !w.res.typesChanged {
		touched, err := touchesTypes(ctx, w.tx, w.tenant, w.repoID, paths)
		if err != nil {
			return nil, err
		}
		w.res.typesChanged = touched
	}
	if _, err := w.tx.Exec(ctx, `DELETE FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = ANY($3)`,
		w.tenant, repoID, paths); err != nil {
		return nil, fmt.Errorf("delete changed files: %w", err)
	}
	return reuse, nil
}

// embed gives every pending chunk whose content is unchanged its stored
// embedding, by content hash. The others are written unembedded (model
// empty): the semantic phase embeds them once the full-text index is
// committed (index_semantic.go).
func (w *indexWriter) embed(_ context.Context, reuse map[string][]float32) error {
	for i := range w.pending {
		f := &w.pending[i]
		for j := range f.chunks {
			c := &f.chunks[j]
			if v, ok := reuse[string(c.hash)]; ok {
				c.embedding = v
				w.res.chunksReused++
			}
		}
	}
	return nil
}

// write copies the pending files, chunks, symbols and edges into their
// tables.
func (w *indexWriter) write(ctx context.Context) error {
	repoID, model := uuidParam(w.repoID), w.s.embedder.Name()
	var fileRows, chunkRows, symRows, edgeRows [][]any
	for _, f := range w.pending {
		fileRows = append(fileRows, []any{w.tenant, repoID, f.path, f.language, f.size, int32(f.lineCount), f.sha256})
		for _, c := range f.chunks {
			chunkModel := model
			if c.embedding == nil {
				chunkModel = ""
			}
			chunkRows = append(chunkRows, []any{w.tenant, repoID, c.id, f.path, f.language, int32(c.lineStart), int32(c.lineEnd),
				c.symbol, c.kind, strings.Join(c.names, " "), c.content, c.tokens, c.pathTokens, c.hash, embed.Encode(c.embedding), chunkModel})
		}
		for _, sy := range f.symbols {
			symRows = append(symRows, []any{w.tenant, repoID, sy.id, sy.name, sy.kind, sy.path, sy.pkg, sy.signature, sy.doc, int32(sy.lineStart), int32(sy.lineEnd)})
		}
		for _, e := range f.edges {
			edgeRows = append(edgeRows, []any{w.tenant, repoID, e.path, e.source, e.target, e.kind, int32(e.line), e.arity})
			if e.kind == edgeHasMethod {
				w.res.typesChanged = true
			}
		}
		w.res.filesChanged++
	}
	copies := []struct {
		table string
		cols  []string
		rows  [][]any
	}{
		{"files", []string{"tenant_id", "repository_id", "path", "language", "size_bytes", "line_count", "sha256"}, fileRows},
		{"chunks", []string{"tenant_id", "repository_id", "id", "path", "language", "line_start", "line_end",
			"symbol", "kind", "names", "content", "tokens", "path_tokens", "content_hash", "embedding", "model"}, chunkRows},
		{"symbols", []string{"tenant_id", "repository_id", "id", "name", "kind", "path", "package", "signature", "doc", "line_start", "line_end"}, symRows},
		{"edges", []string{"tenant_id", "repository_id", "path", "source", "target", "kind", "line", "arity"}, edgeRows},
	}
	for _, c := range copies {
		if len(c.rows) == 0 {
			continue
		}
		if _, err := w.tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			return fmt.Errorf("write %s: %w", c.table, err)
		}
	}
	w.progress.chunks(len(chunkRows))
	return nil
}

// embedText is what a chunk's embedding is computed from: its symbol and
// its content (the path stays out: it would make every small chunk of a
// file look alike).
func embedText(_ string, c *chunk) string {
	return c.symbol + "\n" + c.content
}

package academic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/textsearch"
)

// document is a stored document, without its content.
type document struct {
	TenantID     string
	ID           string
	Title        string
	Source       string
	Format       string
	SectionCount int
	UserID       string
	CreatedAt    time.Time
}

// hit is a section matched by a search.
type hit struct {
	DocumentID    string
	DocumentTitle string
	Heading       string
	LineStart     int
	LineEnd       int
	Snippet       string
	Score         float64
}

// store reads and writes documents; every method is scoped to one tenant.
type store struct {
	db *pgxpool.Pool
}

const documentColumns = `id::text, title, source, format, section_count, user_id, created_at`

func scanDocument(row pgx.Row, tenant string) (document, error) {
	d := document{TenantID: tenant}
	err := row.Scan(&d.ID, &d.Title, &d.Source, &d.Format, &d.SectionCount, &d.UserID, &d.CreatedAt)
	d.CreatedAt = d.CreatedAt.UTC()
	return d, err
}

// insert stores a document and its sections in one transaction.
func (s *store) insert(ctx context.Context, d document, content, sha string, sections []section) (document, error) {
	n := len(sections)
	ordinals, lineStarts, lineEnds := make([]int32, n), make([]int32, n), make([]int32, n)
	headings, bodies := make([]string, n), make([]string, n)
	for i, sec := range sections {
		ordinals[i], headings[i], bodies[i] = int32(i), sec.Heading, sec.Body
		lineStarts[i], lineEnds[i] = int32(sec.LineStart), int32(sec.LineEnd)
	}
	d.SectionCount = n
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO documents (tenant_id, id, title, source, format, content, content_sha256, section_count, user_id)
			VALUES ($1, $2::uuid, $3, $4, $5, $6, $7, $8, $9)
			RETURNING created_at`,
			d.TenantID, d.ID, d.Title, d.Source, d.Format, content, sha, n, d.UserID,
		).Scan(&d.CreatedAt)
		if err != nil {
			return fmt.Errorf("insert document: %w", err)
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO sections (tenant_id, document_id, ordinal, heading, body, line_start, line_end)
			SELECT $1, $2::uuid, s.ordinal, s.heading, s.body, s.line_start, s.line_end
			FROM unnest($3::int[], $4::text[], $5::text[], $6::int[], $7::int[]) AS s(ordinal, heading, body, line_start, line_end)`,
			d.TenantID, d.ID, ordinals, headings, bodies, lineStarts, lineEnds)
		if err != nil {
			return fmt.Errorf("insert sections: %w", err)
		}
		return nil
	})
	if err != nil {
		return document{}, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	return d, nil
}

// get returns one document of the tenant.
func (s *store) get(ctx context.Context, tenant, id string) (document, error) {
	row := s.db.QueryRow(ctx, `SELECT `+documentColumns+` FROM documents WHERE tenant_id = $1 AND id = $2::uuid`, tenant, id)
	d, err := scanDocument(row, tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return document{}, documentNotFound(id)
	}
	if err != nil {
		return document{}, fmt.Errorf("get document %s: %w", id, err)
	}
	return d, nil
}

// list returns up to limit documents after the cursor, newest first, and
// the cursor of the next page (nil on the last page).
func (s *store) list(ctx context.Context, tenant string, after *textsearch.Cursor, limit int) ([]document, *textsearch.Cursor, error) {
	var afterTime, afterID any
	if after != nil {
		afterTime, afterID = after.Created, after.ID
	}
	rows, err := s.db.Query(ctx, `
		SELECT `+documentColumns+` FROM documents
		WHERE tenant_id = $1
		  AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
		ORDER BY created_at DESC, id DESC
		LIMIT $4`,
		tenant, afterTime, afterID, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list documents: %w", err)
	}
	docs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (document, error) { return scanDocument(r, tenant) })
	if err != nil {
		return nil, nil, fmt.Errorf("list documents: %w", err)
	}
	if len(docs) <= limit {
		return docs, nil, nil
	}
	docs = docs[:limit]
	last := docs[len(docs)-1]
	return docs, &textsearch.Cursor{Created: last.CreatedAt, ID: last.ID}, nil
}

// search ranks the tenant's sections against text (web-search syntax: all
// words must match); when that finds nothing it retries with any word.
func (s *store) search(ctx context.Context, tenant, text string, limit int) ([]hit, error) {
	hits, err := s.searchWith(ctx, tenant, `websearch_to_tsquery('english', $2)`, text, limit)
	if err != nil || len(hits) > 0 {
		return hits, err
	}
	if or := textsearch.OrQuery(text); or != "" {
		return s.searchWith(ctx, tenant, `to_tsquery('english', $2)`, or, limit)
	}
	return nil, nil
}

// searchWith runs one search; tsquery is a constant SQL expression over $2.
// The inner query ranks and limits, so that headlines are built for the
// returned rows only.
func (s *store) searchWith(ctx context.Context, tenant, tsquery, text string, limit int) ([]hit, error) {
	rows, err := s.db.Query(ctx, `
		SELECT h.document_id::text, h.title, h.heading, h.line_start, h.line_end, h.score,
		       ts_headline('english', CASE WHEN h.body = '' THEN h.heading ELSE h.body END, h.query, $4)
		FROM (
			SELECT s.document_id, d.title, s.heading, s.body, s.line_start, s.line_end, s.ordinal, d.created_at,
			       ts_rank_cd(s.search, q.query, 32) AS score, q.query
			FROM sections s
			JOIN documents d ON d.tenant_id = s.tenant_id AND d.id = s.document_id
			CROSS JOIN (SELECT `+tsquery+` AS query) q
			WHERE s.tenant_id = $1 AND s.search @@ q.query
			ORDER BY score DESC, d.created_at DESC, s.document_id, s.ordinal
			LIMIT $3
		) h
		ORDER BY h.score DESC, h.created_at DESC, h.document_id, h.ordinal`,
		tenant, text, limit, textsearch.HeadlineOptions)
	if err != nil {
		return nil, fmt.Errorf("search sections: %w", err)
	}
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
		var h hit
		var start, end int32
		err := r.Scan(&h.DocumentID, &h.DocumentTitle, &h.Heading, &start, &end, &h.Score, &h.Snippet)
		h.LineStart, h.LineEnd = int(start), int(end)
		h.Snippet = textsearch.CleanSnippet(h.Snippet, SnippetChars)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("search sections: %w", err)
	}
	return hits, nil
}

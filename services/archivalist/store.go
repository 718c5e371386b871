package archivalist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/textsearch"
)

// entry is a stored chronicle entry.
type entry struct {
	TenantID  string
	ID        string
	Category  string
	Title     string
	Content   string
	SessionID string
	UserID    string
	Source    string
	// Repository is the registered repository the entry is about, or "".
	Repository string
	CreatedAt  time.Time
}

// hit is an entry matched by a search.
type hit struct {
	entry
	Score   float64
	Snippet string
}

// searchQuery selects entries for a search.
type searchQuery struct {
	Text string
	// SessionID restricts the search to one session; "" searches them all.
	SessionID string
	Category  string
	Limit     int
	// Viewer is whose private entries are included (see PrivateCategories);
	// "" includes everyone's (an admin).
	Viewer string
	// Repository and the window restrict the entries (timescope.go).
	Repository string
	Window     window
}

// listQuery selects a page of entries, newest first.
type listQuery struct {
	SessionID string
	Category  string
	After     *textsearch.Cursor
	Limit     int
	Viewer    string
	// Repository and the window restrict the entries (timescope.go).
	Repository string
	Window     window
}

// PrivateCategories are the entries stored about one user's own work: their
// routing failures (with their messages), the checkpoints and handoffs of
// their runs, their pipelines' findings. Only their user, and the tenant's
// admins, read them; the rest is the tenant's shared memory.
var PrivateCategories = []string{"routing_failure", "pipeline_handoff", "architect_workflow", "inspector_findings", "tester_summary"}

// visibleTo is the SQL condition (over the entries alias e, the viewer in
// parameter $n and the private categories in $n+1) that keeps a viewer's
// own and the shared entries.
func visibleTo(n int) string {
	return fmt.Sprintf("($%d = '' OR e.user_id = $%d OR e.category <> ALL($%d::text[]))", n, n, n+1)
}

// store reads and writes entries; every method is scoped to one tenant.
type store struct {
	db *pgxpool.Pool
}

const entryColumns = `id::text, category, title, content, coalesce(session_id::text, ''), user_id, source, repository, created_at`

// scopedTo is the SQL condition (over the entries alias e, the repository
// in parameter $n, the window's bounds in $n+1 and $n+2) that keeps the
// entries of a repository ("" for all) created within a window (NULL
// bounds are open).
func scopedTo(n int) string {
	return fmt.Sprintf("($%d = '' OR e.repository = $%d) AND ($%d::timestamptz IS NULL OR e.created_at >= $%d::timestamptz) AND ($%d::timestamptz IS NULL OR e.created_at < $%d::timestamptz)",
		n, n, n+1, n+1, n+2, n+2)
}

// bounds are a window's bounds as SQL parameters.
func (w window) bounds() (since, until any) {
	if w.Since != nil {
		since = *w.Since
	}
	if w.Until != nil {
		until = *w.Until
	}
	return since, until
}

func scanEntry(row pgx.Row, tenant string, extra ...any) (entry, error) {
	e := entry{TenantID: tenant}
	dest := append([]any{&e.ID, &e.Category, &e.Title, &e.Content, &e.SessionID, &e.UserID, &e.Source, &e.Repository, &e.CreatedAt}, extra...)
	err := row.Scan(dest...)
	e.CreatedAt = e.CreatedAt.UTC()
	return e, err
}

// nullable maps "" to SQL NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insert stores e (ID, tenant and fields set by the caller) and returns it
// with its creation time. messageID, when set, makes the insert idempotent:
// a second insert with the same one returns errDuplicate. Secrets in the
// title and content are stored redacted, whoever sent the entry.
func (s *store) insert(ctx context.Context, e entry, messageID string) (entry, error) {
	e.Title, e.Content = secrets.Scrub(e.Title), secrets.Scrub(e.Content)
	err := s.db.QueryRow(ctx, `
		INSERT INTO entries (tenant_id, id, category, title, content, session_id, user_id, source, source_message_id, repository)
		VALUES ($1, $2::uuid, $3, $4, $5, $6::uuid, $7, $8, $9, $10)
		ON CONFLICT (tenant_id, source_message_id) WHERE source_message_id IS NOT NULL DO NOTHING
		RETURNING created_at`,
		e.TenantID, e.ID, e.Category, e.Title, e.Content, nullable(e.SessionID), e.UserID, e.Source, nullable(messageID), e.Repository,
	).Scan(&e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return entry{}, errDuplicate
	}
	if err != nil {
		return entry{}, fmt.Errorf("insert entry: %w", err)
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return e, nil
}

// get returns one entry of the tenant.
func (s *store) get(ctx context.Context, tenant, viewer, id string) (entry, error) {
	row := s.db.QueryRow(ctx, `SELECT `+entryColumns+` FROM entries e WHERE tenant_id = $1 AND id = $2::uuid AND `+visibleTo(3),
		tenant, id, viewer, PrivateCategories)
	e, err := scanEntry(row, tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return entry{}, entryNotFound(id)
	}
	if err != nil {
		return entry{}, fmt.Errorf("get entry %s: %w", id, err)
	}
	return e, nil
}

// list returns up to q.Limit entries after q.After, newest first, and the
// cursor of the next page (nil on the last page).
func (s *store) list(ctx context.Context, tenant string, q listQuery) ([]entry, *textsearch.Cursor, error) {
	var afterTime, afterID any
	since, until := q.Window.bounds()
	if q.After != nil {
		afterTime, afterID = q.After.Created, q.After.ID
	}
	rows, err := s.db.Query(ctx, `
		SELECT `+entryColumns+` FROM entries e
		WHERE tenant_id = $1
		  AND ($2::uuid IS NULL OR session_id = $2::uuid)
		  AND ($3 = '' OR category = $3)
		  AND ($4::timestamptz IS NULL OR (created_at, id) < ($4::timestamptz, $5::uuid))
		  AND `+visibleTo(7)+`
		  AND `+scopedTo(9)+`
		ORDER BY created_at DESC, id DESC
		LIMIT $6`,
		tenant, nullable(q.SessionID), q.Category, afterTime, afterID, q.Limit+1, q.Viewer, PrivateCategories, q.Repository, since, until)
	if err != nil {
		return nil, nil, fmt.Errorf("list entries: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) { return scanEntry(r, tenant) })
	if err != nil {
		return nil, nil, fmt.Errorf("list entries: %w", err)
	}
	if len(entries) <= q.Limit {
		return entries, nil, nil
	}
	entries = entries[:q.Limit]
	last := entries[len(entries)-1]
	return entries, &textsearch.Cursor{Created: last.CreatedAt, ID: last.ID}, nil
}

// search ranks the tenant's entries against q.Text (web-search syntax: all
// words must match); when that finds nothing it retries with any word.
func (s *store) search(ctx context.Context, tenant string, q searchQuery) ([]hit, error) {
	hits, err := s.searchWith(ctx, tenant, q, `websearch_to_tsquery('english', $2)`, q.Text)
	if err != nil || len(hits) > 0 {
		return hits, err
	}
	if or := textsearch.OrQuery(q.Text); or != "" {
		return s.searchWith(ctx, tenant, q, `to_tsquery('english', $2)`, or)
	}
	return nil, nil
}

// searchWith runs one search; tsquery is a constant SQL expression over $2.
// The inner query ranks and limits, so that headlines are built for the
// returned rows only.
func (s *store) searchWith(ctx context.Context, tenant string, q searchQuery, tsquery, text string) ([]hit, error) {
	since, until := q.Window.bounds()
	rows, err := s.db.Query(ctx, `
		SELECT h.id::text, h.category, h.title, h.content, coalesce(h.session_id::text, ''), h.user_id, h.source, h.repository, h.created_at,
		       h.score,
		       ts_headline('english', CASE WHEN h.content = '' THEN h.title ELSE h.content END, h.query, $6)
		FROM (
			SELECT e.*, ts_rank_cd(e.search, q.query, 32) AS score, q.query
			FROM entries e, (SELECT `+tsquery+` AS query) q
			WHERE e.tenant_id = $1
			  AND e.search @@ q.query
			  AND ($3::uuid IS NULL OR e.session_id = $3::uuid)
			  AND ($4 = '' OR e.category = $4)
			  AND `+visibleTo(7)+`
			  AND `+scopedTo(9)+`
			ORDER BY score DESC, e.created_at DESC, e.id DESC
			LIMIT $5
		) h
		ORDER BY h.score DESC, h.created_at DESC, h.id DESC`,
		tenant, text, nullable(q.SessionID), q.Category, q.Limit, textsearch.HeadlineOptions, q.Viewer, PrivateCategories, q.Repository, since, until)
	if err != nil {
		return nil, fmt.Errorf("search entries: %w", err)
	}
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
		var h hit
		e, err := scanEntry(r, tenant, &h.Score, &h.Snippet)
		h.entry = e
		h.Snippet = textsearch.CleanSnippet(h.Snippet, SnippetChars)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("search entries: %w", err)
	}
	return hits, nil
}

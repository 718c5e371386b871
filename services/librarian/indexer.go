package librarian

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// indexResult describes one index run.
type indexResult struct {
	stats        indexStats
	delta        bool
	filesChanged int64
	filesDeleted int64
	chunksEmbed  int64
	chunksReused int64
	changed      bool
	// typesChanged: the run rewrote or removed a file holding methods,
	// types or implements edges, so implements edges must be recomputed.
	typesChanged bool
	head         string
	elapsed      time.Duration
	repo         repository
	// lexicalDone: the full-text part of the run is committed.
	lexicalDone bool
}

// runIndex brings the repository's index up to date with its directory in
// one transaction, under a per-repository advisory lock: a delta from the
// last indexed commit when one applies (at most DeltaMaxFiles changed
// files), else a full pass that still rewrites only files whose content
// changed.
func (s *Service) runIndex(ctx context.Context, tenant string, repo repository, root string, full bool) (indexResult, error) {
	return s.runIndexWith(ctx, tenant, repo, root, indexOptions{full: full})
}

// indexOptions selects what an index run reads.
type indexOptions struct {
	// full walks the whole tree.
	full bool
	// paths, when set (and not full), are the only files re-read: the
	// changes the file watcher saw. The last indexed commit is kept, so the
	// next commit-keyed delta still covers everything since it.
	paths []string
	// progress, when set, follows the run (an operation's).
	progress *opTracker
}

// runIndexWith is runIndex with explicit options.
func (s *Service) runIndexWith(ctx context.Context, tenant string, repo repository, root string, opts indexOptions) (indexResult, error) {
	run := &indexRun{s: s, tenant: tenant, repo: repo, root: root, model: s.embedder.Name(), start: time.Now(), progress: opts.progress}
	run.res.head = gitHead(ctx, root)
	// Chunks embedded by another model are invisible to search: a change of
	// model re-reads the whole tree and re-embeds every such file.
	run.remodel = repo.EmbedModel != run.model
	run.plan(ctx, opts)
	err := pgx.BeginFunc(ctx, s.store.db, func(tx pgx.Tx) error { return run.in(ctx, tx) })
	if err == nil && run.res.filesChanged >= analyzeAfter {
		// Fresh statistics keep the planner on the indexes after a bulk load.
		if _, aerr := s.store.db.Exec(ctx, `ANALYZE files, chunks, symbols, edges`); aerr != nil {
			s.log.WarnContext(ctx, "analyze after index", logx.Err(aerr))
		}
	}
	if err == nil {
		// Full-text search sees the new index from here; the embeddings
		// follow (index_semantic.go).
		run.res.lexicalDone = true
		opts.progress.lexicalReady(ctx)
		err = run.semantic(ctx)
	}
	run.res.elapsed = time.Since(run.start)
	return run.res, err
}

// indexRun is one index run of a repository.
type indexRun struct {
	s            *Service
	tenant, root string
	repo         repository
	model        string
	start        time.Time
	remodel      bool
	res          indexResult
	// changedPaths are the files a delta re-reads.
	changedPaths []string
	walker       *walker
	writer       *indexWriter
	report       func(done, total int, final bool)
	progress     *opTracker
}

// plan decides between a delta (the watcher's changes, or git's since the
// last indexed commit, when few enough) and a full pass.
func (r *indexRun) plan(ctx context.Context, opts indexOptions) {
	switch {
	case opts.full, r.remodel:
	case opts.paths != nil && len(opts.paths) <= r.s.cfg.DeltaMaxFiles:
		r.changedPaths, r.res.delta = opts.paths, true
		r.res.head = r.repo.LastCommit
	case opts.paths != nil:
		// Too many changes at once: a full pass (the watcher's batch limit).
	case r.repo.LastCommit != "" && r.res.head != "":
		if paths, err := gitChanged(ctx, r.root, r.repo.LastCommit); err == nil && len(paths) <= r.s.cfg.DeltaMaxFiles {
			r.changedPaths, r.res.delta = paths, true
		}
	}
}

// in runs the index in tx, under the repository's advisory lock: it reads
// the files, writes those that changed, removes those gone and marks the
// repository ready.
func (r *indexRun) in(ctx context.Context, tx pgx.Tx) error {
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`,
		"librarian-index:"+r.tenant+":"+r.repo.ID).Scan(&locked); err != nil {
		return fmt.Errorf("lock repository: %w", err)
	}
	if !locked {
		return errIndexBusy
	}
	existing, err := loadFileHashes(ctx, tx, r.tenant, r.repo.ID)
	if err != nil {
		return err
	}
	if r.remodel {
		if err := forgetOtherModels(ctx, tx, r.tenant, r.repo.ID, r.model, existing); err != nil {
			return err
		}
	}
	r.walker = r.s.walker(r.root)
	r.walker.onError = r.progress.fileError
	r.writer = &indexWriter{s: r.s, tx: tx, tenant: r.tenant, repoID: r.repo.ID, existing: existing, res: &r.res, progress: r.progress}
	publish := r.s.progressReporter(ctx, r.tenant, r.repo.ID, r.start)
	r.report = func(done, total int, final bool) {
		publish(done, total, final)
		r.progress.files(done, total)
	}
	var deleted []string
	if r.res.delta {
		deleted, err = r.readChanged(ctx, existing)
	} else {
		deleted, err = r.readAll(ctx, existing)
	}
	if err != nil {
		return err
	}
	if err := r.writer.flush(ctx); err != nil {
		return err
	}
	if err := r.remove(ctx, tx, deleted); err != nil {
		return err
	}
	r.res.stats.skipped = r.walker.skipped
	for _, n := range r.walker.skipped {
		r.res.stats.filesSkipped += int64(n)
	}
	return r.finish(ctx, tx)
}

// readChanged reads the delta's files, returning those of the index that
// are gone (or no longer indexed).
func (r *indexRun) readChanged(ctx context.Context, existing map[string][]byte) ([]string, error) {
	var deleted []string
	r.walker.skipped = map[string]int{}
	r.progress.phase(phaseLexical)
	for i, p := range r.changedPaths {
		f, reason, gone := r.walker.readPath(filepath.FromSlash(p))
		switch {
		case gone || reason != "":
			if _, ok := existing[p]; ok {
				deleted = append(deleted, p)
			}
			if reason != "" {
				r.walker.skipped[reason]++
			}
		default:
			r.res.stats.filesIndexed++
			if err := r.writer.put(ctx, f); err != nil {
				return nil, err
			}
		}
		r.report(i+1, len(r.changedPaths), false)
	}
	return deleted, nil
}

// readAll walks the whole tree, returning the files of the index it did
// not find.
func (r *indexRun) readAll(ctx context.Context, existing map[string][]byte) ([]string, error) {
	r.progress.phase(phaseScanning)
	total := countFiles(r.root)
	r.progress.phase(phaseLexical)
	r.progress.files(0, total)
	seen := map[string]bool{}
	done := 0
	err := r.walker.walk(ctx, func(f sourceFile) error {
		seen[f.path] = true
		r.res.stats.filesIndexed++
		done++
		r.report(done, total, false)
		return r.writer.put(ctx, f)
	})
	if err != nil {
		return nil, err
	}
	var deleted []string
	for p := range existing {
		if !seen[p] {
			deleted = append(deleted, p)
		}
	}
	return deleted, nil
}

// remove deletes the files gone from the repository.
func (r *indexRun) remove(ctx context.Context, tx pgx.Tx, deleted []string) error {
	if len(deleted) == 0 {
		return nil
	}
	if !r.res.typesChanged {
		touched, err := touchesTypes(ctx, tx, r.tenant, r.repo.ID, deleted)
		if err != nil {
			return err
		}
		r.res.typesChanged = touched
	}
	if _, err := tx.Exec(ctx, `DELETE FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = ANY($3)`,
		r.tenant, uuidParam(r.repo.ID), deleted); err != nil {
		return fmt.Errorf("delete removed files: %w", err)
	}
	r.res.filesDeleted = int64(len(deleted))
	r.res.changed = true
	return nil
}

// finish recomputes what depends on the whole repository (term
// statistics after a full pass, implements edges when types changed) and
// marks it ready.
func (r *indexRun) finish(ctx context.Context, tx pgx.Tx) error {
	r.progress.phase(phaseSymbols)
	if r.res.changed && !r.res.delta {
		if err := refreshTerms(ctx, tx, r.tenant, r.repo.ID); err != nil {
			return err
		}
	}
	if r.res.changed && (r.res.typesChanged || !r.res.delta) {
		if err := refreshImplements(ctx, tx, r.tenant, r.repo.ID); err != nil {
			return err
		}
	}
	repo, err := markIndexed(ctx, tx, r.tenant, r.repo.ID, r.res.head, r.model, r.res.changed)
	if err != nil {
		return err
	}
	r.res.repo = repo
	r.res.stats.chunks = repo.ChunkCount
	r.report(int(r.res.stats.filesIndexed), int(r.res.stats.filesIndexed), true)
	return nil
}

// analyzeAfter is how many rewritten files make an index refresh the
// planner's statistics.
const analyzeAfter = 500

// readPath reads one path relative to the root for a delta; gone reports
// that it no longer exists (or is no longer a file to index).
func (w *walker) readPath(rel string) (sourceFile, string, bool) {
	slash := filepath.ToSlash(rel)
	if inSkippedDir(slash) || w.ignore.match(slash, false) || ignoredDir(w.ignore, slash) {
		return sourceFile{}, "", true
	}
	p := filepath.Join(w.root, rel)
	// A linked directory on the way is not entered, as in a full walk:
	// it could lead out of the repository.
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err != nil || dir != filepath.Dir(p) {
		return sourceFile{}, "", true
	}
	info, err := os.Lstat(p)
	if err != nil {
		return sourceFile{}, "", true
	}
	real := p
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, ok := w.symlinkTarget(p)
		if !ok {
			return sourceFile{}, skipSymlink, false
		}
		real = target
	case !info.Mode().IsRegular():
		return sourceFile{}, "", true
	}
	f, reason := w.read(real, slash)
	return f, reason, false
}

// inSkippedDir reports whether rel lies in a hidden or always-skipped
// directory, which a full walk never enters.
func inSkippedDir(rel string) bool {
	parts := strings.Split(rel, "/")
	for _, dir := range parts[:len(parts)-1] {
		if strings.HasPrefix(dir, ".") || skippedDirs[dir] {
			return true
		}
	}
	return false
}

// ignoredDir reports whether a directory on rel's path is ignored.
func ignoredDir(r ignoreRules, rel string) bool {
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		if r.match(strings.Join(parts[:i], "/"), true) {
			return true
		}
	}
	return false
}

// countFiles counts regular files under root outside hidden and skipped
// directories, for progress totals.
func countFiles(root string) int {
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || skippedDirs[d.Name()]) {
			return fs.SkipDir
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// progressReporter returns a function that publishes progress at most
// every progressEvery files (and at the end) on the repository's progress
// subject.
func (s *Service) progressReporter(ctx context.Context, tenant, repoID string, start time.Time) func(done, total int, final bool) {
	last := 0
	return func(done, total int, final bool) {
		if s.bus == nil || (!final && done-last < progressEvery) {
			return
		}
		last = done
		secs := time.Since(start).Seconds()
		rate := 0.0
		if secs > 0 {
			rate = float64(done) / secs
		}
		// The tenant lets the Guide retire that tenant's cached answers
		// when an index is done.
		s.publishNotice(ctx, topology.IndexProgressSubject(s.bus, repoID), &librarianv1.IndexNotice{
			TenantId: tenant, Repository: repositoryPrefix + repoID,
			Progress: &eventv1.IndexingProgress{Repository: repositoryPrefix + repoID, FilesDone: int64(done),
				FilesTotal: int64(max(total, done)), FilesPerSecond: rate, Done: final},
		})
	}
}

// progressEvery is how many files pass between progress events.
const progressEvery = 500

// loadFileHashes returns the stored content hash of every indexed file.
func loadFileHashes(ctx context.Context, tx pgx.Tx, tenant, repoID string) (map[string][]byte, error) {
	rows, err := tx.Query(ctx, `SELECT path, sha256 FROM files WHERE tenant_id = $1 AND repository_id = $2`, tenant, uuidParam(repoID))
	if err != nil {
		return nil, fmt.Errorf("load indexed files: %w", err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var p string
		var h []byte
		if err := rows.Scan(&p, &h); err != nil {
			return nil, fmt.Errorf("load indexed files: %w", err)
		}
		out[p] = h
	}
	return out, rows.Err()
}

// refreshTerms recomputes the repository's term document frequencies.
func refreshTerms(ctx context.Context, tx pgx.Tx, tenant, repoID string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM terms WHERE tenant_id = $1 AND repository_id = $2`, tenant, uuidParam(repoID)); err != nil {
		return fmt.Errorf("clear term statistics: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO terms (tenant_id, repository_id, term, df)
		SELECT $1, $2::uuid, word, ndoc FROM ts_stat(format(
			'SELECT tsv FROM chunks WHERE tenant_id = %L AND repository_id = %L::uuid', $1::text, $2::text))`,
		tenant, repoID)
	if err != nil {
		return fmt.Errorf("compute term statistics: %w", err)
	}
	return nil
}

// forgetOtherModels forgets the stored hash of every file with a chunk
// embedded by a model other than model, so that the file is written (and
// embedded) again; it stays in existing, whose rows are replaced.
func forgetOtherModels(ctx context.Context, tx pgx.Tx, tenant, repoID, model string, existing map[string][]byte) error {
	rows, err := tx.Query(ctx, `SELECT DISTINCT path FROM chunks WHERE tenant_id = $1 AND repository_id = $2 AND model <> $3`,
		tenant, uuidParam(repoID), model)
	if err != nil {
		return fmt.Errorf("find chunks of other models: %w", err)
	}
	paths, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("find chunks of other models: %w", err)
	}
	for _, p := range paths {
		if _, ok := existing[p]; ok {
			existing[p] = nil
		}
	}
	return nil
}

// markIndexed records the full-text part of a finished index: counts,
// commit, the embedding model, and a new generation when anything
// changed. The state is left as it is: READY comes with the embeddings
// (markReady).
func markIndexed(ctx context.Context, tx pgx.Tx, tenant, repoID, head, model string, changed bool) (repository, error) {
	bump := 0
	if changed {
		bump = 1
	}
	r, err := scanRepo(tx.QueryRow(ctx, `UPDATE repositories SET
			file_count = (SELECT count(*) FROM files WHERE tenant_id = $1 AND repository_id = $2),
			chunk_count = (SELECT count(*) FROM chunks WHERE tenant_id = $1 AND repository_id = $2),
			index_time = now(), last_commit = $3, generation = generation + $4, embed_model = $5
		WHERE tenant_id = $1 AND id = $2
		RETURNING `+repoColumns, tenant, uuidParam(repoID), head, bump, model))
	if err != nil {
		return repository{}, fmt.Errorf("record index: %w", err)
	}
	return r, nil
}

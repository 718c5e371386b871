package librarian

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/embed"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/toolexec"
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
}

// gitHead returns the commit checked out at root, or "" when root is not a
// git work tree.
func gitHead(ctx context.Context, root string) string {
	out, err := gitOutput(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// gitWaitDelay bounds how long git's output is read after it was killed.
const gitWaitDelay = 5 * time.Second

func gitOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	return gitOutputConfig(ctx, root, nil, args...)
}

// gitOutputConfig is gitOutput with configuration for this call only
// (key=value pairs, passed in git's GIT_CONFIG_* variables, so that a
// clone does not keep them).
func gitOutputConfig(ctx context.Context, root string, config []string, args ...string) ([]byte, error) {
	full := append([]string{"-C", root}, args...)
	env := append(toolexec.WithoutServiceSettings(os.Environ()), "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0")
	if args[0] != "clone" && args[0] != "pull" {
		// A registered directory's repository is its users': nothing its
		// configuration names (hooks, a file-system monitor) runs, and
		// what else it may run (filters) gets no secrets. Clones and pulls
		// keep this process's environment for the remote's credentials,
		// less the services' own settings.
		full = append(slices.Clone(toolexec.SafeGitArgs), full...)
		env = append(toolexec.GitEnv(toolexec.DefaultConfig().ExtraSecretPatterns), "GIT_OPTIONAL_LOCKS=0")
	} else {
		// A remote that stops sending is given up on, not waited for.
		full = append([]string{"-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60"}, full...)
	}
	if len(config) > 0 {
		if slices.ContainsFunc(config, func(kv string) bool { return strings.HasPrefix(kv, "core.sshCommand=") }) {
			// A pin's ssh command adds to the environment's, which would
			// otherwise win over it.
			env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GIT_SSH_COMMAND=") })
		}
		env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(config)))
		for i, kv := range config {
			k, v, _ := strings.Cut(kv, "=")
			env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, k), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, v))
		}
	}
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = env
	// git runs helpers (git-remote-http) that hold its output open: on
	// cancellation the whole group is killed, and the wait for the output
	// is bounded.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = gitWaitDelay
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// gitChanged lists the paths changed between commit since and the work
// tree (committed, staged, unstaged and untracked), relative to root.
func gitChanged(ctx context.Context, root, since string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	diff, err := gitOutput(ctx, root, "diff", "--name-only", "-z", "--no-renames", "--relative", since)
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(string(diff), "\x00") {
		add(p)
	}
	untracked, err := gitOutput(ctx, root, "ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(string(untracked), "\x00") {
		add(p)
	}
	return out, nil
}

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
	repoID := uuidParam(w.repoID)
	paths := make([]string, len(w.pending))
	for i, f := range w.pending {
		paths[i] = f.path
	}
	reuse := map[string][]float32{}
	if len(w.existing) > 0 {
		rows, err := w.tx.Query(ctx, `SELECT content_hash, embedding FROM chunks
			WHERE tenant_id = $1 AND repository_id = $2 AND path = ANY($3) AND model = $4`,
			w.tenant, repoID, paths, w.s.embedder.Name())
		if err != nil {
			return fmt.Errorf("load previous embeddings: %w", err)
		}
		for rows.Next() {
			var h, e []byte
			if err := rows.Scan(&h, &e); err != nil {
				rows.Close()
				return fmt.Errorf("load previous embeddings: %w", err)
			}
			if v, err := embed.Decode(e); err == nil {
				reuse[string(h)] = v
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load previous embeddings: %w", err)
		}
		if !w.res.typesChanged {
			touched, err := touchesTypes(ctx, w.tx, w.tenant, w.repoID, paths)
			if err != nil {
				return err
			}
			w.res.typesChanged = touched
		}
		if _, err := w.tx.Exec(ctx, `DELETE FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = ANY($3)`,
			w.tenant, repoID, paths); err != nil {
			return fmt.Errorf("delete changed files: %w", err)
		}
	}
	var texts []string
	var targets []*chunk
	for i := range w.pending {
		f := &w.pending[i]
		for j := range f.chunks {
			c := &f.chunks[j]
			if v, ok := reuse[string(c.hash)]; ok {
				c.embedding = v
				w.res.chunksReused++
				continue
			}
			texts = append(texts, embedText(f.path, c))
			targets = append(targets, c)
		}
	}
	if len(texts) > 0 {
		vecs, err := w.s.embedder.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("embed chunks: %w", err)
		}
		for i, v := range vecs {
			targets[i].embedding = v
		}
		w.res.chunksEmbed += int64(len(texts))
	}
	model := w.s.embedder.Name()
	var fileRows, chunkRows, symRows, edgeRows [][]any
	for _, f := range w.pending {
		fileRows = append(fileRows, []any{w.tenant, repoID, f.path, f.language, f.size, int32(f.lineCount), f.sha256})
		for _, c := range f.chunks {
			chunkRows = append(chunkRows, []any{w.tenant, repoID, c.id, f.path, f.language, int32(c.lineStart), int32(c.lineEnd),
				c.symbol, c.kind, strings.Join(c.names, " "), c.content, c.tokens, c.pathTokens, c.hash, embed.Encode(c.embedding), model})
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
	w.res.changed = true
	w.pending, w.bytes = w.pending[:0], 0
	return nil
}

// embedText is what a chunk's embedding is computed from: its symbol and
// its content (the path stays out: it would make every small chunk of a
// file look alike).
func embedText(_ string, c *chunk) string {
	return c.symbol + "\n" + c.content
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
}

// runIndexWith is runIndex with explicit options.
func (s *Service) runIndexWith(ctx context.Context, tenant string, repo repository, root string, opts indexOptions) (indexResult, error) {
	start := time.Now()
	var res indexResult
	res.head = gitHead(ctx, root)
	model := s.embedder.Name()
	// Chunks embedded by another model are invisible to search: a change of
	// model re-reads the whole tree and re-embeds every such file.
	remodel := repo.EmbedModel != model
	var changedPaths []string
	switch {
	case opts.full, remodel:
	case opts.paths != nil && len(opts.paths) <= s.cfg.DeltaMaxFiles:
		changedPaths, res.delta = opts.paths, true
		res.head = repo.LastCommit
	case opts.paths != nil:
		// Too many changes at once: a full pass (the watcher's batch limit).
	case repo.LastCommit != "" && res.head != "":
		if paths, err := gitChanged(ctx, root, repo.LastCommit); err == nil && len(paths) <= s.cfg.DeltaMaxFiles {
			changedPaths, res.delta = paths, true
		}
	}
	w := s.walker(root)
	err := pgx.BeginFunc(ctx, s.store.db, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`,
			"librarian-index:"+tenant+":"+repo.ID).Scan(&locked); err != nil {
			return fmt.Errorf("lock repository: %w", err)
		}
		if !locked {
			return errIndexBusy
		}
		existing, err := loadFileHashes(ctx, tx, tenant, repo.ID)
		if err != nil {
			return err
		}
		if remodel {
			if err := forgetOtherModels(ctx, tx, tenant, repo.ID, model, existing); err != nil {
				return err
			}
		}
		iw := &indexWriter{s: s, tx: tx, tenant: tenant, repoID: repo.ID, existing: existing, res: &res}
		rep := s.progressReporter(ctx, tenant, repo.ID, start)
		var deleted []string
		if res.delta {
			w.skipped = map[string]int{}
			for i, p := range changedPaths {
				f, reason, gone := w.readPath(filepath.FromSlash(p))
				switch {
				case gone || reason != "":
					if _, ok := existing[p]; ok {
						deleted = append(deleted, p)
					}
					if reason != "" {
						w.skipped[reason]++
					}
				default:
					res.stats.filesIndexed++
					if err := iw.put(ctx, f); err != nil {
						return err
					}
				}
				rep(i+1, len(changedPaths), false)
			}
		} else {
			total := countFiles(root)
			seen := map[string]bool{}
			done := 0
			err := w.walk(ctx, func(f sourceFile) error {
				seen[f.path] = true
				res.stats.filesIndexed++
				done++
				rep(done, total, false)
				return iw.put(ctx, f)
			})
			if err != nil {
				return err
			}
			for p := range existing {
				if !seen[p] {
					deleted = append(deleted, p)
				}
			}
		}
		if err := iw.flush(ctx); err != nil {
			return err
		}
		if len(deleted) > 0 {
			if !res.typesChanged {
				touched, err := touchesTypes(ctx, tx, tenant, repo.ID, deleted)
				if err != nil {
					return err
				}
				res.typesChanged = touched
			}
			if _, err := tx.Exec(ctx, `DELETE FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = ANY($3)`,
				tenant, uuidParam(repo.ID), deleted); err != nil {
				return fmt.Errorf("delete removed files: %w", err)
			}
			res.filesDeleted = int64(len(deleted))
			res.changed = true
		}
		res.stats.skipped = w.skipped
		for _, n := range w.skipped {
			res.stats.filesSkipped += int64(n)
		}
		if res.changed && !res.delta {
			if err := refreshTerms(ctx, tx, tenant, repo.ID); err != nil {
				return err
			}
		}
		if res.changed && (res.typesChanged || !res.delta) {
			if err := refreshImplements(ctx, tx, tenant, repo.ID); err != nil {
				return err
			}
		}
		r, err := markReady(ctx, tx, tenant, repo.ID, res.head, model, res.changed)
		if err != nil {
			return err
		}
		res.repo = r
		res.stats.chunks = r.ChunkCount
		rep(int(res.stats.filesIndexed), int(res.stats.filesIndexed), true)
		return nil
	})
	if err == nil && res.filesChanged >= analyzeAfter {
		// Fresh statistics keep the planner on the indexes after a bulk load.
		if _, aerr := s.store.db.Exec(ctx, `ANALYZE files, chunks, symbols, edges`); aerr != nil {
			s.log.WarnContext(ctx, "analyze after index", logx.Err(aerr))
		}
	}
	res.elapsed = time.Since(start)
	return res, err
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

// markReady records a finished index: counts, commit, the embedding model,
// and a new generation when anything changed.
func markReady(ctx context.Context, tx pgx.Tx, tenant, repoID, head, model string, changed bool) (repository, error) {
	bump := 0
	if changed {
		bump = 1
	}
	r, err := scanRepo(tx.QueryRow(ctx, `UPDATE repositories SET index_state = $3, index_error = '',
			file_count = (SELECT count(*) FROM files WHERE tenant_id = $1 AND repository_id = $2),
			chunk_count = (SELECT count(*) FROM chunks WHERE tenant_id = $1 AND repository_id = $2),
			index_time = now(), last_commit = $4, generation = generation + $5, embed_model = $6
		WHERE tenant_id = $1 AND id = $2
		RETURNING `+repoColumns, tenant, uuidParam(repoID), stateReady, head, bump, model))
	if err != nil {
		return repository{}, fmt.Errorf("mark repository ready: %w", err)
	}
	return r, nil
}

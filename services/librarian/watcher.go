package librarian

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"sylk.dev/sylk/pkg/logx"
)

// The file watcher (F-25) keeps the index of repositories registered by
// local path current without an explicit IndexRepository call: it watches
// every directory the walk would enter, collects the paths that changed,
// and once a repository has been quiet for the debounce interval re-indexes
// just those paths (a batch larger than librarian.delta-max-files becomes a
// full pass). Unchanged content is a no-op: files whose hash matches the
// index are not rewritten.

// watchedRepo is one repository under watch.
type watchedRepo struct {
	key    string // tenant + "/" + id
	tenant string
	id     string
	root   string
	rules  ignoreRules
	// dirs are the watched directories, absolute.
	dirs map[string]bool
	// indexMu serialises this replica's index runs of the repository.
	indexMu sync.Mutex
}

// watchBatch is the changes of one repository not yet indexed.
type watchBatch struct {
	paths map[string]bool
	full  bool
	// catchUp asks for a commit-keyed delta: what changed between the last
	// index and the start of the watch.
	catchUp bool
	first   time.Time
	timer   *time.Timer
}

// repoWatcher owns the service's single inotify instance.
type repoWatcher struct {
	s        *Service
	fw       *fsnotify.Watcher
	ctx      context.Context
	debounce time.Duration
	maxDelay time.Duration

	mu      sync.Mutex
	repos   map[string]*watchedRepo
	pending map[string]*watchBatch
	dirs    int
	// running tracks index runs started by timers.
	running sync.WaitGroup
}

// errWatchLimit means the watcher reached librarian.watch.max-dirs.
var errWatchLimit = errors.New("watched directory limit reached (librarian.watch.max-dirs)")

// watch runs the file watcher until ctx is done. kick, when it receives,
// makes the watcher look for newly indexed repositories at once.
func (s *Service) watch(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("start file watcher: %w", err)
	}
	w := &repoWatcher{
		s: s, fw: fw, ctx: ctx, debounce: s.cfg.WatchDebounce, maxDelay: 20 * s.cfg.WatchDebounce,
		repos: map[string]*watchedRepo{}, pending: map[string]*watchBatch{},
	}
	defer func() {
		w.mu.Lock()
		for _, b := range w.pending {
			b.timer.Stop()
		}
		w.pending = map[string]*watchBatch{}
		w.mu.Unlock()
		w.running.Wait()
		_ = fw.Close()
	}()
	w.sync()
	rescan := time.NewTicker(s.cfg.WatchRescan)
	defer rescan.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rescan.C:
			w.sync()
		case <-s.watchKick:
			w.sync()
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			w.handle(ev)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			s.log.WarnContext(ctx, "file watcher", logx.Err(err))
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: every repository gets a full pass.
				w.mu.Lock()
				for key := range w.repos {
					w.enqueueLocked(key, "", true)
				}
				w.mu.Unlock()
			}
		}
	}
}

// kickWatcher asks the watcher to pick up a newly indexed repository.
func (s *Service) kickWatcher() {
	select {
	case s.watchKick <- struct{}{}:
	default:
	}
}

// sync makes the watched set match the repositories registered by local
// path and indexed at least once. This is the one query not scoped to a
// tenant: the watcher serves every tenant; each index it runs is scoped to
// the repository's tenant.
func (w *repoWatcher) sync() {
	ctx := w.ctx
	rows, err := w.s.store.db.Query(ctx, `SELECT tenant_id, id::text, path FROM repositories
		WHERE url = '' AND index_time IS NOT NULL ORDER BY tenant_id, id`)
	if err != nil {
		if ctx.Err() == nil {
			w.s.log.WarnContext(ctx, "list repositories to watch", logx.Err(err))
		}
		return
	}
	want := map[string][2]string{}
	var order []string
	for rows.Next() {
		var tenant, id, path string
		if err := rows.Scan(&tenant, &id, &path); err != nil {
			rows.Close()
			w.s.log.WarnContext(ctx, "list repositories to watch", logx.Err(err))
			return
		}
		key := tenant + "/" + id
		want[key] = [2]string{tenant, path}
		order = append(order, key)
	}
	rows.Close()
	if rows.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, r := range w.repos {
		if _, ok := want[key]; !ok {
			w.dropLocked(r)
		}
	}
	for _, key := range order {
		if _, ok := w.repos[key]; ok {
			continue
		}
		tenant, path := want[key][0], want[key][1]
		root, problem := w.s.checkRoot(tenant, path)
		if problem != "" || root != path {
			continue
		}
		id := strings.TrimPrefix(key, tenant+"/")
		r := &watchedRepo{key: key, tenant: tenant, id: id, root: root, rules: w.s.walker(root).ignore, dirs: map[string]bool{}}
		w.repos[key] = r
		if _, err := w.addTreeLocked(r, root); err != nil {
			w.s.log.WarnContext(ctx, "watch repository", slog.String(logx.KeyTenantID, tenant),
				slog.String("repository", id), logx.Err(err))
		}
		if gitHead(ctx, root) != "" {
			// Changes made before the watch began (since the last index, or
			// while no replica watched) are found through git.
			w.enqueueLocked(key, "", false)
			w.pending[key].catchUp = true
		}
	}
	w.s.watching.Store(int64(len(w.repos)))
}

// dropLocked stops watching a repository.
func (w *repoWatcher) dropLocked(r *watchedRepo) {
	for d := range r.dirs {
		_ = w.fw.Remove(d)
	}
	w.dirs -= len(r.dirs)
	if b, ok := w.pending[r.key]; ok {
		b.timer.Stop()
		delete(w.pending, r.key)
	}
	delete(w.repos, r.key)
	w.s.watching.Store(int64(len(w.repos)))
}

// addTreeLocked watches dir and the directories below it that the walk
// would enter, and returns the files found under it (relative, slash
// separated), which a directory created after the watch began may already
// hold.
func (w *repoWatcher) addTreeLocked(r *watchedRepo, dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != dir {
				return fs.SkipDir
			}
			return nil
		}
		rel, rerr := filepath.Rel(r.root, p)
		if rerr != nil {
			return nil
		}
		slash := filepath.ToSlash(rel)
		if !d.IsDir() {
			if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
				files = append(files, slash)
			}
			return nil
		}
		if p != r.root && (strings.HasPrefix(d.Name(), ".") || skippedDirs[d.Name()] || r.rules.match(slash, true)) {
			return fs.SkipDir
		}
		if r.dirs[p] {
			return nil
		}
		if w.dirs >= w.s.cfg.WatchMaxDirs {
			return errWatchLimit
		}
		if err := w.fw.Add(p); err != nil {
			if p == dir {
				return err
			}
			return fs.SkipDir
		}
		r.dirs[p] = true
		w.dirs++
		return nil
	})
	return files, err
}

// repoOfLocked finds the watched repository holding an absolute path.
func (w *repoWatcher) repoOfLocked(p string) (*watchedRepo, string) {
	for _, r := range w.repos {
		if within(r.root, p) && p != r.root {
			rel, err := filepath.Rel(r.root, p)
			if err == nil {
				return r, filepath.ToSlash(rel)
			}
		}
	}
	return nil, ""
}

// handle maps one file system event onto the repository's pending batch:
// a created directory is watched and its files queued; a removed or
// renamed watched directory, or a changed .gitignore, asks for a full
// pass; any other path is queued (the index run reads it, or deletes it
// when it is gone).
func (w *repoWatcher) handle(ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r, rel := w.repoOfLocked(ev.Name)
	if r == nil || inSkippedDir(rel) {
		return
	}
	base := filepath.Base(ev.Name)
	switch {
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		if r.dirs[ev.Name] {
			for d := range r.dirs {
				if within(ev.Name, d) {
					// A renamed directory keeps its watch under the old name;
					// a removed one has lost it already (the error is moot).
					_ = w.fw.Remove(d)
					delete(r.dirs, d)
					w.dirs--
				}
			}
			w.enqueueLocked(r.key, "", true)
			return
		}
	case ev.Has(fsnotify.Create):
		if info, err := os.Lstat(ev.Name); err == nil && info.IsDir() {
			if strings.HasPrefix(base, ".") || skippedDirs[base] || r.rules.match(rel, true) {
				return
			}
			files, err := w.addTreeLocked(r, ev.Name)
			if err != nil {
				w.s.log.WarnContext(w.ctx, "watch new directory", slog.String("repository", r.id), logx.Err(err))
			}
			for _, f := range files {
				w.enqueueLocked(r.key, f, false)
			}
			return
		}
	}
	if base == ".gitignore" {
		// What is indexed changes (a nested .gitignore too): reload the
		// rules and walk everything.
		r.rules = w.s.walker(r.root).ignore
		if _, err := w.addTreeLocked(r, r.root); err != nil {
			w.s.log.WarnContext(w.ctx, "watch repository", slog.String("repository", r.id), logx.Err(err))
		}
		w.enqueueLocked(r.key, "", true)
		return
	}
	w.enqueueLocked(r.key, rel, false)
}

// enqueueLocked adds a path (or a full pass) to a repository's batch and
// (re)arms its timer: the batch is indexed once no event came for the
// debounce interval, or at the latest maxDelay after its first event.
func (w *repoWatcher) enqueueLocked(key, rel string, full bool) {
	b, ok := w.pending[key]
	if !ok {
		b = &watchBatch{paths: map[string]bool{}, first: time.Now()}
		w.pending[key] = b
		b.timer = time.AfterFunc(w.debounce, func() { w.fire(key) })
	} else if time.Since(b.first) < w.maxDelay {
		b.timer.Reset(w.debounce)
	}
	if full {
		b.full = true
	} else if rel != "" {
		b.paths[rel] = true
	}
}

// fire indexes a repository's batch.
func (w *repoWatcher) fire(key string) {
	w.mu.Lock()
	b, ok := w.pending[key]
	r := w.repos[key]
	if !ok || r == nil || w.ctx.Err() != nil {
		w.mu.Unlock()
		return
	}
	delete(w.pending, key)
	w.running.Add(1)
	w.mu.Unlock()
	defer w.running.Done()

	paths := make([]string, 0, len(b.paths))
	for p := range b.paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	r.indexMu.Lock()
	err := w.s.indexChanges(w.ctx, r.tenant, r.id, r.root, paths, b.full, b.catchUp)
	r.indexMu.Unlock()
	switch {
	case err == nil || w.ctx.Err() != nil:
	case errors.Is(err, errIndexBusy):
		// Another index (here or on another replica) holds the lock: try
		// again after it, with the same changes.
		w.mu.Lock()
		if _, ok := w.repos[key]; ok {
			for _, p := range paths {
				w.enqueueLocked(key, p, false)
			}
			if b.full || b.catchUp {
				w.enqueueLocked(key, "", b.full)
				w.pending[key].catchUp = w.pending[key].catchUp || b.catchUp
			}
		}
		w.mu.Unlock()
	default:
		w.s.log.WarnContext(w.ctx, "index watched changes", slog.String(logx.KeyTenantID, r.tenant),
			slog.String("repository", r.id), logx.Err(err))
	}
}

// indexChanges re-indexes the given paths of a repository (or all of it)
// for the file watcher, and announces the change like IndexRepository.
func (s *Service) indexChanges(ctx context.Context, tenant, repoID, root string, paths []string, full, catchUp bool) error {
	repo, err := s.store.getRepo(ctx, tenant, repoID)
	if err != nil {
		return err
	}
	switch {
	case full || catchUp:
		// A catch-up is a commit-keyed delta, which also covers the paths.
		paths = nil
	case paths == nil:
		paths = []string{}
	}
	res, err := s.runIndexWith(ctx, tenant, repo, root, indexOptions{full: full, paths: paths})
	if err != nil {
		return err
	}
	s.recordIndex(res.stats)
	if res.changed {
		s.announceChange(ctx, tenant, repoID, res.chunksEmbed+res.chunksReused)
	}
	s.metrics.watchIndexes.Inc()
	s.log.DebugContext(ctx, "watched changes indexed", slog.String(logx.KeyTenantID, tenant),
		slog.String("repository", repoID), slog.Int("paths", len(paths)), slog.Bool("full", full || !res.delta),
		slog.Int64("changed", res.filesChanged), slog.Int64("deleted", res.filesDeleted), slog.Duration("duration", res.elapsed))
	return nil
}

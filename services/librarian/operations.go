package librarian

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// How a running operation reports: progress is written at most every
// opFlushEvery (a poller sees it move), and at least every opHeartbeat, so
// that an operation silent for opStaleAfter is known to have lost its
// process.
const (
	opFlushEvery   = 250 * time.Millisecond
	opHeartbeat    = 10 * time.Second
	opStaleAfter   = time.Minute
	maxErrorSample = 5
	// reasonOperationCancelled: the index was cancelled on request.
	reasonOperationCancelled = "OPERATION_CANCELLED"
	// reasonLibrarianStopping: the librarian shut down during the index.
	reasonLibrarianStopping = "LIBRARIAN_STOPPING"
)

var (
	// errCancelRequested is the cause of a cancelled operation's context.
	errCancelRequested = errors.New("cancel requested")
	// errStopping is the cause when the librarian shuts down.
	errStopping = errors.New("librarian stopping")
)

// operations tracks the index operations this process runs.
type operations struct {
	// ctx is the parent of every operation's context; stop ends them.
	ctx  context.Context
	stop context.CancelCauseFunc
	mu   sync.Mutex
	runs map[string]*opTracker
	wg   sync.WaitGroup
}

func newOperations() *operations {
	ctx, stop := context.WithCancelCause(context.Background())
	return &operations{ctx: ctx, stop: stop, runs: map[string]*opTracker{}}
}

// opTracker is one running operation: the index reports to it (its
// methods are safe on a nil tracker: runs of the file watcher have none)
// and its flusher writes what it holds.
type opTracker struct {
	s      *Service
	tenant string
	id     string
	repoID string
	cancel context.CancelCauseFunc
	// done is closed once the operation's end is recorded; st and res are
	// then set (st nil on success).
	done chan struct{}
	st   *status.Status
	res  indexResult

	mu    sync.Mutex
	p     progress
	dirty bool
	// flushMu orders the writes as their snapshots: an older snapshot
	// never lands after a newer one (lexical_ready never goes back).
	flushMu sync.Mutex
	// wake asks the flusher for an immediate write (a phase change).
	wake chan struct{}
}

func (t *opTracker) update(fn func(p *progress), now bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	fn(&t.p)
	t.dirty = true
	t.mu.Unlock()
	if now {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// phase moves the operation to phase p.
func (t *opTracker) phase(p string) { t.update(func(pr *progress) { pr.Phase = p }, true) }

// files records files read of total.
func (t *opTracker) files(done, total int) {
	t.update(func(p *progress) { p.FilesDone, p.FilesTotal = int64(done), int64(max(total, done)) }, false)
}

// chunks adds n chunks written or embedded.
func (t *opTracker) chunks(n int) { t.update(func(p *progress) { p.ChunksDone += int64(n) }, false) }

// semanticTotal starts the semantic phase with n chunks to embed.
func (t *opTracker) semanticTotal(n int64) {
	t.update(func(p *progress) { p.Phase, p.ChunksTotal, p.ChunksDone = phaseSemantic, n, 0 }, true)
}

// fileError counts a file that could not be read, keeping a few paths.
func (t *opTracker) fileError(rel string) {
	t.update(func(p *progress) {
		p.FileErrors++
		if len(p.ErrorSamples) < maxErrorSample {
			p.ErrorSamples = append(p.ErrorSamples, rel)
		}
	}, false)
}

// lexicalReady records that the new full-text index is committed; it is
// written before returning, so that no poller sees the operation done
// without having been able to see this.
func (t *opTracker) lexicalReady(ctx context.Context) {
	t.update(func(p *progress) { p.LexicalReady = true }, false)
	if t != nil {
		t.flush(ctx)
	}
}

func (t *opTracker) snapshot() (progress, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, dirty := t.p, t.dirty
	p.ErrorSamples = append([]string{}, t.p.ErrorSamples...)
	t.dirty = false
	return p, dirty
}

// flush writes the progress; a cancel asked through another replica
// (or before this one knew the operation) cancels the run here.
func (t *opTracker) flush(ctx context.Context) {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	p, _ := t.snapshot()
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
	defer cancel()
	cancelAsked, err := t.s.store.saveProgress(c, t.tenant, t.id, p)
	if err != nil {
		t.s.log.WarnContext(ctx, "save index progress", slog.String("operation", t.id), logx.Err(err))
	} else {
		t.s.notifyOperation(t.id)
	}
	if cancelAsked {
		t.cancel(errCancelRequested)
	}
}

// flusher writes progress while the operation runs: when it changed (at
// most every opFlushEvery, at once on a phase change) and every
// opHeartbeat regardless.
func (t *opTracker) flusher(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(opFlushEvery)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-t.wake:
		case <-tick.C:
		}
		t.mu.Lock()
		dirty := t.dirty
		t.mu.Unlock()
		if dirty || time.Since(last) >= opHeartbeat {
			t.flush(ctx)
			last = time.Now()
		}
	}
}

// startOperation records a new operation of the repository and runs work
// in the background with the caller's identity, under a context that
// CancelOperation and the librarian's shutdown end. It starts by cloning
// or fetching a repository registered by URL, else by scanning.
func (s *Service) startOperation(ctx context.Context, id identity.Identity, repo repository, kind string, full bool,
	work func(ctx context.Context, t *opTracker) (indexResult, error)) (*opTracker, error) {
	repoID, phase := repo.ID, phaseScanning
	if repo.URL != "" {
		phase = phaseCloning
	}
	op := operation{ID: ids.New(), RepoID: repoID, Kind: kind, Full: full, progress: progress{Phase: phase}}
	if err := s.store.insertOperation(ctx, id.TenantID, op); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancelCause(identity.NewContext(s.ops.ctx, id))
	t := &opTracker{s: s, tenant: id.TenantID, id: op.ID, repoID: repoID, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1), p: op.progress}
	s.ops.mu.Lock()
	s.ops.runs[op.ID] = t
	s.ops.mu.Unlock()
	s.ops.wg.Add(1)
	go func() {
		defer s.ops.wg.Done()
		stop := make(chan struct{})
		flushed := make(chan struct{})
		go func() { defer close(flushed); t.flusher(runCtx, stop) }()
		res, err := work(runCtx, t)
		close(stop)
		<-flushed
		s.finishOperation(runCtx, t, res, err)
		cancel(nil)
	}()
	s.log.InfoContext(ctx, "index operation started", slog.String(logx.KeyTenantID, id.TenantID),
		slog.String("operation", op.ID), slog.String("repository", repoID), slog.String("kind", kind))
	return t, nil
}

// finishOperation records the end of an operation and wakes its waiters.
func (s *Service) finishOperation(ctx context.Context, t *opTracker, res indexResult, err error) {
	t.res = res
	if err != nil {
		t.st = s.operationStatus(ctx, t, err)
	}
	p, _ := t.snapshot()
	code, msg := codes.OK, ""
	if t.st != nil {
		code, msg = t.st.Code(), t.st.Message()
	} else {
		p.Phase = phaseDone
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
	defer cancel()
	if ferr := s.store.finishOperation(c, t.tenant, t.id, p, code, msg); ferr != nil {
		s.log.ErrorContext(ctx, "record index operation end", slog.String("operation", t.id), logx.Err(ferr))
	}
	s.notifyOperation(t.id)
	s.ops.mu.Lock()
	delete(s.ops.runs, t.id)
	s.ops.mu.Unlock()
	s.log.InfoContext(ctx, "index operation done", slog.String(logx.KeyTenantID, t.tenant), slog.String("operation", t.id),
		slog.String("code", code.String()), slog.Duration("duration", res.elapsed))
	close(t.done)
}

// operationStatus is the status an operation failed with: a cancel and a
// shutdown say so; other errors as the API reports them.
func (s *Service) operationStatus(ctx context.Context, t *opTracker, err error) *status.Status {
	switch context.Cause(ctx) {
	case errCancelRequested:
		return apierr.New(codes.Canceled, reasonOperationCancelled, "index cancelled on request (%s%s)", operationPrefix, t.id).GRPCStatus()
	case errStopping:
		return apierr.New(codes.Unavailable, reasonLibrarianStopping,
			"the librarian shut down during the index (%s%s); index the repository again", operationPrefix, t.id).GRPCStatus()
	}
	return status.Convert(apierr.Status(ctx, s.log, "index repository", err))
}

// wait blocks until the operation is done or ctx ends; the operation
// keeps running when the caller goes away.
func (t *opTracker) wait(ctx context.Context) error {
	select {
	case <-t.done:
	case <-ctx.Done():
		return apierr.Status(ctx, t.s.log, "wait for index", ctx.Err())
	}
	if t.st != nil {
		return t.st.Err()
	}
	return nil
}

// stopOperations ends the operations this process runs (their end is
// recorded as a shutdown) and waits for them, at most until ctx ends.
func (s *Service) stopOperations(ctx context.Context) {
	s.ops.stop(errStopping)
	done := make(chan struct{})
	go func() { s.ops.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// sweepOperations marks failed the operations of processes that are gone,
// at startup and then every opStaleAfter until ctx ends.
func (s *Service) sweepOperations(ctx context.Context) {
	for {
		if n, err := s.store.expireOperations(ctx, "", opStaleAfter); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "expire lost index operations", logx.Err(err))
		} else if n > 0 {
			s.log.WarnContext(ctx, "index operations lost with their process marked failed", slog.Int64("repositories", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(opStaleAfter):
		}
	}
}

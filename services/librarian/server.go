package librarian

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// Request limits that are part of the API rather than deployment settings.
const (
	maxPathLen         = 4096
	maxDisplayNameLen  = 200
	defaultListPage    = 50
	maxListPage        = 200
	maxSearchRepos     = 100
	repositoryPrefix   = "repositories/"
	stateUpdateTimeout = 10 * time.Second
)

// CreateRepository registers a directory, or a git URL to clone, and
// indexes it unless index is false. Cloning and indexing run as an
// operation: the call answers at once with the repository INDEXING and the
// operation to follow, or, with wait, once the operation is done. A first
// index that fails or is cancelled leaves the repository registered and
// FAILED with index_error saying why (the operation's error says it too).
func (s *Service) CreateRepository(ctx context.Context, req *librarianv1.CreateRepositoryRequest) (*librarianv1.CreateRepositoryResponse, error) {
	id, err := requireWriter(ctx)
	if err != nil {
		return nil, err
	}
	in := req.GetRepository()
	if in == nil {
		return nil, apierr.Invalid("repository", "required")
	}
	repo, err := s.newRepository(ctx, id, in)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create repository", err)
	}
	out, err := s.register(ctx, id.TenantID, repo)
	if err != nil {
		return nil, err
	}
	index := req.Index == nil || req.GetIndex()
	resp := &librarianv1.CreateRepositoryResponse{}
	if index || out.URL != "" {
		if out, resp.Operation, err = s.firstOperation(ctx, id, out, index, req.GetWait()); err != nil {
			return nil, err
		}
	}
	s.log.InfoContext(ctx, "repository registered", slog.String(logx.KeyTenantID, id.TenantID),
		slog.String("repository", out.ID), slog.Bool("index", index), slog.String("operation", resp.GetOperation()))
	resp.Repository = toProto(out)
	return resp, nil
}

// firstOperation starts the operation that clones (for a URL) and indexes
// (when index) a repository just registered, and waits for it when wait.
// A repository whose operation cannot even start is not left registered:
// the caller gets the error.
func (s *Service) firstOperation(ctx context.Context, id identity.Identity, repo repository, index, wait bool) (repository, string, error) {
	registered := repo
	t, err := s.startOperation(ctx, id, repo, opKindCreate, true, func(ctx context.Context, t *opTracker) (indexResult, error) {
		if !index {
			return s.cloneOnly(ctx, id.TenantID, registered, t)
		}
		return s.reindex(ctx, id.TenantID, registered, true, t)
	})
	if err != nil {
		s.unregister(ctx, id.TenantID, repo)
		return repo, "", apierr.Status(ctx, s.log, "create repository", err)
	}
	name := operationPrefix + t.id
	if !wait {
		repo.State, repo.Operation = stateIndexing, t.id
		return repo, name, nil
	}
	if err := t.wait(ctx); err != nil {
		return repo, name, withRepository(err, repo.ID)
	}
	return t.res.repo, name, nil
}

// cloneOnly is the operation of a URL registered without indexing: the
// clone, after which the repository is PENDING (nothing indexed yet).
func (s *Service) cloneOnly(ctx context.Context, tenant string, r repository, t *opTracker) (indexResult, error) {
	start := time.Now()
	if err := s.fetchRemote(ctx, tenant, r, t); err != nil {
		return indexResult{}, err
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
	defer cancel()
	if err := s.store.setState(c, tenant, r.ID, statePending, ""); err != nil {
		return indexResult{}, err
	}
	out, err := s.store.getRepo(c, tenant, r.ID)
	return indexResult{repo: out, elapsed: time.Since(start)}, err
}

// withRepository adds to a failed first operation's error that the
// repository stays registered, so a caller that waited knows where to look.
func withRepository(err error, repoID string) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	p := st.Proto()
	p.Message += "; " + repositoryPrefix + repoID + " stays registered (FAILED): index it again or register it anew"
	return status.FromProto(p).Err()
}

// newRepository is the repository in asks for: a clone of its URL (made by
// its first operation), or its directory of the server, with its display
// name.
func (s *Service) newRepository(ctx context.Context, id identity.Identity, in *librarianv1.Repository) (repository, error) {
	repo := repository{ID: ids.New()}
	if u := strings.TrimSpace(in.GetUrl()); u != "" {
		if in.GetPath() != "" {
			return repo, apierr.Invalid("repository", "set path or url, not both")
		}
		dest, err := s.clonePath(ctx, id, repo.ID, u)
		if err != nil {
			return repo, err
		}
		repo.Path, repo.URL, repo.PublicRemote = dest, u, s.publicOnly(id, u)
	} else {
		var err error
		if repo.Path, err = s.checkNewPath(id.TenantID, "repository.path", in.GetPath()); err != nil {
			return repo, err
		}
	}
	display := strings.TrimSpace(in.GetDisplayName())
	switch {
	case !plainText(display):
		return repo, apierr.Invalid("repository.display_name", "must be valid UTF-8 without NUL")
	case utf8.RuneCountInString(display) > maxDisplayNameLen:
		return repo, apierr.Invalid("repository.display_name", "must be at most %d characters", maxDisplayNameLen)
	case display == "" && repo.URL != "":
		display = strings.TrimSuffix(path.Base(strings.TrimSuffix(repo.URL, "/")), ".git")
	case display == "":
		display = filepath.Base(repo.Path)
	}
	repo.DisplayName = display
	return repo, nil
}

// register stores a new repository of the tenant; a clone made for it is
// removed when it cannot be stored.
func (s *Service) register(ctx context.Context, tenant string, repo repository) (repository, error) {
	var out repository
	err := pgx.BeginFunc(ctx, s.store.db, func(tx pgx.Tx) error {
		var err error
		if out, err = insertRepo(ctx, tx, tenant, repo); err != nil {
			return err
		}
		return s.recordRegistered(ctx, tx, tenant, out) // audit.go
	})
	if errors.Is(err, errDuplicatePath) {
		msg := fmt.Sprintf("repository.path %q is already registered", repo.Path)
		if existing, lookupErr := s.store.repoIDByPath(ctx, tenant, repo.Path); lookupErr == nil {
			msg += " as " + repositoryPrefix + existing
		}
		return out, errDuplicatePath.Withf("%s", msg)
	}
	if err != nil {
		if repo.URL != "" {
			_ = os.RemoveAll(repo.Path)
		}
		return out, apierr.Status(ctx, s.log, "create repository", err)
	}
	return out, nil
}

// unregister removes a repository whose first operation could not start,
// and its clone. It runs even when ctx is canceled.
func (s *Service) unregister(ctx context.Context, tenant string, repo repository) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
	defer cancel()
	if _, err := s.store.db.Exec(c, `DELETE FROM repositories WHERE tenant_id = $1 AND id = $2`, tenant, uuidParam(repo.ID)); err != nil {
		s.log.ErrorContext(ctx, "remove repository after failed index", logx.Err(err))
	}
	if repo.URL != "" {
		_ = os.RemoveAll(repo.Path)
	}
}

// GetRepository returns one of the tenant's repositories.
func (s *Service) GetRepository(ctx context.Context, req *librarianv1.GetRepositoryRequest) (*librarianv1.GetRepositoryResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	repoID, err := parseName(req.GetName(), "name")
	if err != nil {
		return nil, err
	}
	r, err := s.store.getRepo(ctx, id.TenantID, repoID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get repository", err)
	}
	return &librarianv1.GetRepositoryResponse{Repository: toProto(r)}, nil
}

// ListRepositories pages through the tenant's repositories, oldest first.
func (s *Service) ListRepositories(ctx context.Context, req *librarianv1.ListRepositoriesRequest) (*librarianv1.ListRepositoriesResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultListPage, maxListPage)
	if err != nil {
		return nil, err
	}
	after := ""
	if tok := req.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !ids.Valid(string(raw)) {
			return nil, apierr.Invalid("page_token", "is not a token from a previous response")
		}
		after = string(raw)
	}
	rows, err := s.store.listRepos(ctx, id.TenantID, after, size+1)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list repositories", err)
	}
	resp := &librarianv1.ListRepositoriesResponse{}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(rows[size-1].ID))
	}
	for _, r := range rows {
		resp.Repositories = append(resp.Repositories, toProto(r))
	}
	return resp, nil
}

// IndexRepository re-reads a repository's files as an operation and
// replaces its index: the full-text part in one transaction, then the
// embeddings. The call answers at once unless wait is set. The repository is
// INDEXING meanwhile, then READY, or FAILED with index_error (the previous
// index stays searchable).
func (s *Service) IndexRepository(ctx context.Context, req *librarianv1.IndexRepositoryRequest) (*librarianv1.IndexRepositoryResponse, error) {
	id, err := requireWriter(ctx)
	if err != nil {
		return nil, err
	}
	repoID, err := parseName(req.GetName(), "name")
	if err != nil {
		return nil, err
	}
	r, err := s.store.getRepo(ctx, id.TenantID, repoID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "index repository", err)
	}
	stored := r
	t, err := s.startOperation(ctx, id, r, opKindIndex, req.GetFull(), func(ctx context.Context, t *opTracker) (indexResult, error) {
		return s.reindex(ctx, id.TenantID, stored, req.GetFull(), t)
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "index repository", err)
	}
	if !req.GetWait() {
		r.State, r.IndexError, r.Operation = stateIndexing, "", t.id
		return &librarianv1.IndexRepositoryResponse{Repository: toProto(r), Operation: operationPrefix + t.id}, nil
	}
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	res := t.res
	return &librarianv1.IndexRepositoryResponse{
		Repository:     toProto(res.repo),
		FilesIndexed:   res.stats.filesIndexed,
		FilesSkipped:   res.stats.filesSkipped,
		Delta:          res.delta,
		FilesChanged:   res.filesChanged,
		ChunksEmbedded: res.chunksEmbed,
		Operation:      operationPrefix + t.id,
	}, nil
}

// reindex is the work of an index operation: fetch the remote, check the
// directory, index it.
func (s *Service) reindex(ctx context.Context, tenant string, r repository, full bool, t *opTracker) (indexResult, error) {
	if err := s.fetchRemote(ctx, tenant, r, t); err != nil {
		return indexResult{}, err
	}
	root, problem := s.checkRoot(tenant, r.Path)
	if problem == "" && root != r.Path {
		problem = fmt.Sprintf("%q now resolves to %q; register that path instead", r.Path, root)
	}
	if problem != "" {
		s.failIndex(ctx, tenant, r.ID, problem)
		return indexResult{}, unreadable("repository path: %s", problem)
	}
	res, err := s.runIndexWith(ctx, tenant, r, root, indexOptions{full: full, progress: t})
	if errors.Is(err, errIndexBusy) {
		return res, errIndexBusy
	}
	if err != nil {
		msg := indexErrorMessage(err)
		if context.Cause(ctx) == errCancelRequested {
			msg = "index cancelled on request (" + operationPrefix + t.id + ")"
			if res.lexicalDone {
				msg += "; full-text search has the new index, semantic search part of it"
			}
		}
		s.failIndex(ctx, tenant, r.ID, msg)
		return res, err
	}
	stats := res.stats
	s.recordIndex(stats)
	s.kickWatcher()
	if res.changed {
		s.announceChange(ctx, tenant, r.ID, res.chunksEmbed+res.chunksReused)
	}
	s.log.InfoContext(ctx, "repository indexed", slog.String(logx.KeyTenantID, tenant),
		slog.String("repository", r.ID), slog.Int64("files", stats.filesIndexed),
		slog.Int64("skipped", stats.filesSkipped), slog.Int64("chunks", stats.chunks), slog.Bool("delta", res.delta),
		slog.Int64("changed", res.filesChanged), slog.Int64("embedded", res.chunksEmbed), slog.Duration("duration", res.elapsed))
	return res, nil
}

// fetchRemote clones or pulls the remote of a repository registered by
// URL (nothing to do for a path); a failure leaves it FAILED.
func (s *Service) fetchRemote(ctx context.Context, tenant string, r repository, t *opTracker) error {
	if r.URL == "" {
		return nil
	}
	t.phase(phaseCloning)
	verb := "fetching"
	if _, err := os.Lstat(r.Path); errors.Is(err, os.ErrNotExist) {
		verb = "cloning"
	}
	err := s.fetchRepository(ctx, tenant, r)
	if err == nil {
		return nil
	}
	msg := verb + " " + r.URL + " failed"
	if context.Cause(ctx) == errCancelRequested {
		msg = verb + " " + r.URL + " cancelled on request (" + operationPrefix + t.id + ")"
	}
	s.failIndex(ctx, tenant, r.ID, msg)
	return apierr.FailedPrecondition(reasonCloneFailed, "%s %s: %v", verb, r.URL, err)
}

// failIndex records a failed index. It runs even when ctx is canceled, so
// that a repository is never left INDEXING by an abandoned request.
func (s *Service) failIndex(ctx context.Context, tenant, repoID, msg string) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
	defer cancel()
	if err := s.store.setState(c, tenant, repoID, stateFailed, msg); err != nil {
		s.log.ErrorContext(ctx, "record index failure", slog.String("repository", repoID), logx.Err(err))
	}
}

func (s *Service) recordIndex(st indexStats) {
	s.metrics.indexFiles.WithLabelValues(resultIndexed).Add(float64(st.filesIndexed))
	for reason, n := range st.skipped {
		s.metrics.indexFiles.WithLabelValues(reason).Add(float64(n))
	}
}

func (s *Service) walker(root string) *walker {
	w := &walker{
		root:          root,
		maxFileBytes:  s.cfg.MaxFileBytes,
		maxFiles:      s.cfg.MaxFiles,
		chunkLines:    s.cfg.ChunkLines,
		overlap:       s.cfg.ChunkOverlap,
		maxChunkLines: s.cfg.MaxChunkLines,
		modulePath:    goModulePath(root),
		skipped:       map[string]int{},
	}
	for _, p := range s.cfg.Ignore {
		w.ignore.add(p)
	}
	w.ignore.loadGitignore(root)
	return w
}

// maxGoModBytes bounds how much of a go.mod is read for its module path.
const maxGoModBytes = 1 << 20

// readRepoFile reads the file rel of the repository at root, at most limit
// bytes of it, when it is, or links to, a regular file inside the
// repository: not /dev/zero, nor a file outside.
func readRepoFile(root, rel string, limit int64) ([]byte, bool) {
	f, err := openInside(root, filepath.Join(root, rel))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, limit))
	return data, err == nil
}

// goModulePath reads the module path from root's go.mod, "" without one
// (readRepoFile says which go.mod counts).
func goModulePath(root string) string {
	data, ok := readRepoFile(root, "go.mod", maxGoModBytes)
	if !ok {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// requireWriter returns the caller, who must be allowed to change the
// tenant's repositories (viewers only read and search).
func requireWriter(ctx context.Context) (identity.Identity, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return id, err
	}
	if id.Role == identity.RoleViewer {
		return id, errViewer
	}
	return id, nil
}

// parseName returns the id of a "repositories/{id}" name.
func parseName(name, field string) (string, error) {
	if name == "" {
		return "", apierr.Invalid(field, "required")
	}
	id, ok := strings.CutPrefix(name, repositoryPrefix)
	if !ok || !ids.Valid(id) {
		return "", apierr.Invalid(field, "%q is not a repository name (want %s{uuid})", truncateRunes(name, 100), repositoryPrefix)
	}
	return strings.ToLower(id), nil
}

func toProto(r repository) *librarianv1.Repository {
	out := &librarianv1.Repository{
		Name:        repositoryPrefix + r.ID,
		Id:          r.ID,
		DisplayName: r.DisplayName,
		Path:        r.Path,
		IndexState:  stateToProto(r.State),
		FileCount:   r.FileCount,
		ChunkCount:  r.ChunkCount,
		CreateTime:  timestamppb.New(r.CreateTime),
		IndexError:  r.IndexError,
		Url:         r.URL,
		LastCommit:  r.LastCommit,
	}
	if r.Operation != "" {
		out.Operation = operationPrefix + r.Operation
	}
	if r.IndexTime != nil {
		out.IndexTime = timestamppb.New(*r.IndexTime)
	}
	return out
}

func stateToProto(s string) librarianv1.IndexState {
	switch s {
	case statePending:
		return librarianv1.IndexState_INDEX_STATE_PENDING
	case stateIndexing:
		return librarianv1.IndexState_INDEX_STATE_INDEXING
	case stateReady:
		return librarianv1.IndexState_INDEX_STATE_READY
	case stateFailed:
		return librarianv1.IndexState_INDEX_STATE_FAILED
	}
	return librarianv1.IndexState_INDEX_STATE_UNSPECIFIED
}

// plainText reports whether s is valid UTF-8 without NUL: text the
// database can compare and store.
func plainText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// truncateRunes shortens s to at most n runes, marking the cut.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// pageSize is a request's page size: def when 0, at most limit; negative
// is invalid.
func pageSize(n int32, def, limit int) (int, error) {
	switch {
	case n < 0:
		return 0, apierr.Invalid("page_size", "must not be negative")
	case n == 0:
		return def, nil
	}
	return min(int(n), limit), nil
}

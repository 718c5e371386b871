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

// CreateRepository registers a directory and, when asked, indexes it in the
// same transaction: on failure nothing is stored.
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
	if req.GetIndex() {
		if out, err = s.indexRegistered(ctx, id.TenantID, out); err != nil {
			return nil, apierr.Status(ctx, s.log, "create repository", err)
		}
	}
	s.log.InfoContext(ctx, "repository registered", slog.String(logx.KeyTenantID, id.TenantID),
		slog.String("repository", out.ID), slog.Bool("indexed", req.GetIndex()))
	return &librarianv1.CreateRepositoryResponse{Repository: toProto(out)}, nil
}

// newRepository is the repository in asks for: a clone of its URL, or its
// directory of the server, with its display name.
func (s *Service) newRepository(ctx context.Context, id identity.Identity, in *librarianv1.Repository) (repository, error) {
	repo := repository{ID: ids.New()}
	if u := strings.TrimSpace(in.GetUrl()); u != "" {
		if in.GetPath() != "" {
			return repo, apierr.Invalid("repository", "set path or url, not both")
		}
		cloned, err := s.cloneRepository(ctx, id, repo.ID, u)
		if err != nil {
			return repo, err
		}
		repo.Path, repo.URL, repo.PublicRemote = cloned, u, s.publicOnly(id, u)
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

// indexRegistered runs the first index of a repository just registered.
// Nothing stays registered (nor cloned) when it fails.
func (s *Service) indexRegistered(ctx context.Context, tenant string, repo repository) (repository, error) {
	res, err := s.runIndex(ctx, tenant, repo, repo.Path, true)
	if err != nil {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
		if _, delErr := s.store.db.Exec(c, `DELETE FROM repositories WHERE tenant_id = $1 AND id = $2`, tenant, uuidParam(repo.ID)); delErr != nil {
			s.log.ErrorContext(ctx, "remove repository after failed index", logx.Err(delErr))
		}
		cancel()
		if repo.URL != "" {
			_ = os.RemoveAll(repo.Path)
		}
		return repo, err
	}
	s.recordIndex(res.stats)
	s.log.InfoContext(ctx, "repository indexed", slog.String(logx.KeyTenantID, tenant),
		slog.String("repository", res.repo.ID), slog.Int64("files", res.stats.filesIndexed), slog.Int64("chunks", res.stats.chunks),
		slog.Int64("embedded", res.chunksEmbed), slog.Duration("duration", res.elapsed))
	s.announceChange(ctx, tenant, res.repo.ID, res.chunksEmbed+res.chunksReused)
	s.kickWatcher()
	return res.repo, nil
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

// IndexRepository re-reads a repository's files and replaces its index
// atomically. The repository is INDEXING meanwhile, then READY, or FAILED
// with index_error (the previous index stays searchable).
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
	if r.URL != "" {
		if err := s.fetchRepository(ctx, id.TenantID, r); err != nil {
			s.failIndex(ctx, id.TenantID, repoID, "fetching "+r.URL+" failed")
			return nil, apierr.FailedPrecondition(reasonCloneFailed, "fetch %s: %v", r.URL, err)
		}
	}
	root, problem := s.checkRoot(id.TenantID, r.Path)
	if problem == "" && root != r.Path {
		problem = fmt.Sprintf("%q now resolves to %q; register that path instead", r.Path, root)
	}
	if problem != "" {
		s.failIndex(ctx, id.TenantID, repoID, problem)
		return nil, unreadable("repository path: %s", problem)
	}
	if err := s.store.setState(ctx, id.TenantID, repoID, stateIndexing, ""); err != nil {
		return nil, apierr.Status(ctx, s.log, "index repository", err)
	}
	res, err := s.runIndex(ctx, id.TenantID, r, root, req.GetFull())
	if errors.Is(err, errIndexBusy) {
		return nil, errIndexBusy
	}
	if err != nil {
		s.failIndex(ctx, id.TenantID, repoID, indexErrorMessage(err))
		return nil, apierr.Status(ctx, s.log, "index repository", err)
	}
	out, stats := res.repo, res.stats
	s.recordIndex(stats)
	s.kickWatcher()
	if res.changed {
		s.announceChange(ctx, id.TenantID, repoID, res.chunksEmbed+res.chunksReused)
	}
	s.log.InfoContext(ctx, "repository indexed", slog.String(logx.KeyTenantID, id.TenantID),
		slog.String("repository", repoID), slog.Int64("files", stats.filesIndexed),
		slog.Int64("skipped", stats.filesSkipped), slog.Int64("chunks", stats.chunks), slog.Bool("delta", res.delta),
		slog.Int64("changed", res.filesChanged), slog.Int64("embedded", res.chunksEmbed), slog.Duration("duration", res.elapsed))
	return &librarianv1.IndexRepositoryResponse{
		Repository:     toProto(out),
		FilesIndexed:   stats.filesIndexed,
		FilesSkipped:   stats.filesSkipped,
		Delta:          res.delta,
		FilesChanged:   res.filesChanged,
		ChunksEmbedded: res.chunksEmbed,
	}, nil
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

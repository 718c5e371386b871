package librarian

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
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
		return nil, invalid("repository", "required")
	}
	root, problem := s.checkRoot(in.GetPath())
	if problem != "" {
		return nil, invalid("repository.path", "%s", problem)
	}
	display := strings.TrimSpace(in.GetDisplayName())
	switch {
	case !utf8.ValidString(display):
		return nil, invalid("repository.display_name", "must be valid UTF-8")
	case utf8.RuneCountInString(display) > maxDisplayNameLen:
		return nil, invalid("repository.display_name", "must be at most %d characters", maxDisplayNameLen)
	case display == "":
		display = filepath.Base(root)
	}
	repo := repository{ID: ids.New(), DisplayName: display, Path: root}
	var (
		out   repository
		stats indexStats
	)
	err = pgx.BeginFunc(ctx, s.store.db, func(tx pgx.Tx) error {
		var err error
		if out, err = insertRepo(ctx, tx, id.TenantID, repo); err != nil {
			return err
		}
		if req.GetIndex() {
			out, stats, err = replaceIndex(ctx, tx, id.TenantID, out.ID, s.walker(root))
		}
		return err
	})
	if errors.Is(err, errDuplicatePath) {
		msg := fmt.Sprintf("repository.path %q is already registered", root)
		if existing, lookupErr := s.store.repoIDByPath(ctx, id.TenantID, root); lookupErr == nil {
			msg += " as " + repositoryPrefix + existing
		}
		return nil, status.Error(codes.AlreadyExists, msg)
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, "create repository", err)
	}
	if req.GetIndex() {
		s.recordIndex(stats)
	}
	s.log.InfoContext(ctx, "repository registered", slog.String(logx.KeyTenantID, id.TenantID),
		slog.String("repository", out.ID), slog.Bool("indexed", req.GetIndex()))
	return &librarianv1.CreateRepositoryResponse{Repository: toProto(out)}, nil
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
		return nil, toStatus(ctx, s.log, "get repository", err)
	}
	return &librarianv1.GetRepositoryResponse{Repository: toProto(r)}, nil
}

// ListRepositories pages through the tenant's repositories, oldest first.
func (s *Service) ListRepositories(ctx context.Context, req *librarianv1.ListRepositoriesRequest) (*librarianv1.ListRepositoriesResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, invalid("page_size", "must not be negative")
	case size == 0:
		size = defaultListPage
	case size > maxListPage:
		size = maxListPage
	}
	after := ""
	if tok := req.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !ids.Valid(string(raw)) {
			return nil, invalid("page_token", "is not a token from a previous response")
		}
		after = string(raw)
	}
	rows, err := s.store.listRepos(ctx, id.TenantID, after, size+1)
	if err != nil {
		return nil, toStatus(ctx, s.log, "list repositories", err)
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
		return nil, toStatus(ctx, s.log, "index repository", err)
	}
	root, problem := s.checkRoot(r.Path)
	if problem == "" && root != r.Path {
		problem = fmt.Sprintf("%q now resolves to %q; register that path instead", r.Path, root)
	}
	if problem != "" {
		s.failIndex(ctx, id.TenantID, repoID, problem)
		return nil, status.Error(codes.FailedPrecondition, "repository path: "+problem)
	}
	if err := s.store.setState(ctx, id.TenantID, repoID, stateIndexing, ""); err != nil {
		return nil, toStatus(ctx, s.log, "index repository", err)
	}
	var (
		out   repository
		stats indexStats
	)
	err = pgx.BeginFunc(ctx, s.store.db, func(tx pgx.Tx) error {
		var err error
		out, stats, err = replaceIndex(ctx, tx, id.TenantID, repoID, s.walker(root))
		return err
	})
	if err != nil {
		s.failIndex(ctx, id.TenantID, repoID, indexErrorMessage(err))
		return nil, toStatus(ctx, s.log, "index repository", err)
	}
	s.recordIndex(stats)
	s.log.InfoContext(ctx, "repository indexed", slog.String(logx.KeyTenantID, id.TenantID),
		slog.String("repository", repoID), slog.Int64("files", stats.filesIndexed),
		slog.Int64("skipped", stats.filesSkipped), slog.Int64("chunks", stats.chunks))
	return &librarianv1.IndexRepositoryResponse{
		Repository:   toProto(out),
		FilesIndexed: stats.filesIndexed,
		FilesSkipped: stats.filesSkipped,
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

// indexErrorMessage is what index_error says about err: the message of a
// precondition, a word for cancellation, nothing internal.
func indexErrorMessage(err error) string {
	var pre precondition
	switch {
	case errors.As(err, &pre):
		return pre.msg
	case errors.Is(err, context.Canceled):
		return "indexing was canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "indexing ran out of time"
	}
	return "internal error while indexing"
}

func (s *Service) recordIndex(st indexStats) {
	s.metrics.indexFiles.WithLabelValues(resultIndexed).Add(float64(st.filesIndexed))
	for reason, n := range st.skipped {
		s.metrics.indexFiles.WithLabelValues(reason).Add(float64(n))
	}
}

func (s *Service) walker(root string) *walker {
	return &walker{
		root:         root,
		maxFileBytes: s.cfg.MaxFileBytes,
		maxFiles:     s.cfg.MaxFiles,
		chunkLines:   s.cfg.ChunkLines,
		overlap:      s.cfg.ChunkOverlap,
	}
}

// checkRoot validates a repository path and returns it with symlinks
// resolved, or a description of the problem.
func (s *Service) checkRoot(p string) (string, string) {
	switch {
	case p == "":
		return "", "required"
	case len(p) > maxPathLen:
		return "", fmt.Sprintf("must be at most %d bytes", maxPathLen)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return "", "must be valid UTF-8 without NUL"
	case !filepath.IsAbs(p):
		return "", fmt.Sprintf("%q must be an absolute path", p)
	}
	info, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Sprintf("%q does not exist", p)
	case err != nil:
		return "", fmt.Sprintf("%q cannot be read", p)
	case !info.IsDir():
		return "", fmt.Sprintf("%q is not a directory", p)
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Sprintf("%q cannot be resolved", p)
	}
	resolved = filepath.Clean(resolved)
	if len(s.cfg.AllowedRoots) == 0 {
		return resolved, ""
	}
	for _, allowed := range s.cfg.AllowedRoots {
		ar, err := filepath.EvalSymlinks(allowed)
		if err != nil {
			ar = filepath.Clean(allowed)
		}
		if within(ar, resolved) {
			return resolved, ""
		}
	}
	return "", fmt.Sprintf("%q is outside the allowed roots (librarian.allowed-roots)", p)
}

// requireWriter returns the caller, who must be allowed to change the
// tenant's repositories (viewers only read and search).
func requireWriter(ctx context.Context) (identity.Identity, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return id, err
	}
	if id.Role == identity.RoleViewer {
		return id, status.Error(codes.PermissionDenied, "viewers cannot register or index repositories")
	}
	return id, nil
}

// parseName returns the id of a "repositories/{id}" name.
func parseName(name, field string) (string, error) {
	if name == "" {
		return "", invalid(field, "required")
	}
	id, ok := strings.CutPrefix(name, repositoryPrefix)
	if !ok || !ids.Valid(id) {
		return "", invalid(field, "%q is not a repository name (want %s{uuid})", truncateRunes(name, 100), repositoryPrefix)
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

// truncateRunes shortens s to at most n runes, marking the cut.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

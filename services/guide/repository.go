package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// A session works on one of its tenant's registered repositories
// ("repositories/{id}"): named at creation, by UpdateSession or with /repo
// in chat. A new session that names none takes the one its user last set
// on any of their sessions. The Librarian owns repositories: the Guide asks
// it, as the caller, whether one exists, so that another tenant's is not
// found, exactly like one that does not exist.

const repositoriesCollection = "repositories/"

// parseRepositoryName checks a repository name: "repositories/{uuid}", or
// "" for none. field names the request field for the error.
func parseRepositoryName(field, name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", nil
	}
	id, ok := strings.CutPrefix(name, repositoriesCollection)
	if !ok || !ids.Valid(id) {
		return "", apierr.Invalid(field, "want repositories/{uuid}, got %q", truncate(name, 100))
	}
	return repositoriesCollection + strings.ToLower(id), nil
}

// getRepository asks the Librarian for repository name as who: NotFound
// (REPOSITORY_NOT_FOUND) when the caller's tenant has none of that name,
// Unavailable (PEER_UNAVAILABLE) when no Librarian answers.
func (s *Service) getRepository(ctx context.Context, who identity.Identity, name string) (*librarianv1.Repository, error) {
	if s.librarian == nil {
		return nil, apierr.Unavailable(apierr.ReasonPeerUnavailable, "no librarian is configured to look up %s", name)
	}
	cctx, cancel := s.callerContext(ctx, who)
	defer cancel()
	resp, err := s.librarian.GetRepository(cctx, &librarianv1.GetRepositoryRequest{Name: name})
	if err != nil {
		return nil, s.librarianError(ctx, "look up "+name, err, name)
	}
	return resp.GetRepository(), nil
}

// listRepositories lists the caller's tenant's repositories, oldest first,
// at most maxListedRepositories of them.
func (s *Service) listRepositories(ctx context.Context, who identity.Identity) ([]*librarianv1.Repository, error) {
	if s.librarian == nil {
		return nil, apierr.Unavailable(apierr.ReasonPeerUnavailable, "no librarian is configured to list repositories")
	}
	cctx, cancel := s.callerContext(ctx, who)
	defer cancel()
	var out []*librarianv1.Repository
	req := &librarianv1.ListRepositoriesRequest{PageSize: repositoryPageSize}
	for len(out) < maxListedRepositories {
		resp, err := s.librarian.ListRepositories(cctx, req)
		if err != nil {
			return nil, s.librarianError(ctx, "list repositories", err, "")
		}
		out = append(out, resp.GetRepositories()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	return out[:min(len(out), maxListedRepositories)], nil
}

// Bounds of a repository listing.
const (
	repositoryPageSize    = 200
	maxListedRepositories = 1000
)

// librarianError is what the caller sees of the Librarian's err: a missing
// repository as REPOSITORY_NOT_FOUND (name), the Librarian's refusals of
// the request as they are, anything else as PEER_UNAVAILABLE.
func (s *Service) librarianError(ctx context.Context, op string, err error, name string) error {
	switch status.Code(err) {
	case codes.NotFound:
		if name != "" {
			return apierr.NotFound("repository", name)
		}
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
		return err
	}
	s.log.WarnContext(ctx, op, logx.Err(err))
	e := apierr.Unavailable(apierr.ReasonPeerUnavailable, "the librarian did not answer (%s); retry", op)
	e.RetryAfter = time.Second
	return e
}

// callerContext acts as who towards another service, within PeerTimeout.
func (s *Service) callerContext(ctx context.Context, who identity.Identity) (context.Context, context.CancelFunc) {
	return context.WithTimeout(identity.AppendOutgoing(ctx, who), s.cfg.PeerTimeout)
}

// newSessionRepository is the repository of a session being created: the
// one requested, which must exist in the caller's tenant, else the user's
// last one. The last one is dropped when the Librarian says it is gone,
// and kept when the Librarian cannot be asked (it existed when it was set).
func (s *Service) newSessionRepository(ctx context.Context, q querier, who identity.Identity, requested string) (repo string, explicit bool, err error) {
	name, err := parseRepositoryName("session.repository", requested)
	if err != nil {
		return "", false, err
	}
	if name != "" {
		if _, err := s.getRepository(ctx, who, name); err != nil {
			return "", false, err
		}
		return name, true, nil
	}
	last, err := lastRepository(ctx, q, ownerOf(who))
	if err != nil || last == "" || s.librarian == nil {
		return last, false, err
	}
	if _, err := s.getRepository(ctx, who, last); err != nil {
		if errors.Is(err, apierr.NotFound("repository", last)) {
			return "", false, nil
		}
		s.log.WarnContext(ctx, "check the last repository", slog.String("repository", last), logx.Err(err))
	}
	return last, false, nil
}

// lastRepository is the repository o last set on a session ("" for none).
func lastRepository(ctx context.Context, q querier, o owner) (string, error) {
	var repo string
	err := q.QueryRow(ctx, `SELECT repository FROM user_repositories WHERE tenant_id = $1 AND user_id = $2`,
		o.tenant, o.user).Scan(&repo)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load last repository: %w", err)
	}
	return repo, nil
}

// rememberRepository records repo as the one o set last.
func rememberRepository(ctx context.Context, q querier, o owner, repo string, at time.Time) error {
	_, err := q.Exec(ctx, `INSERT INTO user_repositories (tenant_id, user_id, repository, update_time) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant_id, user_id) DO UPDATE SET repository = EXCLUDED.repository, update_time = EXCLUDED.update_time`,
		o.tenant, o.user, repo, at)
	if err != nil {
		return fmt.Errorf("remember repository: %w", err)
	}
	return nil
}

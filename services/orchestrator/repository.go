package orchestrator

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// A run or a review works on one of its tenant's repositories, which the
// Librarian registers (and confines to its allowed roots): the request
// names it ("repositories/{id}", its id or its display name) or gives a
// git URL, and the Orchestrator asks the Librarian, as the caller, for the
// directory to work on. A path is never taken from a request: a caller
// could otherwise name another tenant's directory, or learn which
// directories exist. Every repository the caller may not use, whatever was
// given, gets the same answer (errRepositoryNotFound).

// repoRef is a repository resolved for a request: its name, shown to the
// user, and its directory, which only the services see.
type repoRef struct {
	Name, Path string
}

// repositories resolves the repositories requests name through the
// Librarian.
type repositories struct {
	// librarian is nil without a Librarian peer: then no request may name
	// a repository.
	librarian librarianv1.LibrarianServiceClient
	log       *slog.Logger
}

func newRepositories(conn grpc.ClientConnInterface, log *slog.Logger) *repositories {
	r := &repositories{log: log}
	if conn != nil {
		r.librarian = librarianv1.NewLibrarianServiceClient(conn)
	}
	return r
}

// Bounds of a repository lookup.
const (
	// librarianTimeout bounds a call to the Librarian.
	librarianTimeout = 5 * time.Second
	// maxRepositoryRef bounds what a request may give as its repository.
	maxRepositoryRef = 2048
	// repoPageSize and maxRepoPages bound a lookup by display name or URL.
	repoPageSize = 200
	maxRepoPages = 50
)

// resolve is the repository ref names for who: "" for none, else one
// registered in who's tenant, or a git URL, which is registered for the
// tenant (as who, so under the Librarian's rules for who) unless it is
// already.
func (r *repositories) resolve(ctx context.Context, who identity.Identity, ref string) (repoRef, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return repoRef{}, nil
	}
	if len(ref) > maxRepositoryRef || !plainRef(ref) {
		return repoRef{}, errRepositoryNotFound
	}
	if r.librarian == nil {
		return repoRef{}, errNoLibrarian
	}
	ctx, cancel := context.WithTimeout(identity.AppendOutgoing(ctx, who), librarianTimeout)
	defer cancel()
	var (
		repo *librarianv1.Repository
		err  error
	)
	switch id := strings.TrimPrefix(ref, repositoryCollection); {
	case ids.Valid(id):
		repo, err = r.byName(ctx, repositoryCollection+strings.ToLower(id))
	case gitURL(ref):
		repo, err = r.byURL(ctx, ref)
	case looksLikePath(ref):
		return repoRef{}, errRepositoryNotFound
	default:
		repo, err = r.byDisplayName(ctx, ref)
	}
	if err != nil {
		return repoRef{}, err
	}
	if repo.GetPath() == "" {
		return repoRef{}, errRepositoryNotRegistered.Withf("%s has no directory the workers can read yet", repo.GetName())
	}
	return repoRef{Name: repo.GetName(), Path: repo.GetPath()}, nil
}

const repositoryCollection = "repositories/"

func (r *repositories) byName(ctx context.Context, name string) (*librarianv1.Repository, error) {
	resp, err := r.librarian.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: name})
	if err != nil {
		return nil, r.librarianError(ctx, err)
	}
	return resp.GetRepository(), nil
}

// byDisplayName finds the tenant's one repository of that display name
// (case aside).
func (r *repositories) byDisplayName(ctx context.Context, name string) (*librarianv1.Repository, error) {
	var found []*librarianv1.Repository
	err := r.each(ctx, func(rp *librarianv1.Repository) {
		if strings.EqualFold(rp.GetDisplayName(), name) {
			found = append(found, rp)
		}
	})
	switch {
	case err != nil:
		return nil, err
	case len(found) == 0:
		return nil, errRepositoryNotFound
	case len(found) > 1:
		names := make([]string, len(found))
		for i, rp := range found {
			names[i] = rp.GetName()
		}
		return nil, apierr.Invalid("repository", "%d repositories are named %q: give one of %s", len(found), name, strings.Join(names, ", "))
	}
	return found[0], nil
}

// byURL finds the tenant's repository cloned from raw, or registers it.
func (r *repositories) byURL(ctx context.Context, raw string) (*librarianv1.Repository, error) {
	var found *librarianv1.Repository
	err := r.each(ctx, func(rp *librarianv1.Repository) {
		if found == nil && sameURL(rp.GetUrl(), raw) {
			found = rp
		}
	})
	if err != nil || found != nil {
		return found, err
	}
	// A run needs the clone, not an index: register without indexing and
	// wait for the clone (the registration's operation).
	resp, err := r.librarian.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Url: raw}, Index: proto.Bool(false), Wait: true})
	if err != nil {
		return nil, r.librarianError(ctx, err)
	}
	r.log.InfoContext(ctx, "registered a run's repository URL", slog.String("repository", resp.GetRepository().GetName()))
	return resp.GetRepository(), nil
}

// each calls fn on each of the tenant's repositories, oldest first.
func (r *repositories) each(ctx context.Context, fn func(*librarianv1.Repository)) error {
	req := &librarianv1.ListRepositoriesRequest{PageSize: repoPageSize}
	for range maxRepoPages {
		resp, err := r.librarian.ListRepositories(ctx, req)
		if err != nil {
			return r.librarianError(ctx, err)
		}
		for _, rp := range resp.GetRepositories() {
			fn(rp)
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return nil
		}
	}
	return nil
}

// librarianError is the answer for a Librarian call that failed: a missing
// repository as errRepositoryNotFound, the Librarian's refusals as they
// are, and anything else as the Librarian being unavailable.
func (r *repositories) librarianError(ctx context.Context, err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		return errRepositoryNotFound
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
		return err
	}
	r.log.WarnContext(ctx, "read a repository from the librarian", logx.Err(err))
	e := apierr.Unavailable(apierr.ReasonPeerUnavailable, "could not read the repository from the librarian; retry")
	e.RetryAfter = time.Second
	return e
}

// gitURL says whether ref is a network git URL (https, http, ssh or git,
// with a host). file:// URLs are not: they name a directory of the server.
func gitURL(ref string) bool {
	u, err := url.Parse(ref)
	if err != nil || u.Host == "" {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "https", "http", "ssh", "git":
		return true
	}
	return false
}

// looksLikePath says whether ref reads as a path or a file URL rather
// than a display name; either is answered as not found without a lookup.
func looksLikePath(ref string) bool {
	return strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "~") || strings.HasPrefix(ref, ".") ||
		strings.ContainsRune(ref, '\\') || strings.Contains(ref, "://") || strings.HasPrefix(strings.ToLower(ref), "file:")
}

// sameURL compares two git URLs as the same remote: case of the scheme and
// host, a trailing slash and a ".git" suffix aside.
func sameURL(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	norm := func(s string) string {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			return s
		}
		u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), ".git")
		return u.String()
	}
	return norm(a) == norm(b)
}

// plainRef says whether ref is printable text without control characters.
func plainRef(ref string) bool {
	for _, c := range ref {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

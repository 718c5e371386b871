package librarian

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
)

// Reasons of the librarian's errors (ErrorInfo), stable once clients see
// them. Missing resources carry <KIND>_NOT_FOUND (apierr.NotFound) and
// malformed fields INVALID_FIELD (apierr.Invalid).
const (
	// reasonViewerReadOnly: the caller's role may read and search, not
	// register or index.
	reasonViewerReadOnly = "VIEWER_READ_ONLY"
	// reasonAdminOnly: only an admin may register a directory of the
	// server (or a remote on its own networks) under this configuration.
	reasonAdminOnly = "ADMIN_ONLY"
	// reasonRepositoryExists: the tenant registered the path already.
	reasonRepositoryExists = "REPOSITORY_ALREADY_REGISTERED"
	// reasonRepositoryUnreadable: the repository's directory is gone,
	// moved, outside the allowed roots or unreadable.
	reasonRepositoryUnreadable = "REPOSITORY_UNREADABLE"
	// reasonRepositoryTooLarge: more files than librarian.max-files.
	reasonRepositoryTooLarge = "REPOSITORY_TOO_LARGE"
	// reasonIndexRunning: another index of the repository is running.
	reasonIndexRunning = "INDEX_RUNNING"
	// reasonCloneUnavailable: registering by URL needs librarian.data-dir.
	reasonCloneUnavailable = "CLONE_UNAVAILABLE"
	// reasonCloneFailed: the remote could not be cloned or fetched.
	reasonCloneFailed = "CLONE_FAILED"
	// reasonRemoteUnresolved: the remote's host has no address.
	reasonRemoteUnresolved = "REMOTE_UNRESOLVED"
	// reasonNoHistory: the repository is not a git work tree with commits,
	// or the lines asked for have no history.
	reasonNoHistory = "HISTORY_UNAVAILABLE"
	// reasonEmbeddingStale: a chunk was embedded by another model; index
	// the repository again.
	reasonEmbeddingStale = "EMBEDDING_STALE"
)

var (
	// errNotFound matches any repository's not-found error (errors.Is
	// compares code and reason); the store returns repositoryNotFound.
	errNotFound = apierr.NotFound("repository", "")
	// errDuplicatePath: the tenant registered the path already (the
	// handler names the repository that has it).
	errDuplicatePath = apierr.New(codes.AlreadyExists, reasonRepositoryExists, "repository path is already registered")
	// errIndexBusy means another index of the repository holds its lock.
	errIndexBusy = apierr.New(codes.Aborted, reasonIndexRunning, "another index of this repository is running; retry when it is done")
	// errViewer: viewers only read and search.
	errViewer = apierr.New(codes.PermissionDenied, reasonViewerReadOnly, "viewers cannot register or index repositories")
	// errNoDataDir: registering by URL needs a directory to clone into.
	errNoDataDir = apierr.FailedPrecondition(reasonCloneUnavailable, "repository.url: registering by URL needs librarian.data-dir")
	// errNotAWorkTree: history needs commits.
	errNotAWorkTree = apierr.FailedPrecondition(reasonNoHistory, "the repository is not a git work tree with commits")
)

// repositoryNotFound says the tenant has no repository id.
func repositoryNotFound(id string) error { return apierr.NotFound("repository", repositoryPrefix+id) }

// unreadable says the repository's directory cannot be used: problem says
// why, for the caller and for its index_error.
func unreadable(format string, args ...any) *apierr.Error {
	return apierr.FailedPrecondition(reasonRepositoryUnreadable, format, args...)
}

// indexErrorMessage is what index_error says about err: the message of an
// error a client may see, a word for cancellation, nothing internal.
func indexErrorMessage(err error) string {
	var e *apierr.Error
	switch {
	case errors.As(err, &e) && e.Code != codes.Internal:
		return e.Message
	case errors.Is(err, context.Canceled):
		return "indexing was canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "indexing ran out of time"
	}
	return "internal error while indexing"
}

package orchestrator

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
)

// The Orchestrator's named errors. Handlers return them (or wrap them) and
// pass every error through apierr.Status once; a reason never changes once
// clients see it. Not-found errors are apierr.NotFound("run" | "node", ...)
// (RUN_NOT_FOUND, NODE_NOT_FOUND).
const (
	// ReasonViewerReadOnly: a viewer asked to change runs.
	ReasonViewerReadOnly = "VIEWER_READ_ONLY"
	// ReasonRequestIDReused: a CreateRun's request_id came before with
	// another request.
	ReasonRequestIDReused = "REQUEST_ID_REUSED"
	// ReasonRunEnded: the run already ended (or, for a settlement or a
	// retry, ended in a state that does not allow it).
	ReasonRunEnded = "RUN_ALREADY_ENDED"
	// ReasonRunPaused and ReasonRunNotPaused: a pause of a paused run, a
	// resume of one that is not.
	ReasonRunPaused    = "RUN_ALREADY_PAUSED"
	ReasonRunNotPaused = "RUN_NOT_PAUSED"
	// ReasonRunCancelled: the run was cancelled; nothing of it runs again.
	ReasonRunCancelled = "RUN_CANCELLED"
	// ReasonRunNotSettleable: only a FAILED or CANCELLED run has partial
	// work to settle, and only a failed one a failure to retry from.
	ReasonRunNotSettleable = "RUN_NOT_SETTLEABLE"
	// ReasonRunChanged: the run changed while the call acted on it; read
	// it again.
	ReasonRunChanged = "RUN_CHANGED"
	// ReasonRunHasNoSession: the action needs the run's session (an
	// Architect conversation).
	ReasonRunHasNoSession = "RUN_HAS_NO_SESSION"
	// ReasonNodeEnded: the node already ended.
	ReasonNodeEnded = "NODE_ALREADY_ENDED"
	// ReasonNodePaused and ReasonNodeNotPaused: as for runs.
	ReasonNodePaused    = "NODE_ALREADY_PAUSED"
	ReasonNodeNotPaused = "NODE_NOT_PAUSED"
	// ReasonNodeNotRunning: the action applies to a running node only.
	ReasonNodeNotRunning = "NODE_NOT_RUNNING"
	// ReasonNodeNotFailed: the action applies to a failed node only (or,
	// for skip, a failed or pending one).
	ReasonNodeNotFailed = "NODE_NOT_FAILED"
	// ReasonWorkerUnavailable: no worker answered for a running node.
	ReasonWorkerUnavailable = "WORKER_UNAVAILABLE"
	// ReasonRunNotDelivered: the run offers nothing to download (it was
	// not created with deliver, has not succeeded, or changed nothing).
	ReasonRunNotDelivered = "RUN_NOT_DELIVERED"
)

// The named errors of a request's repository (repository.go).
const (
	// ReasonRepositoryNotFound: the repository a run or a review names is
	// not one the caller's tenant registered (or is a path, which is never
	// taken from a request). The answer is the same whatever was given.
	ReasonRepositoryNotFound = "REPOSITORY_NOT_FOUND"
	// ReasonRepositoryNotRegistered: the tenant's repository has no
	// directory the workers can read yet.
	ReasonRepositoryNotRegistered = "REPOSITORY_NOT_REGISTERED"
	// ReasonRepositoryNoCommit: the tenant's repository is not a git
	// repository with a commit to start a run from.
	ReasonRepositoryNoCommit = "REPOSITORY_HAS_NO_COMMIT"
	// ReasonLibrarianNotConfigured: a run or review of a repository needs
	// the Librarian, which knows the registered ones, and none is
	// configured.
	ReasonLibrarianNotConfigured = "LIBRARIAN_NOT_CONFIGURED"
)

var (
	// errRepositoryNotFound quotes nothing of the request: its text is the
	// same for another tenant's repository, a path that exists and one
	// that does not.
	errRepositoryNotFound = apierr.New(codes.NotFound, ReasonRepositoryNotFound,
		"repository not found: give a repository registered in your tenant (repositories/{id}, its id or its display name; "+
			"GET /v1/repositories lists them) or a git URL (https, ssh or git)")
	errRepositoryNotRegistered = apierr.FailedPrecondition(ReasonRepositoryNotRegistered, "the repository has no directory yet")
	errNoLibrarian             = apierr.FailedPrecondition(ReasonLibrarianNotConfigured,
		"a repository needs the librarian, which knows the registered repositories, and none is configured")
)

// reviewNotFound is a review the caller may not see, or that does not
// exist.
func reviewNotFound(name string) *apierr.Error { return apierr.NotFound("review", name) }

// errNotFound is a run (or a row of it) the store does not hold for the
// tenant; handlers answer it as apierr.NotFound.
var errNotFound = errors.New("run not found")

// Sentinels of the state errors, for errors.Is: each error returned says
// its own case with Withf.
var (
	errViewer            = apierr.New(codes.PermissionDenied, ReasonViewerReadOnly, "viewers cannot create or cancel runs")
	errRequestIDReused   = apierr.New(codes.AlreadyExists, ReasonRequestIDReused, "request_id was used for another request")
	errRunEnded          = apierr.FailedPrecondition(ReasonRunEnded, "the run already ended")
	errRunPaused         = apierr.FailedPrecondition(ReasonRunPaused, "the run is already paused")
	errRunNotPaused      = apierr.FailedPrecondition(ReasonRunNotPaused, "the run is not paused")
	errRunCancelled      = apierr.FailedPrecondition(ReasonRunCancelled, "the run was cancelled")
	errRunNotSettleable  = apierr.FailedPrecondition(ReasonRunNotSettleable, "the run has no partial work to settle")
	errRunChanged        = apierr.New(codes.Aborted, ReasonRunChanged, "the run changed meanwhile")
	errRunHasNoSession   = apierr.FailedPrecondition(ReasonRunHasNoSession, "the run has no session")
	errNodeEnded         = apierr.FailedPrecondition(ReasonNodeEnded, "the node already ended")
	errNodePaused        = apierr.FailedPrecondition(ReasonNodePaused, "the node is already paused")
	errNodeNotPaused     = apierr.FailedPrecondition(ReasonNodeNotPaused, "the node is not paused")
	errNodeNotRunning    = apierr.FailedPrecondition(ReasonNodeNotRunning, "the node is not running")
	errNodeNotFailed     = apierr.FailedPrecondition(ReasonNodeNotFailed, "the node did not fail")
	errWorkerUnavailable = apierr.Unavailable(ReasonWorkerUnavailable, "no worker answered")
	errRunNotDelivered   = apierr.FailedPrecondition(ReasonRunNotDelivered, "the run offers nothing to download")
)

// runNotFound is the answer for a run the caller may not see, or that
// does not exist: both read the same.
func runNotFound(name string) *apierr.Error { return apierr.NotFound("run", name) }

// nodeNotFound is a node the run does not have.
func nodeNotFound(run, node string) *apierr.Error {
	return apierr.NotFound("node", node).Withf("run %s has no node %q", run, node)
}

// refused says whether err is a state error (FailedPrecondition): the
// action does not apply to the run or node as it is.
func refused(err error) bool {
	var e *apierr.Error
	return errors.As(err, &e) && e.Code == codes.FailedPrecondition
}

// invalidRequest is a request another package's checks refused (the DAG's,
// the run options'): its message kept as it is and, when it starts with
// one, the field it names as the field at fault.
func invalidRequest(err error) *apierr.Error {
	msg := err.Error()
	field, desc, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(field, " \"") {
		return apierr.New(codes.InvalidArgument, apierr.ReasonInvalidField, "%s", msg)
	}
	return apierr.Invalid(field, "%s", desc)
}

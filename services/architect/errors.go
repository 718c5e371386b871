package architect

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
)

// Reasons of the Architect's errors (ErrorInfo), stable once clients see
// them. A missing plan is PLAN_NOT_FOUND (apierr.NotFound) and a malformed
// field INVALID_FIELD (apierr.Invalid).
const (
	// reasonPlanDecided: the plan was approved or rejected already.
	reasonPlanDecided = "PLAN_ALREADY_DECIDED"
	// reasonNoOrchestrator: no orchestrator is configured to run plans.
	reasonNoOrchestrator = "ORCHESTRATOR_NOT_CONFIGURED"
	// reasonRunsCancelled: every run an approval started was cancelled
	// before the approval was stored; retry.
	reasonRunsCancelled = "APPROVAL_RUNS_CANCELLED"
	// reasonSessionGone: the plan's session no longer exists.
	reasonSessionGone = "PLAN_SESSION_NOT_FOUND"
	// reasonInvalidDAG: the caller's DAG is not a valid DAG.
	reasonInvalidDAG = "INVALID_DAG"
	// reasonPlannerUnavailable: the model could not draft a usable plan
	// just now; retry.
	reasonPlannerUnavailable = "PLANNER_UNAVAILABLE"
	// reasonPlanningBudget: the session's model budget is spent.
	reasonPlanningBudget = "PLANNING_BUDGET_EXCEEDED"
	// reasonPlannerMisconfigured: the planner names an unknown provider.
	reasonPlannerMisconfigured = "PLANNER_MISCONFIGURED"
	// reasonNoLibrarian: a plan on a repository needs the Librarian to
	// resolve the repository's path when it is approved.
	reasonNoLibrarian = "LIBRARIAN_NOT_CONFIGURED"
	// reasonRepositoryGone: the plan's repository is no longer registered.
	reasonRepositoryGone = "PLAN_REPOSITORY_NOT_FOUND"
	// reasonVersionLimit: the plan has as many versions as it may.
	reasonVersionLimit = "PLAN_VERSION_LIMIT"
	// reasonPlanChanged: the plan got another version, or was decided,
	// while this revision was drafted; read it and revise again.
	reasonPlanChanged = "PLAN_CHANGED"
)

var (
	// errNotFound matches any plan's not-found error (errors.Is compares
	// code and reason); the store returns planNotFound.
	errNotFound = apierr.NotFound("plan", "")
	// errNoOrchestrator: approvals need an orchestrator.
	errNoOrchestrator = apierr.Unavailable(reasonNoOrchestrator, "orchestrator not configured; cannot start the plan")
	// errOrchestratorDown: the orchestrator did not answer an approval.
	errOrchestratorDown = apierr.Unavailable(apierr.ReasonPeerUnavailable, "orchestrator unavailable; retry the approval")
	// errNoLibrarian: approving a plan on a repository needs a Librarian.
	errNoLibrarian = apierr.Unavailable(reasonNoLibrarian, "librarian not configured; cannot find the plan's repository")
	// errLibrarianDown: the Librarian did not resolve the plan's repository.
	errLibrarianDown = apierr.Unavailable(apierr.ReasonPeerUnavailable, "librarian unavailable; retry the approval")
	// errDuplicateSource says a plan was already drafted from the same
	// inbox message (the inbox finds that plan; no client sees it).
	errDuplicateSource = errors.New("plan already drafted from this message")
)

// planNotFound says the caller has no plan name; another tenant's or
// user's plan is reported the same way.
func planNotFound(name string) error { return apierr.NotFound("plan", name) }

// planDecided says a plan in state cannot be acted on (action) any more.
func planDecided(state, action string) error {
	return apierr.FailedPrecondition(reasonPlanDecided, "plan is %s; cannot %s", stateWords(state), action)
}

// repositoryGone says p's repository is no longer registered.
func repositoryGone(p plan) error {
	return apierr.FailedPrecondition(reasonRepositoryGone, "%s is not registered any more; cannot run the plan on it", p.Repository).
		With("repository", p.Repository)
}

// orchestratorError passes the orchestrator's status on (an invalid DAG
// stays InvalidArgument), naming where it came from.
func (s *Service) orchestratorError(ctx context.Context, p plan, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		s.log.ErrorContext(ctx, "submit plan", slog.String("plan", p.name()), logx.Err(err))
		return errOrchestratorDown
	}
	if st.Code() == codes.Unavailable || st.Code() == codes.Internal || st.Code() == codes.Unknown {
		s.log.WarnContext(ctx, "submit plan", slog.String("plan", p.name()), slog.String(logx.KeyCode, st.Code().String()), logx.Err(err))
	}
	pb := st.Proto()
	pb.Message = "orchestrator: " + pb.GetMessage()
	return apierr.WithInfo(status.FromProto(pb)).Err()
}

// modelError maps a model gate's error to the status the caller sees.
func modelError(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, budget.ErrBudgetExceeded):
		return apierr.New(codes.ResourceExhausted, reasonPlanningBudget, "planning: %v", err)
	case errors.Is(err, gate.ErrCircuitOpen):
		return apierr.Unavailable(reasonPlannerUnavailable, "planning: %v", err)
	case errors.Is(err, llm.ErrUnknownProvider):
		return apierr.FailedPrecondition(reasonPlannerMisconfigured, "planning: %v", err)
	}
	return apierr.Unavailable(reasonPlannerUnavailable, "planning: model call failed: %v", err)
}

// unusablePlan says the model answered with a plan that cannot be used.
func unusablePlan(err error) error {
	return apierr.Unavailable(reasonPlannerUnavailable, "the model's plan could not be used: %v", err)
}

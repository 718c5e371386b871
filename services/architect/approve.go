package architect

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// maxApprovalRuns bounds the runs one approval call starts looking for one
// that was not cancelled (see ApprovePlan).
const maxApprovalRuns = 5

// ApprovePlan submits an awaiting plan's latest version to the
// orchestrator and marks the plan approved with the run it started. The
// plan id is the run's request id, so a retried approval never starts a
// second run.
func (s *Service) ApprovePlan(ctx context.Context, req *architectv1.ApprovePlanRequest) (*architectv1.ApprovePlanResponse, error) {
	who, sessionID, id, err := planCaller(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetMaxConcurrency() < 0 {
		return nil, apierr.Invalid("max_concurrency", "must not be negative, got %d", req.GetMaxConcurrency())
	}
	p, run, err := s.approve(ctx, who, sessionID, id, req.GetMaxConcurrency(), false)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "approve plan", err)
	}
	pb, err := s.full(ctx, s.db, p, run)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "approve plan", err)
	}
	return &architectv1.ApprovePlanResponse{Plan: pb, Run: run}, nil
}

// approve starts the run of an awaiting plan and stores the approval (auto
// when the session approved it without asking), then announces it.
func (s *Service) approve(ctx context.Context, who identity.Identity, sessionID, id string, maxConcurrency int32,
	auto bool) (plan, *orchestratorv1.Run, error) {
	o := ownerOf(who)
	if s.orchestrator == nil {
		return plan{}, nil, errNoOrchestrator
	}
	var (
		p   plan
		run *orchestratorv1.Run
	)
	// The plan's row stays locked from the check of its state until the
	// decision is stored, so that a rejection, a revision or another
	// approval waits: a run never starts for a plan that ends rejected, nor
	// for a version that is not the latest.
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		if p, err = getPlanForUpdate(ctx, tx, o, sessionID, id); err != nil {
			return err
		}
		if p.State != stateAwaitingApproval {
			return planDecided(p.State, "approve")
		}
		opts, err := s.runOptions(ctx, who, p)
		if err != nil {
			return err
		}
		if run, err = s.startRun(ctx, who, p, opts, maxConcurrency); err != nil {
			return err
		}
		now := s.now()
		p.State, p.Run, p.UpdateTime, p.ApproveTime, p.AutoApproved = stateApproved, run.GetName(), now, &now, auto
		if err := s.decideIn(ctx, tx, o, p, "approve"); err != nil {
			return err
		}
		_, err = s.audit.AppendTx(ctx, tx, audit.Record{TenantID: who.TenantID, Actor: who.UserID, Action: audit.ActionPlanApproved,
			Target: p.name(), Details: map[string]string{"run": run.GetName(), "auto": strconv.FormatBool(auto)}})
		return err
	})
	if err != nil {
		if run != nil {
			// The run started but the approval was not stored.
			s.cancelRun(ctx, who, run)
		}
		return plan{}, nil, err
	}
	s.metrics.decided.WithLabelValues(p.State).Inc()
	s.log.InfoContext(ctx, "plan approved", slog.String("plan", p.name()), slog.String(logx.KeyRunID, run.GetId()),
		slog.Bool("auto", auto))
	text := fmt.Sprintf("Plan approved: %s; run %s started", p.Title, p.Run)
	if auto {
		text = fmt.Sprintf("Trivial change approved without asking (the session's auto_approve_trivial): %s; run %s started", p.Title, p.Run)
	}
	s.publishDecision(ctx, p, eventv1.EventType_EVENT_TYPE_PLAN_APPROVED, text)
	return p, run, nil
}

// startRun submits p's DAG to the orchestrator, as who, with opts, and
// returns the run it started. The plan id is the run's request id. An
// approval whose decision failed to store cancelled the run it started; the
// plan is still awaiting approval, so its next approval starts a new run,
// under a request id naming the cancelled one (the same on every retry).
func (s *Service) startRun(ctx context.Context, who identity.Identity, p plan, opts *orchestratorv1.CreateRunRequest,
	maxConcurrency int32) (*orchestratorv1.Run, error) {
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(ctx, who), s.cfg.OrchestratorTimeout)
	defer cancel()
	req := opts
	req.SessionId, req.Dag, req.MaxConcurrency, req.Plan = p.SessionID, p.DAG, maxConcurrency, p.name()
	req.RequestId, req.Context = p.ID, runContext(p.Intent)
	for range maxApprovalRuns {
		start := time.Now()
		resp, err := s.orchestrator.CreateRun(cctx, req)
		s.metrics.orchestrator.Observe(time.Since(start).Seconds())
		if err != nil {
			return nil, s.orchestratorError(ctx, p, err)
		}
		run := resp.GetRun()
		if run.GetState() != orchestratorv1.RunState_RUN_STATE_CANCELLED {
			return run, nil
		}
		req.RequestId = p.ID + "/after/" + run.GetId()
	}
	return nil, apierr.New(codes.Aborted, reasonRunsCancelled,
		"the last %d runs started for %s were cancelled before its approval was stored; retry later", maxApprovalRuns, p.name())
}

// runOptions are what p's run takes from its session and repository: the
// session's limits, pushing and review persona (read from the Guide, as
// the caller), and the repository's name, which the Orchestrator resolves
// to its directory as the caller, with delivery as a branch (spec F-29). Without a Guide peer the session sets
// nothing. A Guide that does not answer in time fails the approval
// (Unavailable), so that a run never starts without the limits its
// session asked for.
func (s *Service) runOptions(ctx context.Context, who identity.Identity, p plan) (*orchestratorv1.CreateRunRequest, error) {
	opts := &orchestratorv1.CreateRunRequest{}
	if err := s.checkRepository(ctx, who, p); err != nil {
		return nil, err
	}
	// A run on a repository gets the session-level inspection and tests of
	// its combined change (spec F-06), whose failures come back as a fix
	// plan, and is delivered as a branch (spec F-29).
	repo := p.Repository
	opts.Repository, opts.Deliver, opts.SessionChecks = repo, repo != "", repo != ""
	sess, err := s.sessions.Get(ctx, who, p.SessionID, "the session's limits")
	if status.Code(err) == codes.NotFound {
		return nil, apierr.FailedPrecondition(reasonSessionGone, "session sessions/%s not found; cannot approve its plan", p.SessionID)
	}
	if err != nil || sess == nil {
		return opts, err
	}
	c := sess.GetConfig()
	opts.SessionLimits = &orchestratorv1.SessionLimits{MaxConcurrentTasks: c.GetMaxConcurrentTasks(), MaxEngineers: c.GetMaxEngineers()}
	opts.AllowPush, opts.ReviewPersona = c.GetAllowPush(), c.GetReviewPersona()
	return opts, nil
}

// checkRepository checks, through the Librarian as who, that p's
// repository is still registered with a directory (nothing to check for a
// plan without one), so that an approval says so rather than the run.
func (s *Service) checkRepository(ctx context.Context, who identity.Identity, p plan) error {
	if p.Repository == "" {
		return nil
	}
	if s.librarian == nil {
		return errNoLibrarian
	}
	cctx, cancel := context.WithTimeout(consult.WithCaller(identity.AppendOutgoing(ctx, who), topology.AgentArchitect), s.cfg.ConsultTimeout)
	defer cancel()
	resp, err := s.librarian.GetRepository(cctx, &librarianv1.GetRepositoryRequest{Name: p.Repository})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound:
		return repositoryGone(p)
	default:
		s.log.WarnContext(ctx, "resolve the plan's repository", slog.String("plan", p.name()), logx.Err(err))
		return errLibrarianDown
	}
	if resp.GetRepository().GetPath() == "" {
		return repositoryGone(p)
	}
	return nil
}

// cancelRun cancels, as the caller, a run that should not have started; a
// failure is logged, as the run is then left for the user to cancel.
func (s *Service) cancelRun(ctx context.Context, who identity.Identity, run *orchestratorv1.Run) {
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(context.WithoutCancel(ctx), who), s.cfg.OrchestratorTimeout)
	defer cancel()
	if _, err := s.orchestrator.CancelRun(cctx, &orchestratorv1.CancelRunRequest{Name: run.GetName()}); err != nil {
		s.log.ErrorContext(ctx, "cancel a run whose approval was not stored", slog.String(logx.KeyRunID, run.GetId()), logx.Err(err))
	}
}

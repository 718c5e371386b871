package architect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

var stateToProto = map[string]architectv1.PlanState{
	stateAwaitingApproval: architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL,
	stateApproved:         architectv1.PlanState_PLAN_STATE_APPROVED,
	stateRejected:         architectv1.PlanState_PLAN_STATE_REJECTED,
}

// stateWords is how a state reads in messages.
func stateWords(state string) string { return strings.ReplaceAll(state, "_", " ") }

func (p plan) name() string { return planName(p.SessionID, p.ID) }

func (p plan) proto() *architectv1.Plan {
	return &architectv1.Plan{
		Name:         p.name(),
		Id:           p.ID,
		SessionId:    p.SessionID,
		Request:      p.Request,
		Title:        p.Title,
		State:        stateToProto[p.State],
		Version:      p.Version,
		Dag:          p.DAG,
		Run:          p.Run,
		Planner:      p.Planner,
		CreateTime:   timestamppb.New(p.CreateTime),
		UpdateTime:   timestamppb.New(p.UpdateTime),
		RejectReason: p.RejectReason,
		Intent:       p.Intent,
	}
}

func ownerOf(id identity.Identity) owner { return owner{tenant: id.TenantID, user: id.UserID} }

// CreatePlan stores a plan awaiting approval: the caller's DAG when given,
// else one drafted from the request by the planner.
func (s *Service) CreatePlan(ctx context.Context, req *architectv1.CreatePlanRequest) (*architectv1.CreatePlanResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sessionID, err := parseParent(req.GetParent())
	if err != nil {
		return nil, err
	}
	request, err := s.checkRequest(req.GetRequest())
	if err != nil {
		return nil, err
	}
	// A DAG without nodes counts as absent: the planner drafts one.
	var explicit *orchestratorv1.Dag
	if len(req.GetDag().GetNodes()) > 0 {
		explicit = req.GetDag()
	}
	constraints, err := checkStatements("key_constraints", req.GetKeyConstraints())
	if err != nil {
		return nil, err
	}
	criteria, err := checkStatements("success_criteria", req.GetSuccessCriteria())
	if err != nil {
		return nil, err
	}
	if err := s.sessions.Open(ctx, who, sessionID, "plan in it"); err != nil {
		return nil, err
	}
	p, _, err := s.create(ctx, who, sessionID, request, statedIntent{constraints: constraints, criteria: criteria}, explicit, nil, "")
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create plan", err)
	}
	s.metrics.created.WithLabelValues(p.Planner, "api").Inc()
	if err := s.announce(ctx, p); err != nil {
		// The plan is stored; the caller has it in the response.
		s.log.WarnContext(ctx, "publish plan event", slog.String("plan", p.name()), logx.Err(err))
	}
	return &architectv1.CreatePlanResponse{Plan: p.proto()}, nil
}

// checkRequest trims a request and checks it is present and small enough.
func (s *Service) checkRequest(raw string) (string, error) {
	request := strings.TrimSpace(raw)
	switch {
	case request == "":
		return "", apierr.Invalid("request", "required")
	case len(request) > s.cfg.MaxRequestBytes:
		return "", apierr.Invalid("request", "%d bytes exceeds the limit of %d bytes", len(request), s.cfg.MaxRequestBytes)
	case !utf8.ValidString(request):
		return "", apierr.Invalid("request", "must be valid UTF-8")
	}
	return request, nil
}

// create validates (or drafts, when d is nil) the DAG and stores a new plan
// awaiting approval. With a sourceID it is idempotent: a second call for the
// same source returns the plan drafted first, and created is false.
func (s *Service) create(ctx context.Context, who identity.Identity, sessionID, request string, stated statedIntent, d *orchestratorv1.Dag,
	sourceID *string, correlationID string) (p plan, created bool, err error) {
	title, planner := titleOf(request), plannerUser
	if d == nil {
		draft, err := s.planner.Draft(withSession(ctx, sessionID), request)
		if err != nil {
			return plan{}, false, fmt.Errorf("draft plan: %w", err)
		}
		d, title, planner = draft.DAG, draft.Title, draft.Planner
	} else {
		d = proto.Clone(d).(*orchestratorv1.Dag)
	}
	if _, err := dag.Validate(d); err != nil {
		var de *dag.Error
		if planner == plannerUser && errors.As(err, &de) {
			return plan{}, false, apierr.New(codes.InvalidArgument, reasonInvalidDAG, "%s", de.Error()).With("field", "dag")
		}
		return plan{}, false, fmt.Errorf("planner %s drafted an invalid DAG: %w", planner, err)
	}
	now := s.now()
	p = plan{
		ID:              ids.New(),
		TenantID:        who.TenantID,
		UserID:          who.UserID,
		SessionID:       sessionID,
		State:           stateAwaitingApproval,
		Version:         1,
		SourceMessageID: sourceID,
		CorrelationID:   correlationID,
		CreateTime:      now,
		UpdateTime:      now,
		Request:         request,
		Title:           title,
		Planner:         planner,
		DAG:             d,
		Intent:          s.enrich(ctx, request, stated),
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return insertPlan(ctx, tx, p) })
	if errors.Is(err, errDuplicateSource) {
		existing, err := planBySource(ctx, s.db, who.TenantID, *sourceID)
		return existing, false, err
	}
	if err != nil {
		return plan{}, false, err
	}
	return p, true, nil
}

// runContext carries a plan's intent to its run, whose tasks check their
// corrections against it (spec A-12); nil when the plan has none.
func runContext(pi *architectv1.PlanIntent) *orchestratorv1.RunContext {
	if len(pi.GetKeyConstraints())+len(pi.GetSuccessCriteria()) == 0 {
		return nil
	}
	return &orchestratorv1.RunContext{KeyConstraints: pi.GetKeyConstraints(), SuccessCriteria: pi.GetSuccessCriteria()}
}

// GetPlan returns one of the caller's plans.
func (s *Service) GetPlan(ctx context.Context, req *architectv1.GetPlanRequest) (*architectv1.GetPlanResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sessionID, id, err := parsePlanName(req.GetName())
	if err != nil {
		return nil, err
	}
	p, err := getPlan(ctx, s.db, ownerOf(who), sessionID, id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get plan", err)
	}
	return &architectv1.GetPlanResponse{Plan: p.proto()}, nil
}

// ListPlans returns the caller's plans in a session, newest first.
func (s *Service) ListPlans(ctx context.Context, req *architectv1.ListPlansRequest) (*architectv1.ListPlansResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sessionID, err := parseParent(req.GetParent())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if _, err := s.sessions.Get(ctx, who, sessionID, "the session"); err != nil {
		return nil, err
	}
	var after *planCursor
	if tok := req.GetPageToken(); tok != "" {
		if after, err = decodeCursor(tok); err != nil {
			return nil, err
		}
	}
	rows, err := listPlans(ctx, s.db, ownerOf(who), sessionID, after, size+1)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list plans", err)
	}
	resp := &architectv1.ListPlansResponse{}
	if len(rows) > size {
		rows = rows[:size]
		last := rows[len(rows)-1]
		resp.NextPageToken = encodeCursor(planCursor{CreateTime: last.CreateTime, ID: last.ID})
	}
	for _, p := range rows {
		resp.Plans = append(resp.Plans, p.proto())
	}
	return resp, nil
}

// maxApprovalRuns bounds the runs one approval call starts looking for one
// that was not cancelled (see ApprovePlan).
const maxApprovalRuns = 5

// ApprovePlan submits an awaiting plan's DAG to the orchestrator and marks
// the plan approved with the run it started. The plan id is the run's
// request id, so a retried approval never starts a second run.
func (s *Service) ApprovePlan(ctx context.Context, req *architectv1.ApprovePlanRequest) (*architectv1.ApprovePlanResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sessionID, id, err := parsePlanName(req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetMaxConcurrency() < 0 {
		return nil, apierr.Invalid("max_concurrency", "must not be negative, got %d", req.GetMaxConcurrency())
	}
	o := ownerOf(who)
	if s.orchestrator == nil {
		return nil, errNoOrchestrator
	}
	var (
		p   plan
		run *orchestratorv1.Run
	)
	// The plan's row stays locked from the check of its state until the
	// decision is stored, so that a rejection (or another approval) waits:
	// a run never starts for a plan that ends rejected.
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		if p, err = getPlanForUpdate(ctx, tx, o, sessionID, id); err != nil {
			return err
		}
		if p.State != stateAwaitingApproval {
			return planDecided(p.State, "approve")
		}
		limits, err := s.sessionLimits(ctx, who, p)
		if err != nil {
			return err
		}
		if run, err = s.startRun(ctx, who, p, limits, req.GetMaxConcurrency()); err != nil {
			return err
		}
		now := s.now()
		p.State, p.Run, p.UpdateTime, p.ApproveTime = stateApproved, run.GetName(), now, &now
		return s.decideIn(ctx, tx, o, p, "approve")
	})
	if err != nil {
		if run != nil {
			// The run started but the approval was not stored.
			s.cancelRun(ctx, who, run)
		}
		return nil, apierr.Status(ctx, s.log, "approve plan", err)
	}
	s.metrics.decided.WithLabelValues(p.State).Inc()
	s.log.InfoContext(ctx, "plan approved", slog.String("plan", p.name()), slog.String(logx.KeyRunID, run.GetId()))
	s.publishDecision(ctx, p, eventv1.EventType_EVENT_TYPE_PLAN_APPROVED, fmt.Sprintf("Plan approved: %s; run %s started", p.Title, p.Run))
	return &architectv1.ApprovePlanResponse{Plan: p.proto(), Run: run}, nil
}

// startRun submits p's DAG to the orchestrator, as who, and returns the
// run it started. The plan id is the run's request id. An approval whose
// decision failed to store cancelled the run it started; the plan is still
// awaiting approval, so its next approval starts a new run, under a
// request id naming the cancelled one (the same on every retry).
func (s *Service) startRun(ctx context.Context, who identity.Identity, p plan, limits *orchestratorv1.SessionLimits,
	maxConcurrency int32) (*orchestratorv1.Run, error) {
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(ctx, who), s.cfg.OrchestratorTimeout)
	defer cancel()
	requestID := p.ID
	for range maxApprovalRuns {
		start := time.Now()
		resp, err := s.orchestrator.CreateRun(cctx, &orchestratorv1.CreateRunRequest{
			SessionId:      p.SessionID,
			Dag:            p.DAG,
			MaxConcurrency: maxConcurrency,
			Plan:           p.name(),
			RequestId:      requestID,
			SessionLimits:  limits,
			Context:        runContext(p.Intent),
		})
		s.metrics.orchestrator.Observe(time.Since(start).Seconds())
		if err != nil {
			return nil, s.orchestratorError(ctx, p, err)
		}
		run := resp.GetRun()
		if run.GetState() != orchestratorv1.RunState_RUN_STATE_CANCELLED {
			return run, nil
		}
		requestID = p.ID + "/after/" + run.GetId()
	}
	return nil, apierr.New(codes.Aborted, reasonRunsCancelled,
		"the last %d runs started for %s were cancelled before its approval was stored; retry later", maxApprovalRuns, p.name())
}

// sessionLimits reads the plan's session from the Guide, as the caller, and
// returns its limits for the run. Without a Guide peer there are none (nil).
// A Guide that does not answer in time fails the approval (Unavailable), so
// that a run never starts without the limits its session asked for.
func (s *Service) sessionLimits(ctx context.Context, who identity.Identity, p plan) (*orchestratorv1.SessionLimits, error) {
	sess, err := s.sessions.Get(ctx, who, p.SessionID, "the session's limits")
	if status.Code(err) == codes.NotFound {
		return nil, apierr.FailedPrecondition(reasonSessionGone, "session sessions/%s not found; cannot approve its plan", p.SessionID)
	}
	if err != nil || sess == nil {
		return nil, err
	}
	c := sess.GetConfig()
	return &orchestratorv1.SessionLimits{MaxConcurrentTasks: c.GetMaxConcurrentTasks(), MaxEngineers: c.GetMaxEngineers()}, nil
}

// RejectPlan marks an awaiting plan rejected, with an optional reason.
func (s *Service) RejectPlan(ctx context.Context, req *architectv1.RejectPlanRequest) (*architectv1.RejectPlanResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sessionID, id, err := parsePlanName(req.GetName())
	if err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(req.GetReason())
	if len(reason) > s.cfg.MaxReasonBytes {
		return nil, apierr.Invalid("reason", "%d bytes exceeds the limit of %d bytes", len(reason), s.cfg.MaxReasonBytes)
	}
	o := ownerOf(who)
	p, err := getPlan(ctx, s.db, o, sessionID, id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "reject plan", err)
	}
	if p.State != stateAwaitingApproval {
		return nil, planDecided(p.State, "reject")
	}
	now := s.now()
	p.State, p.RejectReason, p.UpdateTime, p.RejectTime = stateRejected, reason, now, &now
	if err := s.decide(ctx, o, p, "reject"); err != nil {
		return nil, err
	}
	text := "Plan rejected: " + p.Title
	if reason != "" {
		text += " (" + reason + ")"
	}
	s.publishDecision(ctx, p, eventv1.EventType_EVENT_TYPE_PLAN_REJECTED, text)
	return &architectv1.RejectPlanResponse{Plan: p.proto()}, nil
}

// decide stores an approval or rejection; a plan decided concurrently
// reports its new state.
func (s *Service) decide(ctx context.Context, o owner, p plan, verb string) error {
	if err := s.decideIn(ctx, s.db, o, p, verb); err != nil {
		return apierr.Status(ctx, s.log, verb+" plan", err)
	}
	s.metrics.decided.WithLabelValues(p.State).Inc()
	return nil
}

// decideIn stores a decision on a plan still awaiting approval, through q.
func (s *Service) decideIn(ctx context.Context, q querier, o owner, p plan, verb string) error {
	ok, err := decidePlan(ctx, q, p)
	if err != nil {
		return err
	}
	if !ok {
		cur, err := getPlan(ctx, q, o, p.SessionID, p.ID)
		if err != nil {
			return err
		}
		return planDecided(cur.State, verb)
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

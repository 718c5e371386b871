package architect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
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
		Repository:   p.Repository,
		Consultation: p.Consultation,
		Trivial:      p.Trivial,
		AutoApproved: p.AutoApproved,
		Notes:        p.Notes,
	}
}

// full is p as GetPlan shows it: with its versions and its todos, whose
// states come from run (nil when the plan has none, or it is not read).
func (s *Service) full(ctx context.Context, q querier, p plan, run *orchestratorv1.Run) (*architectv1.Plan, error) {
	pb := p.proto()
	var err error
	if pb.Versions, err = planVersions(ctx, q, p); err != nil {
		return nil, err
	}
	pb.Todos = todosOf(p.DAG, run)
	return pb, nil
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
	request, err := s.checkText("request", req.GetRequest())
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
	p, _, _, err := s.create(ctx, who, newPlan{sessionID: sessionID, request: request,
		stated: statedIntent{constraints: constraints, criteria: criteria}, dag: explicit})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create plan", err)
	}
	s.metrics.created.WithLabelValues(p.Planner, "api").Inc()
	if err := s.announce(ctx, p); err != nil {
		// The plan is stored; the caller has it in the response.
		s.log.WarnContext(ctx, "publish plan event", slog.String("plan", p.name()), logx.Err(err))
	}
	pb, err := s.full(ctx, s.db, p, nil)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create plan", err)
	}
	return &architectv1.CreatePlanResponse{Plan: pb}, nil
}

// checkText trims a request (or feedback on a plan, named by field) and
// checks it is present and small enough.
func (s *Service) checkText(field, raw string) (string, error) {
	text := strings.TrimSpace(raw)
	switch {
	case text == "":
		return "", apierr.Invalid(field, "required")
	case len(text) > s.cfg.MaxRequestBytes:
		return "", apierr.Invalid(field, "%d bytes exceeds the limit of %d bytes", len(text), s.cfg.MaxRequestBytes)
	case !utf8.ValidString(text):
		return "", apierr.Invalid(field, "must be valid UTF-8")
	}
	return text, nil
}

// newPlan is what a plan is made from.
type newPlan struct {
	sessionID, request string
	stated             statedIntent
	// dag is the caller's; nil has the planner draft one.
	dag *orchestratorv1.Dag
	// trivial makes the one-task plan of a trivial request.
	trivial bool
	// sourceID is the inbox message it comes from, if any.
	sourceID      *string
	correlationID string
}

// create validates (or drafts, when in.dag is nil) the DAG and stores a new
// plan awaiting approval, on the repository of its session (which it
// returns; nil without a Guide). A drafted plan is drafted from what the
// Librarian and the Archivalist said of the request. With a sourceID it is
// idempotent: a second call for the same source returns the plan drafted
// first, and created is false.
func (s *Service) create(ctx context.Context, who identity.Identity, in newPlan) (p plan, created bool, sess *guidev1.Session, err error) {
	if sess, err = s.sessions.Get(ctx, who, in.sessionID, "the session"); err != nil {
		return plan{}, false, nil, err
	}
	b := Brief{Request: in.request, Repository: sess.GetRepository()}
	draft, err := s.draft(ctx, who, in, &b)
	if err != nil {
		return plan{}, false, nil, err
	}
	if _, err := dag.Validate(draft.DAG); err != nil {
		var de *dag.Error
		if draft.Planner == plannerUser && errors.As(err, &de) {
			return plan{}, false, nil, apierr.New(codes.InvalidArgument, reasonInvalidDAG, "%s", de.Error()).With("field", "dag")
		}
		return plan{}, false, nil, fmt.Errorf("planner %s drafted an invalid DAG: %w", draft.Planner, err)
	}
	now := s.now()
	p = plan{
		ID: ids.New(), TenantID: who.TenantID, UserID: who.UserID, SessionID: in.sessionID,
		State: stateAwaitingApproval, Version: 1, SourceMessageID: in.sourceID, CorrelationID: in.correlationID,
		CreateTime: now, UpdateTime: now,
		Repository: b.Repository, Consultation: b.Consultation, Trivial: in.trivial,
		Request: in.request, Title: draft.Title, Planner: draft.Planner, DAG: draft.DAG,
		Intent: s.enrich(ctx, in.request, in.stated),
		Notes:  notesFor(b.Repository, draft.DAG, s.planner.Offline(), draft.Notes...),
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return insertPlan(ctx, tx, p) })
	if errors.Is(err, errDuplicateSource) {
		existing, err := planBySource(ctx, s.db, who.TenantID, *in.sourceID)
		return existing, false, sess, err
	}
	if err != nil {
		return plan{}, false, nil, err
	}
	return p, true, sess, nil
}

// draft is the plan's first version: the caller's DAG, or one drafted from
// b once the Librarian and the Archivalist were consulted (which fills
// b.Consultation).
func (s *Service) draft(ctx context.Context, who identity.Identity, in newPlan, b *Brief) (Draft, error) {
	if in.dag != nil {
		return Draft{Title: titleOf(in.request), DAG: proto.Clone(in.dag).(*orchestratorv1.Dag), Planner: plannerUser}, nil
	}
	b.Consultation = s.consultation(ctx, who, b.Repository, in.request)
	var d Draft
	if in.trivial {
		d = trivialDraft(*b)
	} else {
		var err error
		if d, err = s.planner.Draft(withSession(ctx, in.sessionID), *b); err != nil {
			return Draft{}, fmt.Errorf("draft plan: %w", err)
		}
	}
	if s.planner.Offline() {
		withFindings(d.DAG, *b)
	}
	d.Notes = append(d.Notes, alertNotes(b.Consultation.GetFailureAlerts())...) // failurealerts.go (spec E-09)
	return d, nil
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
	who, sessionID, id, err := planCaller(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	p, err := getPlan(ctx, s.db, ownerOf(who), sessionID, id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get plan", err)
	}
	run, note := s.runOf(ctx, who, p)
	pb, err := s.full(ctx, s.db, p, run)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get plan", err)
	}
	if note != "" {
		pb.Notes = append(pb.Notes, note)
	}
	return &architectv1.GetPlanResponse{Plan: pb}, nil
}

// ListPlans returns the caller's plans in a session, newest first, each
// with its latest version (GetPlan adds the versions and the todos).
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

// RejectPlan marks an awaiting plan rejected, with an optional reason.
func (s *Service) RejectPlan(ctx context.Context, req *architectv1.RejectPlanRequest) (*architectv1.RejectPlanResponse, error) {
	who, sessionID, id, err := planCaller(ctx, req.GetName())
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

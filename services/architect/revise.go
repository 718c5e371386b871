package architect

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/identity"
)

// RevisePlan makes an awaiting plan's next version from the user's
// feedback on its latest (spec G-32): the planner revises the latest
// version's tasks, every version is kept with the feedback it answers and
// its diff from the one before, and the new version awaits approval.
func (s *Service) RevisePlan(ctx context.Context, req *architectv1.RevisePlanRequest) (*architectv1.RevisePlanResponse, error) {
	who, sessionID, id, err := planCaller(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	feedback, err := s.checkText("feedback", req.GetFeedback())
	if err != nil {
		return nil, err
	}
	p, err := s.revise(ctx, who, sessionID, id, feedback)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "revise plan", err)
	}
	s.log.InfoContext(ctx, "plan revised", slog.String("plan", p.name()), slog.Int("version", int(p.Version)))
	planner, applied := "model", "true"
	if p.Planner == plannerLocal {
		planner = plannerLocal
	}
	if p.Diff == noDiff {
		applied = "false"
	}
	s.metrics.revised.WithLabelValues(planner, applied).Inc()
	s.publishRevision(ctx, p)
	pb, err := s.full(ctx, s.db, p, nil)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "revise plan", err)
	}
	return &architectv1.RevisePlanResponse{Plan: pb}, nil
}

// revise drafts and stores the plan's next version. The planner works
// outside any transaction (a model may take a while); the version is
// stored only if the plan is still awaiting approval at the version it
// revised.
func (s *Service) revise(ctx context.Context, who identity.Identity, sessionID, id, feedback string) (plan, error) {
	o := ownerOf(who)
	p, err := getPlan(ctx, s.db, o, sessionID, id)
	if err != nil {
		return plan{}, err
	}
	if p.State != stateAwaitingApproval {
		return plan{}, planDecided(p.State, "revise")
	}
	if int(p.Version) >= s.cfg.MaxPlanVersions {
		return plan{}, apierr.FailedPrecondition(reasonVersionLimit, "plan has %d versions, the most it may have; approve, reject or start a new plan",
			p.Version)
	}
	versions, err := planVersions(ctx, s.db, p)
	if err != nil {
		return plan{}, err
	}
	r := Revision{Brief: Brief{Request: p.Request, Repository: p.Repository, Consultation: p.Consultation},
		Versions: versions, Feedback: feedback}
	draft, err := s.planner.Revise(withSession(ctx, sessionID), r)
	if err != nil {
		return plan{}, fmt.Errorf("revise plan: %w", err)
	}
	if _, err := dag.Validate(draft.DAG); err != nil {
		return plan{}, unusablePlan(err)
	}
	prevTitle, prevDAG := p.Title, p.DAG
	p.Version++
	p.UpdateTime = s.now()
	p.Title, p.Planner, p.DAG, p.Feedback = draft.Title, draft.Planner, draft.DAG, feedback
	p.Diff = diffDAGs(prevTitle, prevDAG, p.Title, p.DAG)
	p.Notes = notesFor(p.Repository, p.DAG, s.planner.Offline(), draft.Notes...)
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		cur, err := getPlanForUpdate(ctx, tx, o, sessionID, id)
		if err != nil {
			return err
		}
		if cur.State != stateAwaitingApproval || cur.Version != p.Version-1 {
			return apierr.New(codes.Aborted, reasonPlanChanged, "plan changed while it was revised (now %s, version %d); read it and revise again",
				stateWords(cur.State), cur.Version)
		}
		if err := insertVersion(ctx, tx, p, p.UpdateTime); err != nil {
			return err
		}
		return setVersion(ctx, tx, p)
	})
	if err != nil {
		return plan{}, err
	}
	return p, nil
}

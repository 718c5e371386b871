package guide

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
)

// fakePlans is a PlanService holding plans, newest last, and the calls
// that answered them.
type fakePlans struct {
	architectv1.UnimplementedPlanServiceServer
	mu    sync.Mutex
	plans []*architectv1.Plan
	calls []string
}

func (p *fakePlans) add(session *guidev1.Session, id string, state architectv1.PlanState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans = append(p.plans, &architectv1.Plan{Name: session.GetName() + "/plans/" + id, Id: id, State: state, Version: 1,
		CreateTime: timestampAfter(len(p.plans))})
}

func (p *fakePlans) took() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

func (p *fakePlans) ListPlans(_ context.Context, req *architectv1.ListPlansRequest) (*architectv1.ListPlansResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &architectv1.ListPlansResponse{}
	for i := len(p.plans) - 1; i >= 0; i-- {
		if strings.HasPrefix(p.plans[i].GetName(), req.GetParent()+"/") {
			resp.Plans = append(resp.Plans, p.plans[i])
		}
	}
	return resp, nil
}

// answer records a call on plan name and applies change to it.
func (p *fakePlans) answer(call, name string, change func(*architectv1.Plan)) (*architectv1.Plan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, call)
	for _, pl := range p.plans {
		if pl.GetName() == name {
			if pl.GetState() != architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL {
				return nil, apierr.FailedPrecondition("PLAN_NOT_AWAITING_APPROVAL", "plan %s is not awaiting approval", name)
			}
			change(pl)
			return pl, nil
		}
	}
	return nil, apierr.NotFound("plan", name)
}

func (p *fakePlans) ApprovePlan(_ context.Context, req *architectv1.ApprovePlanRequest) (*architectv1.ApprovePlanResponse, error) {
	pl, err := p.answer("approve "+req.GetName(), req.GetName(), func(pl *architectv1.Plan) {
		pl.State, pl.Run = architectv1.PlanState_PLAN_STATE_APPROVED, "runs/r1"
	})
	if err != nil {
		return nil, err
	}
	return &architectv1.ApprovePlanResponse{Plan: pl, Run: &orchestratorv1.Run{Name: "runs/r1"}}, nil
}

func (p *fakePlans) RejectPlan(_ context.Context, req *architectv1.RejectPlanRequest) (*architectv1.RejectPlanResponse, error) {
	pl, err := p.answer("reject "+req.GetName()+": "+req.GetReason(), req.GetName(), func(pl *architectv1.Plan) {
		pl.State, pl.RejectReason = architectv1.PlanState_PLAN_STATE_REJECTED, req.GetReason()
	})
	return &architectv1.RejectPlanResponse{Plan: pl}, err
}

func (p *fakePlans) RevisePlan(_ context.Context, req *architectv1.RevisePlanRequest) (*architectv1.RevisePlanResponse, error) {
	pl, err := p.answer("revise "+req.GetName()+": "+req.GetFeedback(), req.GetName(), func(pl *architectv1.Plan) {
		pl.Version++
		pl.Versions = append(pl.Versions, &architectv1.PlanVersion{Version: pl.GetVersion(), Feedback: req.GetFeedback(),
			Diff: "~ task 2: " + req.GetFeedback()})
	})
	return &architectv1.RevisePlanResponse{Plan: pl}, err
}

// While a plan awaits approval, chat revises, approves and rejects the
// newest one awaiting it; the same words with none awaiting are routed.
func TestPlanRepliesInChat(t *testing.T) {
	t.Parallel()
	plans := &fakePlans{}
	f := newPeerFixture(t, func(s *grpc.Server) { architectv1.RegisterPlanServiceServer(s, plans) })
	ctx := as("t1", "u1")
	s, err := f.create(t, ctx, f.alpha.GetName())
	require.NoError(t, err)
	plans.add(s, "p1", architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL)
	plans.add(s, "p2", architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL)
	plans.add(s, "p3", architectv1.PlanState_PLAN_STATE_APPROVED)
	p1, p2 := s.GetName()+"/plans/p1", s.GetName()+"/plans/p2"

	r := f.send(t, ctx, s, "change step 2 to use the cache")
	require.Equal(t, "guide", r.GetRoute().GetTarget())
	require.Equal(t, tierPlanReply, r.GetRoute().GetTier())
	require.Equal(t, "PLAN_REVISE", r.GetRoute().GetIntentType())
	require.Contains(t, r.GetReply(), "Revised "+p2+": now version 2")
	require.Contains(t, r.GetReply(), "~ task 2: change step 2 to use the cache")
	r = f.send(t, ctx, s, "Revise the plan: drop the docs task")
	require.Contains(t, r.GetReply(), "now version 3")
	f.send(t, ctx, s, "instead of polling, use a webhook")
	f.send(t, ctx, s, "/plan revise add a test for the flag")
	evs := eventTypes(f.events(t, ctx, s, 0))
	require.Equal(t, []string{"message_received", "message_answered"}, evs[len(evs)-2:], "answered by the Guide")

	r = f.send(t, ctx, s, "yes, go ahead")
	require.Equal(t, "PLAN_APPROVE", r.GetRoute().GetIntentType())
	require.Contains(t, r.GetReply(), "Approved "+p2+" (version 5). Started runs/r1.")
	r = f.send(t, ctx, s, "reject it because it duplicates the other")
	require.Contains(t, r.GetReply(), "Rejected "+p1)
	require.Equal(t, []string{
		"revise " + p2 + ": change step 2 to use the cache",
		"revise " + p2 + ": drop the docs task",
		"revise " + p2 + ": instead of polling, use a webhook",
		"revise " + p2 + ": add a test for the flag",
		"approve " + p2,
		"reject " + p1 + ": it duplicates the other",
	}, plans.took())

	// None awaits approval now: the words are routed as any message, and
	// the slash forms say so.
	r = f.send(t, ctx, s, "change step 2 to use the cache")
	require.Equal(t, "architect", r.GetRoute().GetTarget())
	require.Equal(t, tierClassifier, r.GetRoute().GetTier())
	require.NotEqual(t, tierPlanReply, f.send(t, ctx, s, "approve").GetRoute().GetTier())
	require.Contains(t, f.send(t, ctx, s, "/plan approve").GetReply(), "No plan of this session is awaiting approval.")
	require.Contains(t, f.send(t, ctx, s, "/plan reject").GetReply(), "No plan of this session is awaiting approval.")
	require.Contains(t, f.send(t, ctx, s, "/plan revise").GetReply(), "usage: /plan revise")
	require.Contains(t, f.send(t, ctx, s, "/approve p3").GetReply(), "Could not approve "+s.GetName()+"/plans/p3: plan")
	require.Len(t, plans.took(), 7)

	plans.add(s, "p4", architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL)
	require.Contains(t, f.send(t, asViewer("t1", "u1"), s, "approve").GetReply(), "Viewers cannot approve")
	require.Contains(t, f.send(t, ctx, s, "/plan approve p4").GetReply(), "Approved "+s.GetName()+"/plans/p4")
}

// The words that answer a plan, and some that do not.
func TestReadPlanReply(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]planReply{
		"approve":                             {verb: planApprove},
		"Approved.":                           {verb: planApprove},
		"yes, go ahead":                       {verb: planApprove},
		"yes":                                 {verb: planApprove},
		"OK, ship it!":                        {verb: planApprove},
		"looks good, approve the plan please": {verb: planApprove},
		"reject":                              {verb: planReject},
		"reject it: too risky":                {verb: planReject, text: "too risky"},
		"No, reject the plan because the tests are missing": {verb: planReject, text: "the tests are missing"},
		"revise the plan: drop the docs task":               {verb: planRevise, text: "drop the docs task"},
		"change step 2 to   use the cache":                  {verb: planRevise, text: "change step 2 to use the cache"},
		"please remove the last task":                       {verb: planRevise, text: "please remove the last task"},
		"add another step that runs the linter":             {verb: planRevise, text: "add another step that runs the linter"},
		"instead of X do Y":                                 {verb: planRevise, text: "instead of X do Y"},
		"yes, but step 3 should also update the docs":       {verb: planRevise, text: "yes, but step 3 should also update the docs"},
		"update the plan so that it keeps the old flag":     {verb: planRevise, text: "update the plan so that it keeps the old flag"},
	} {
		got, ok := readPlanReply(text)
		require.True(t, ok, text)
		require.Equal(t, want, got, text)
	}
	for _, text := range []string{"", "...", "approve the budget change for the billing module", "rejection sampling in numpy",
		"fix typo in README", "add caching to the search endpoint", "where is step 2 defined", "revise", "yesterday's failures"} {
		_, ok := readPlanReply(text)
		require.False(t, ok, text)
	}
}

// timestampAfter is the i-th of a series of creation times, oldest first.
func timestampAfter(i int) *timestamppb.Timestamp {
	return timestamppb.New(time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC))
}

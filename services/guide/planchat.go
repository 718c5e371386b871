package guide

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Plans in chat. "/plan <request>" asks the Architect for a plan. While a
// plan of the session awaits approval, the user answers it in plain words
// (readPlanReply): approving it, rejecting it, or asking for a change,
// which the Architect makes the plan's next version (RevisePlan). The
// answer goes to the newest plan awaiting approval. "/plan approve
// [plan]", "/plan reject [reason]" and "/plan revise <feedback>" (and
// "/approve [plan]") do the same whatever their words. Any other message,
// and these words when no plan awaits approval, is routed as usual.

const planUsage = "/plan <request>|approve [plan]|reject [reason]|revise <feedback>"

// planVerb is how the user answers a plan.
type planVerb string

const (
	planApprove planVerb = "approve"
	planReject  planVerb = "reject"
	planRevise  planVerb = "revise"
)

// planReply is the user's answer to a plan.
type planReply struct {
	verb planVerb
	// text is the revision's feedback or the rejection's reason.
	text string
	// plan is the plan answered, "" for the newest awaiting approval.
	plan string
}

// tierPlanReply is the routing tier of a chat message that answered a
// plan awaiting approval.
const tierPlanReply = "plan_reply"

// The words of a plan answer, read from a message with its spaces
// collapsed, case aside.
var (
	// "approve", "approve it", "yes", "yes, go ahead", "ok, ship it",
	// "looks good, approve the plan please".
	planApprovePattern = regexp.MustCompile(`(?i)^(?:(?:yes|yep|yeah|ok|okay|sure|lgtm|looks good|sounds good)[\s,.!]*)*` +
		`(?:(?:please|then)\s+)?(?:approved?(?:\s+(?:it|that|this|the plan|this plan|that plan))?|go ahead|go for it|proceed|do it|ship it)?` +
		`(?:[\s,.!]+(?:please|thanks|thank you))?[\s.!]*$`)
	// "reject", "reject it: too risky", "no, reject the plan because ...".
	planRejectPattern = regexp.MustCompile(`(?i)^(?:no[\s,.!]+)?(?:please\s+)?reject(?:ed)?\b(?:\s+(?:it|that|this|the plan|this plan|that plan)\b)?` +
		`[\s,:;.!-]*(?:because\s+)?(.*)$`)
	// "revise the plan: ...", "revise: ...".
	planRevisePattern = regexp.MustCompile(`(?i)^(?:please\s+)?revise(?:\s+(?:it|that|this|the plan|this plan|that plan))?\b[\s,:;.!-]*(.*)$`)
	// A change to the plan in the user's words, taken whole as feedback:
	// "change step 2 to ...", "drop the last task", "add a step that ...",
	// "update the plan so that ...", "instead of X do Y", "in step 3 ...",
	// "step 2 should ...".
	planChangePattern = regexp.MustCompile(`(?i)^(?:(?:yes|ok|okay|sure|no)[\s,.!]+)?(?:but\s+)?(?:please\s+)?(?:` +
		`(?:change|replace|update|modify|edit|rewrite|redo|drop|remove|delete|skip|split|merge|reorder|move|swap)\s+(?:\S+\s+){0,3}?(?:step|task)s?\b` +
		`|(?:change|update|modify|amend|adjust|edit|rework)\s+(?:the|this|that)\s+plan\b` +
		`|add\s+(?:a|an|another|one more)\s+(?:\S+\s+)?(?:step|task)\b` +
		`|(?:instead of|rather than)\b` +
		`|(?:in|for)\s+(?:step|task)\s+\d+\b` +
		`|(?:step|task)\s+\d+\s+(?:should|must|needs?|has to|is)\b)`)
)

// readPlanReply reads a chat message as an answer to a plan awaiting
// approval.
func readPlanReply(text string) (planReply, bool) {
	t := strings.Join(strings.Fields(text), " ")
	if t == "" {
		return planReply{}, false
	}
	if m := planRevisePattern.FindStringSubmatch(t); m != nil && strings.TrimSpace(m[1]) != "" {
		return planReply{verb: planRevise, text: strings.TrimSpace(m[1])}, true
	}
	if planChangePattern.MatchString(t) {
		return planReply{verb: planRevise, text: t}, true
	}
	if m := planRejectPattern.FindStringSubmatch(t); m != nil {
		return planReply{verb: planReject, text: strings.TrimSpace(m[1])}, true
	}
	if planApprovePattern.MatchString(t) && strings.Trim(t, " ,.!") != "" {
		return planReply{verb: planApprove}, true
	}
	return planReply{}, false
}

// planAnswer says whether a message r that is no command answers a plan
// of sess awaiting approval, and which: the words must answer a plan
// (readPlanReply) and the Architect must have one awaiting approval. When
// the Architect cannot be asked, the message is routed as usual.
func (s *Service) planAnswer(ctx context.Context, r sendRequest, sess session) (planReply, bool) {
	if r.command != "" || s.architect == nil {
		return planReply{}, false
	}
	reply, ok := readPlanReply(r.text)
	if !ok {
		return planReply{}, false
	}
	cctx, cancel := s.peerContext(ctx, r.owner)
	defer cancel()
	p, err := s.awaitingPlan(cctx, sess.ID)
	if err != nil {
		s.log.WarnContext(ctx, "look for a plan awaiting approval", slog.String(logx.KeySessionID, sess.ID), logx.Err(err))
		return planReply{}, false
	}
	if p == nil {
		return planReply{}, false
	}
	reply.plan = p.GetName()
	return reply, true
}

// awaitingPlan is the session's newest plan awaiting approval, nil for none.
func (s *Service) awaitingPlan(ctx context.Context, sessionID string) (*architectv1.Plan, error) {
	resp, err := s.architect.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: sessionName(sessionID), PageSize: 50})
	if err != nil {
		return nil, err
	}
	var newest *architectv1.Plan
	for _, p := range resp.GetPlans() {
		if p.GetState() == architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL &&
			(newest == nil || p.GetCreateTime().AsTime().After(newest.GetCreateTime().AsTime())) {
			newest = p
		}
	}
	return newest, nil
}

// planCommand is /plan: a request for a plan, or an answer to one.
func (s *Service) planCommand(ctx context.Context, env *commandEnv, rest string) (commandResult, error) {
	verb, arg, _ := strings.Cut(rest, " ")
	arg = strings.TrimSpace(arg)
	switch planVerb(strings.ToLower(verb)) {
	case planApprove:
		return s.answerPlan(ctx, env, planReply{verb: planApprove, plan: s.planName(env, arg)})
	case planReject:
		return s.answerPlan(ctx, env, planReply{verb: planReject, text: arg})
	case planRevise:
		if arg == "" {
			return commandResult{reply: "usage: /plan revise <what to change>"}, nil
		}
		return s.answerPlan(ctx, env, planReply{verb: planRevise, text: arg})
	}
	if rest == "" {
		return commandResult{reply: "usage: " + planUsage}, nil
	}
	envelopeID := ids.New()
	route := outcomeRoute{Target: topology.AgentArchitect, Tier: tierSlashCommand, Confidence: 1, IntentType: gateExplicit,
		Reason: "slash command /plan"}
	return commandResult{
		reply: "Asked the architect for a plan; it will appear on this session's event stream.",
		route: &route, envelopeID: &envelopeID, text: rest, plan: routePlan{pending: true},
	}, nil
}

// approveCommand is /approve [plan].
func (s *Service) approveCommand(ctx context.Context, env *commandEnv, args []string) (commandResult, error) {
	arg := ""
	if len(args) > 0 {
		arg = args[0]
	}
	return s.answerPlan(ctx, env, planReply{verb: planApprove, plan: s.planName(env, arg)})
}

// planName is the plan a command names: "sessions/{s}/plans/{p}" as it is,
// a plan id of this session, or "" for none.
func (s *Service) planName(env *commandEnv, arg string) string {
	if arg == "" || strings.HasPrefix(arg, sessionsCollection) {
		return arg
	}
	return sessionName(env.session.ID) + "/plans/" + arg
}

// answerPlan approves, rejects or revises the plan r names, or the
// session's newest plan awaiting approval. The Architect's refusal is
// told in the reply.
func (s *Service) answerPlan(ctx context.Context, env *commandEnv, r planReply) (commandResult, error) {
	if s.architect == nil {
		return commandResult{reply: fmt.Sprintf("The architect is not configured, so there is no plan to %s.", r.verb)}, nil
	}
	if env.who.Role == identity.RoleViewer {
		return commandResult{reply: "Viewers cannot approve, reject or revise plans."}, nil
	}
	cctx, cancel := s.peerContext(ctx, env.owner)
	defer cancel()
	if r.plan == "" {
		p, err := s.awaitingPlan(cctx, env.session.ID)
		if err != nil {
			s.log.WarnContext(ctx, "list plans", logx.Err(err))
			return commandResult{reply: "The architect did not answer; try again shortly."}, nil
		}
		if p == nil {
			return commandResult{reply: "No plan of this session is awaiting approval."}, nil
		}
		r.plan = p.GetName()
	}
	reply, err := s.sendPlanReply(cctx, r)
	if err != nil {
		return commandResult{reply: fmt.Sprintf("Could not %s %s: %s", r.verb, truncate(r.plan, 120), statusMessage(err))}, nil
	}
	return commandResult{reply: reply}, nil
}

// sendPlanReply calls the Architect for r and tells what became of the
// plan: the run its approval started, or the version and diff of its
// revision.
func (s *Service) sendPlanReply(ctx context.Context, r planReply) (string, error) {
	switch r.verb {
	case planReject:
		resp, err := s.architect.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: r.plan, Reason: r.text})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Rejected %s.", resp.GetPlan().GetName()), nil
	case planRevise:
		resp, err := s.architect.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: r.plan, Feedback: r.text})
		if err != nil {
			return "", err
		}
		return revisedReply(resp.GetPlan()), nil
	}
	resp, err := s.architect.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: r.plan})
	if err != nil {
		return "", err
	}
	reply := fmt.Sprintf("Approved %s (version %d).", resp.GetPlan().GetName(), resp.GetPlan().GetVersion())
	if run := resp.GetRun(); run != nil {
		reply += " Started " + run.GetName() + "."
	}
	return reply, nil
}

// revisedReply tells a revised plan's new version and its diff from the
// version before.
func revisedReply(p *architectv1.Plan) string {
	diff := "the architect reported no changes"
	if vs := p.GetVersions(); len(vs) > 0 && strings.TrimSpace(vs[len(vs)-1].GetDiff()) != "" {
		diff = strings.TrimSpace(vs[len(vs)-1].GetDiff())
	}
	return fmt.Sprintf("Revised %s: now version %d. Changes from the version before:\n%s\nApprove it with \"approve\", or ask for another change.",
		p.GetName(), p.GetVersion(), truncate(diff, 4000))
}

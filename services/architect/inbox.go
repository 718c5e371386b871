package architect

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Inbox outcomes of the Architect's own (pkg/inbox counts the others).
const (
	outcomeDrafted   = "drafted"
	outcomeDuplicate = "duplicate"
	outcomeRefused   = "refused"
	// outcomeAutoApproved: a trivial request's plan, approved at once as
	// its session allows.
	outcomeAutoApproved = "auto_approved"
)

// intentTrivial is the intent gate's type of a small change (spec A-29,
// D-40): it becomes a one-task plan.
const intentTrivial = "TRIVIAL"

// handleInbox turns a user request routed by the Guide into a plan awaiting
// approval, acting for the envelope's tenant and user. A redelivered
// envelope finds the plan drafted the first time and only announces it
// again; malformed envelopes are dropped.
func (s *Service) handleInbox(ctx context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	if env.GetType() != messagev1.MessageType_MESSAGE_TYPE_USER_INPUT {
		return inbox.Result{}, inbox.Reject("envelope %s: unsupported type %s", env.GetId(), env.GetType())
	}
	who := identity.Identity{TenantID: env.GetTenantId(), UserID: env.GetUserId(), Role: identity.RoleService}
	if !who.Valid() || env.GetId() == "" {
		return inbox.Result{}, inbox.Reject("envelope %q: needs an id, a tenant and a user", env.GetId())
	}
	text, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, err
	}
	ctx = identity.NewContext(ctx, who)
	sessionID := strings.ToLower(env.GetSessionId())
	request, err := s.checkText("request", text)
	if err != nil {
		return s.refuse(ctx, env, sessionID, len(strings.TrimSpace(text)), err)
	}
	sourceID := env.GetId()
	si := env.GetStructuredIntent()
	stated := statedIntent{intentType: si.GetIntentType(), constraints: clipStatements(si.GetKeyConstraints()), criteria: clipStatements(si.GetSuccessCriteria())}
	p, created, sess, err := s.create(ctx, who, newPlan{sessionID: sessionID, request: request, stated: stated,
		trivial: strings.EqualFold(si.GetIntentType(), intentTrivial), sourceID: &sourceID, correlationID: env.GetCorrelationId()})
	if status.Code(err) == codes.NotFound {
		return inbox.Result{}, inbox.Reject("envelope %s: %v", env.GetId(), err)
	}
	if err != nil {
		return inbox.Result{}, fmt.Errorf("draft plan for envelope %s: %w", env.GetId(), err)
	}
	outcome := outcomeDuplicate
	if created {
		outcome = outcomeDrafted
		s.metrics.created.WithLabelValues(p.Planner, "inbox").Inc()
		s.log.InfoContext(ctx, "plan drafted", slog.String("plan", p.name()), slog.Int("nodes", len(p.DAG.GetNodes())),
			slog.String(logx.KeySessionID, sessionID), slog.String(logx.KeyCorrelationID, env.GetCorrelationId()))
	}
	if p.Trivial && p.State == stateAwaitingApproval && sess.GetConfig().GetAutoApproveTrivial() {
		// A redelivered envelope tries again, as its plan still waits.
		_, _, err := s.approve(ctx, who, p.SessionID, p.ID, 0, true)
		if err == nil {
			return inbox.Result{Outcome: outcomeAutoApproved}, nil
		}
		s.log.WarnContext(ctx, "approve a trivial plan without asking", slog.String("plan", p.name()), logx.Err(err))
		p.Notes = append(p.Notes, "it was not approved without asking, as the session allows: "+clip(err.Error(), maxConsultLine))
	}
	if err := s.announce(ctx, p); err != nil {
		// Redelivery finds the stored plan and announces it again.
		return inbox.Result{}, fmt.Errorf("announce plan %s: %w", p.name(), err)
	}
	return inbox.Result{Outcome: outcome}, nil
}

// refuse tells the session why a routed request cannot become a plan (it
// is empty or too large), so the user learns why instead of waiting. The
// refusal is an error event, not an answer: the request reached the
// right agent, which is no routing failure (an answer flagged cannot_help
// would be one), and the event carries the reason the API gives the same
// request.
func (s *Service) refuse(ctx context.Context, env *messagev1.Envelope, sessionID string, size int, why error) (inbox.Result, error) {
	text := "I could not draft a plan: the request is empty."
	if size > 0 {
		text = fmt.Sprintf("I could not draft a plan: the request is %d bytes, over the limit of %d; shorten it and send it again.",
			size, s.cfg.MaxRequestBytes)
	}
	correlation := env.GetCorrelationId()
	if correlation == "" {
		correlation = env.GetId()
	}
	_, err := topology.PublishEvent(ctx, s.bus, env.GetTenantId(), env.GetId()+".refused", &eventv1.Event{
		SessionId:     sessionID,
		Type:          eventv1.EventType_EVENT_TYPE_ERROR,
		Source:        topology.AgentArchitect,
		CorrelationId: correlation,
		Text:          text,
		Payload: &eventv1.Event_Error{Error: &eventv1.ErrorEvent{
			Reason: apierr.Reason(why), Message: text, CorrelationId: correlation}},
	})
	if err != nil {
		return inbox.Result{}, fmt.Errorf("answer envelope %s: %w", env.GetId(), err)
	}
	return inbox.Result{Outcome: outcomeRefused}, nil
}

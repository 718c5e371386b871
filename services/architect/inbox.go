package architect

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// handleInbox turns a user request routed by the Guide into a plan awaiting
// approval, acting for the envelope's tenant and user. A redelivered
// envelope finds the plan drafted the first time and only announces it
// again; malformed envelopes are dropped.
func (s *Service) handleInbox(ctx context.Context, msg jetstream.Msg) error {
	env := &messagev1.Envelope{}
	if err := natsx.Unmarshal(msg, env); err != nil {
		s.metrics.inbox.WithLabelValues("dropped").Inc()
		return err
	}
	if env.GetType() != messagev1.MessageType_MESSAGE_TYPE_USER_INPUT {
		s.metrics.inbox.WithLabelValues("dropped").Inc()
		return natsx.Permanent(fmt.Errorf("envelope %s: unsupported type %s", env.GetId(), env.GetType()))
	}
	who := identity.Identity{TenantID: env.GetTenantId(), UserID: env.GetUserId(), Role: identity.RoleService}
	if !who.Valid() || !ids.Valid(env.GetSessionId()) || env.GetId() == "" {
		s.metrics.inbox.WithLabelValues("dropped").Inc()
		return natsx.Permanent(fmt.Errorf("envelope %q: needs an id, a tenant, a user and a session id", env.GetId()))
	}
	ctx = identity.NewContext(ctx, who)
	sessionID := strings.ToLower(env.GetSessionId())
	log := s.log.With(slog.String(logx.KeySessionID, sessionID), slog.String(logx.KeyCorrelationID, env.GetCorrelationId()))

	text := env.GetUserInput().GetText()
	if strings.TrimSpace(text) == "" {
		text = env.GetStructuredIntent().GetOriginalRequest()
	}
	request, err := s.checkRequest(text)
	if err != nil {
		s.metrics.inbox.WithLabelValues("refused").Inc()
		return s.refuse(ctx, env, sessionID, len(strings.TrimSpace(text)))
	}
	sourceID := env.GetId()
	si := env.GetStructuredIntent()
	stated := statedIntent{intentType: si.GetIntentType(), constraints: clipStatements(si.GetKeyConstraints()), criteria: clipStatements(si.GetSuccessCriteria())}
	p, created, err := s.create(ctx, who, sessionID, request, stated, nil, &sourceID, env.GetCorrelationId())
	if err != nil {
		s.metrics.inbox.WithLabelValues("retry").Inc()
		return fmt.Errorf("draft plan for envelope %s: %w", env.GetId(), err)
	}
	if created {
		s.metrics.created.WithLabelValues(p.Planner, "inbox").Inc()
		s.metrics.inbox.WithLabelValues("drafted").Inc()
		log.InfoContext(ctx, "plan drafted", slog.String("plan", p.name()), slog.Int("nodes", len(p.DAG.GetNodes())))
	} else {
		s.metrics.inbox.WithLabelValues("duplicate").Inc()
	}
	if err := s.announce(ctx, p); err != nil {
		// Redelivery finds the stored plan and announces it again.
		return fmt.Errorf("announce plan %s: %w", p.name(), err)
	}
	return nil
}

// refuse answers a routed request that cannot become a plan, so the user
// learns why instead of waiting.
func (s *Service) refuse(ctx context.Context, env *messagev1.Envelope, sessionID string, size int) error {
	text := "I could not draft a plan: the request is empty."
	if size > 0 {
		text = fmt.Sprintf("I could not draft a plan: the request is %d bytes, over the limit of %d; shorten it and send it again.",
			size, s.cfg.MaxRequestBytes)
	}
	_, err := topology.PublishEvent(ctx, s.bus, topology.Event{
		Tenant:        env.GetTenantId(),
		Session:       sessionID,
		ID:            env.GetId() + ".refused",
		Type:          "message.answered",
		Source:        topology.AgentArchitect,
		CorrelationID: env.GetCorrelationId(),
		Text:          text,
		Data:          map[string]any{"agent": topology.AgentArchitect, "refused": true},
	})
	if err != nil {
		return fmt.Errorf("answer envelope %s: %w", env.GetId(), err)
	}
	return nil
}

package guide

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Routing tiers, as reported in Route.tier.
const (
	tierSlashCommand  = "slash_command"
	tierSkill         = "skill"
	tierCache         = "cache"
	tierClassifier    = "classifier"
	tierClarification = "clarification"
)

// routePlan is what SendMessage stores with a message besides the message:
// the pending request of a routed message, or the clarification asked.
type routePlan struct {
	pending       bool
	cacheKey      string
	cacheTTL      time.Duration
	clarification *clarificationRow
}

func (r outcomeRoute) proto() *guidev1.Route {
	return &guidev1.Route{
		Target:          r.Target,
		Confidence:      r.Confidence,
		Tier:            r.Tier,
		IntentType:      r.IntentType,
		Reason:          r.Reason,
		KnowledgeIntent: r.KnowledgeIntent,
		TimeScope:       r.TimeScope,
		Cached:          r.Cached,
	}
}

// routed is the route as a message_routed event tells it.
func (r outcomeRoute) routed(message string) *eventv1.MessageRouted {
	return &eventv1.MessageRouted{Message: message, Target: r.Target, Tier: r.Tier, Confidence: r.Confidence,
		IntentType: r.IntentType, Reason: r.Reason, Cached: r.Cached, KnowledgeIntent: r.KnowledgeIntent, TimeScope: r.TimeScope}
}

// Direct skills (spec A-28): "show me X" and "what is X" for a code
// identifier go to the librarian without classification.
var (
	showMePattern = regexp.MustCompile(`(?i)^show me (?:the )?(.+?)[?.!]*$`)
	whatIsPattern = regexp.MustCompile(`(?i)^what is (?:the )?([A-Za-z_][A-Za-z0-9_.]*)[?.!]*$`)
)

// directSkill matches the direct query skills; the match confidence is 0.95.
func directSkill(text string) (Classification, bool) {
	if m := showMePattern.FindStringSubmatch(text); m != nil {
		subj := strings.Join(strings.Fields(strings.ToLower(m[1])), "_")
		if f := strings.Fields(m[1]); len(f) == 1 && isIdentifier(f[0]) {
			subj = f[0]
		}
		return Classification{Target: topology.AgentLibrarian, Confidence: 0.95, IntentType: gateExploratory,
			Action: intentFindCode, KnowledgeIntent: "LOCATE", Subject: subj, Reason: `direct skill "show me [X]"`}, true
	}
	if m := whatIsPattern.FindStringSubmatch(text); m != nil && (isIdentifier(m[1]) || exportedName(m[1])) {
		return Classification{Target: topology.AgentLibrarian, Confidence: 0.95, IntentType: gateExploratory,
			Action: intentFindCode, KnowledgeIntent: "EXPLAIN", Subject: m[1], Reason: `direct skill "what is [X]"`}, true
	}
	return Classification{}, false
}

// exportedName reports a capitalised word with a lower-case letter ("Main",
// "Handler", "Config"): the form of an exported name, which in "what is X"
// asks about code. An acronym ("JWT") is left to the classifier: it names a
// concept as often as a type.
func exportedName(w string) bool {
	if len(w) < 2 || !unicode.IsUpper(rune(w[0])) || strings.IndexFunc(w, unicode.IsLower) < 0 {
		return false
	}
	return strings.IndexFunc(w, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '.' }) < 0
}

// decide routes a user message: direct skills (tier 0), the route cache
// (tier 1), the classifier (tier 2), adjusted by past routing failures; a
// confidence under the threshold becomes a question to the user.
func (s *Service) decide(ctx context.Context, who identity.Identity, sess session, m *message) (routePlan, error) {
	cl, tier, err := s.classifyText(ctx, who.TenantID, m.Text)
	if err != nil {
		return routePlan{}, err
	}
	if tier == tierClassifier {
		s.cache.storeRoute(ctx, who.TenantID, m.Text, cl)
	}
	s.metrics.tiers.WithLabelValues(tier).Inc()
	return s.planRoute(ctx, who, sess, m, cl, tier), nil
}

// classifyText classifies a text as routing does, and names the tier that
// decided: a direct skill, the route cache, or the classifier, whose
// confidence past routing failures lower. It stores nothing.
func (s *Service) classifyText(ctx context.Context, tenant, text string) (Classification, string, error) {
	if c, ok := directSkill(text); ok && c.Confidence > s.cfg.SkillThreshold {
		return c, tierSkill, nil
	}
	if c, ok := s.cache.route(ctx, tenant, text); ok {
		return c, tierCache, nil
	}
	cl, err := s.classifier.Classify(ctx, text)
	if err != nil {
		s.log.ErrorContext(ctx, "classifier failed", logx.Err(err))
		return Classification{}, "", apierr.Unavailable(reasonClassifierUnavailable, "message classifier unavailable; retry later")
	}
	if cl.Target != "" {
		if err := s.applyFailureFeedback(ctx, tenant, text, &cl); err != nil {
			return Classification{}, "", apierr.Status(ctx, s.log, "classify message", err)
		}
	}
	return cl, tierClassifier, nil
}

// planRoute fills m's route from a classification.
func (s *Service) planRoute(ctx context.Context, who identity.Identity, sess session, m *message, cl Classification, tier string) routePlan {
	m.IntentSubject = cl.Subject
	m.Constraints, m.Criteria = cl.KeyConstraints, cl.SuccessCriteria
	m.Route = outcomeRoute{Tier: tier, Confidence: cl.Confidence, IntentType: cl.IntentType, Reason: cl.Reason,
		KnowledgeIntent: cl.KnowledgeIntent, TimeScope: cl.TimeScope}
	if cl.Target == "" || cl.Confidence < s.cfg.RouteThreshold {
		m.Route.IntentType = gateAmbiguous
		m.Route.KnowledgeIntent, m.Route.TimeScope = "", ""
		question, options := clarification(cl)
		return s.askUser(who, sess, m, question, options, contextRouting)
	}
	// Step 2 of the intent gate (spec A-30): a change the architect would
	// have to guess about is asked about first.
	userChose := tier == tierClarification && cl.Confidence == 1
	if check, question := validateChange(cl, routeText(*m)); check != "" && !userChose {
		m.Route.Reason += "; " + check + " check failed"
		return s.askUser(who, sess, m, question, []string{cl.Target}, "validation:"+check)
	}
	m.Route.Target = cl.Target
	envelopeID := ids.New()
	m.EnvelopeID = &envelopeID
	key, ttl := s.cache.answerKey(ctx, who.TenantID, sess.ID, sess.Repository, cl)
	if a, ok := s.cache.answer(ctx, key); ok {
		m.Route.Cached = true
		m.Route.Tier = tierCache
		m.Reply = a.GetText()
		m.CachedAnswer = a
		s.metrics.answerCache.WithLabelValues(cl.Target, "hit").Inc()
		return routePlan{}
	}
	if key != "" {
		s.metrics.answerCache.WithLabelValues(cl.Target, "miss").Inc()
	}
	// Step 3 (spec A-30): a change goes to the architect with what the
	// librarian and the archivalist know about its area.
	m.PreRoute = s.preRoute(ctx, cl, routeText(*m), sess.Repository)
	return routePlan{pending: true, cacheKey: key, cacheTTL: ttl}
}

// routeText is the text a message routes: its own, or the request it
// completes.
func routeText(m message) string {
	if m.RouteText != "" {
		return m.RouteText
	}
	return m.Text
}

// contextRouting is the context of the Guide's question when it cannot
// tell where a message goes.
const contextRouting = "routing"

// askUser makes m a question to the user instead of a route.
func (s *Service) askUser(who identity.Identity, sess session, m *message, question string, options []string, context string) routePlan {
	m.Route.Target = ""
	m.Reply, m.Options = question, options
	replyID := ids.New()
	m.ReplyID = &replyID
	c := &clarificationRow{ID: ids.New(), TenantID: who.TenantID, UserID: who.UserID, SessionID: sess.ID,
		CorrelationID: m.CorrelationID, RequestingAgent: authorGuide, Question: m.Reply, Options: m.Options,
		Context: context, Original: routeText(*m), CreateTime: m.CreateTime}
	m.ClarificationID = c.ID
	m.ClarifyReason = context
	if context == contextRouting {
		m.ClarifyReason = "low_confidence"
	}
	return routePlan{clarification: c}
}

// logRouteDecision logs a decision at debug level.
func (s *Service) logRouteDecision(ctx context.Context, m message) {
	s.log.DebugContext(ctx, "message handled", slog.String(logx.KeySessionID, m.SessionID),
		slog.String(logx.KeyCorrelationID, m.CorrelationID), slog.String("tier", m.Route.Tier),
		slog.String(logx.KeyAgent, m.Route.Target), slog.Float64("confidence", m.Route.Confidence))
}

// agentPurposes describe the routable agents when the Guide asks the user
// to choose, in the order they are offered.
var agentPurposes = []struct{ agent, purpose string }{
	{topology.AgentLibrarian, "search this codebase"},
	{topology.AgentArchivalist, "recall what was done or decided before"},
	{topology.AgentAcademic, "look up external knowledge (documentation, best practices, research)"},
	{topology.AgentArchitect, "plan a change to the code"},
}

// clarification builds the question asked when routing is ambiguous and the
// agents offered as answers: the plausible ones, or all when fewer than two
// matched.
func clarification(c Classification) (string, []string) {
	options := slices.Clone(c.Candidates)
	if len(options) > 3 {
		options = options[:3]
	}
	if len(options) < 2 {
		for _, p := range agentPurposes {
			if !slices.Contains(options, p.agent) {
				options = append(options, p.agent)
			}
		}
	}
	parts := make([]string, 0, len(options))
	for _, o := range options {
		for _, p := range agentPurposes {
			if p.agent == o {
				parts = append(parts, fmt.Sprintf("%d. %s (%s)", len(parts)+1, p.purpose, p.agent))
			}
		}
	}
	var list string
	switch len(parts) {
	case 0:
	case 1:
		list = parts[0]
	default:
		list = strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
	}
	return fmt.Sprintf("I am not sure who should handle this. Do you want to %s? Reply with a number, the agent's name, "+
		"or the request in other words.", list), options
}

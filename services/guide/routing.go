package guide

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
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
	if m := whatIsPattern.FindStringSubmatch(text); m != nil && isIdentifier(m[1]) {
		return Classification{Target: topology.AgentLibrarian, Confidence: 0.95, IntentType: gateExploratory,
			Action: intentFindCode, KnowledgeIntent: "EXPLAIN", Subject: m[1], Reason: `direct skill "what is [X]"`}, true
	}
	return Classification{}, false
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
	key, ttl := s.cache.answerKey(ctx, who.TenantID, sess.ID, cl)
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
	m.PreRoute = s.preRoute(ctx, cl, routeText(*m))
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

// routingCountShards is how many rows each (tenant, intent type) counter
// is spread over: group commit writer i adds to shard i, other transactions
// to a random one of the rest, so that concurrent transactions do not queue
// on one row lock until each commit reaches the disk.
const routingCountShards = 16

// routeCountKey is one routing counter: a tenant's decisions of one intent
// type and one tenth of confidence.
type routeCountKey struct {
	tenant, intent string
	bucket         int16
}

// confidenceBucket is the tenth a confidence falls in, 0 to 9 (spec A-33:
// failure rate per confidence).
func confidenceBucket(c float64) int16 {
	return int16(min(max(int(c*10), 0), 9))
}

// bucketLabel names a tenth by its lower bound: "0.8".
func bucketLabel(b int16) string { return fmt.Sprintf("%.1f", float64(b)/10) }

// routeCounts gathers the routing decisions of a group commit, written
// once per counter at its end.
type routeCounts struct{ m map[routeCountKey]int64 }

func (c *routeCounts) add(k routeCountKey) {
	if c.m == nil {
		c.m = map[routeCountKey]int64{}
	}
	c.m[k]++
}

// aloneShard is the counter shard of a transaction outside group commit.
func aloneShard() int {
	return defaultCommitWriters + rand.IntN(routingCountShards-defaultCommitWriters)
}

// requestPattern is what a request is remembered by for routing failures:
// its content words, sorted.
func requestPattern(text string) string {
	var words []string
	for _, w := range wordPattern.FindAllString(strings.ToLower(text), -1) {
		if stopWords[w] || slices.Contains(words, w) {
			continue
		}
		words = append(words, w)
	}
	sort.Strings(words)
	return strings.Join(words, " ")
}

// applyFailureFeedback lowers a classification's confidence by the
// penalty for each recorded routing failure of the same request pattern
// to the same agent (spec ), and offers the agent the failures
// said it should have been.
func (s *Service) applyFailureFeedback(ctx context.Context, tenant, text string, cl *Classification) error {
	pattern := requestPattern(text)
	counts, ok, err := s.failures.lookup(ctx, s.db, tenant, pattern, cl.Target)
	if err != nil {
		return err
	}
	if !ok {
		if counts, err = queryFailures(ctx, s.db, tenant, pattern, cl.Target); err != nil {
			return err
		}
	}
	total := 0
	var better []string
	for _, c := range counts {
		total += c.n
		better = append(better, c.agent)
	}
	if total == 0 {
		return nil
	}
	penalty := math.Min(0.5, float64(total)*s.cfg.FailurePenalty)
	cl.Confidence = math.Max(0, math.Round((cl.Confidence-penalty)*1000)/1000)
	cl.Reason += fmt.Sprintf("; lowered by %.2f for %d past misroute(s)", penalty, total)
	cands := slices.Clone(better)
	for _, c := range cl.Candidates {
		if !slices.Contains(cands, c) {
			cands = append(cands, c)
		}
	}
	cl.Candidates = cands
	return nil
}

// queryFailures counts the failures of a pattern routed to an agent by the
// agent it should have been, most frequent first.
func queryFailures(ctx context.Context, q querier, tenant, pattern, routedTo string) ([]failureCount, error) {
	rows, err := q.Query(ctx, `SELECT should_have_been, count(*) FROM routing_failures
		WHERE tenant_id = $1 AND pattern = $2 AND routed_to = $3 GROUP BY should_have_been ORDER BY count(*) DESC, should_have_been`,
		tenant, pattern, routedTo)
	if err != nil {
		return nil, fmt.Errorf("look up routing failures: %w", err)
	}
	defer rows.Close()
	var out []failureCount
	for rows.Next() {
		var c failureCount
		if err := rows.Scan(&c.agent, &c.n); err != nil {
			return nil, fmt.Errorf("look up routing failures: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up routing failures: %w", err)
	}
	return out, nil
}

// CumulativeConfidence is the product of a confidence chain (spec A-05).
func CumulativeConfidence(chain []*messagev1.ConfidenceEntry) float64 {
	if len(chain) == 0 {
		return 0
	}
	p := 1.0
	for _, e := range chain {
		p *= e.GetConfidence()
	}
	return p
}

// ConfidenceBand names a cumulative confidence (spec A-05) and the
// suggested action; the requesting agent decides.
func ConfidenceBand(c float64) (band, action string) {
	switch {
	case c >= 0.9:
		band = "high"
	case c >= 0.7:
		band = "good"
	case c >= 0.5:
		band = "moderate"
	case c >= 0.3:
		band = "low"
	default:
		band = "very_low"
	}
	switch {
	case c >= 0.65:
		action = "proceed"
	case c >= 0.5:
		action = "query_more_agents"
	case c >= 0.35:
		action = "consider_escalating"
	default:
		action = "escalate"
	}
	return band, action
}

// ownSession loads one of the caller's sessions by name.
func (s *Service) ownSession(ctx context.Context, name string) (session, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return session{}, err
	}
	id, err := parseSessionName("parent", name)
	if err != nil {
		return session{}, err
	}
	sess, err := getSession(ctx, s.db, ownerOf(who), id, false)
	if err != nil {
		return session{}, apierr.Status(ctx, s.log, "load session", err)
	}
	return sess, nil
}

// logRouteDecision logs a decision at debug level.
func (s *Service) logRouteDecision(ctx context.Context, m message) {
	s.log.DebugContext(ctx, "message handled", slog.String(logx.KeySessionID, m.SessionID),
		slog.String(logx.KeyCorrelationID, m.CorrelationID), slog.String("tier", m.Route.Tier),
		slog.String(logx.KeyAgent, m.Route.Target), slog.Float64("confidence", m.Route.Confidence))
}

package guide

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Completer runs one model call; the LLM gate (pkg/llm/gate) is one.
type Completer interface {
	Complete(ctx context.Context, req *llm.Request) (*llm.Response, error)
}

// LLMClassifierConfig tunes the model-backed classifier.
type LLMClassifierConfig struct {
	// Provider and Model choose the model; empty takes the gate's default
	// provider and the "fast" alias.
	Provider, Model string
	// Timeout bounds one classification; past it the offline rules answer.
	Timeout time.Duration
	// MaxTokens bounds the model's answer.
	MaxTokens int
}

// Defaults of LLMClassifierConfig.
const (
	DefaultLLMClassifierTimeout   = 3 * time.Second
	DefaultLLMClassifierMaxTokens = 400
)

// LLMClassifier is routing tier 2 with a language model (spec,
// one call classifies the message, extracting the intent
// gate's type, the target agent, the knowledge intent, subject and time
// scope, the structured intent's constraints and success criteria, and a
// confidence. The call goes through the gate as a user-invoked request (the
// user is waiting), so it takes the user lane. On any error, a timeout or an
// answer that does not parse or names unknown values, the offline rules
// classifier answers instead.
type LLMClassifier struct {
	llm      Completer
	fallback Classifier
	cfg      LLMClassifierConfig
	log      *slog.Logger
	outcomes *prometheus.CounterVec
}

// NewLLMClassifier classifies with c and falls back to the offline rules.
// reg may be nil.
func NewLLMClassifier(c Completer, cfg LLMClassifierConfig, log *slog.Logger, reg prometheus.Registerer) *LLMClassifier {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultLLMClassifierTimeout
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultLLMClassifierMaxTokens
	}
	if cfg.Model == "" {
		cfg.Model = llm.AliasFast
	}
	if log == nil {
		log = logx.Discard()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return &LLMClassifier{
		llm:      c,
		fallback: newModelClassifier(),
		cfg:      cfg,
		log:      log.With(logx.KeyComponent, "guide-llm-classifier"),
		outcomes: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_llm_classifications_total",
			Help: "Model-backed classifications, by outcome (model, or the reason the offline rules answered instead).",
		}, []string{"outcome"}),
	}
}

// classifierPrompt is the system prompt of the classification call.
const classifierPrompt = `You are the Guide of a multi-agent software system. You route one user message to the agent that owns it.
Agents:
- librarian: questions about this codebase (where code is, how it works, its patterns and conventions).
- archivalist: history (what was done, decided, tried or failed before; resuming earlier work).
- academic: external knowledge (documentation, best practices, research, comparisons).
- architect: every change to the code, trivial ones (typos, comments, whitespace, a version bump) included.
Intent types: TRIVIAL (a trivial change: architect), EXPLICIT (a clear, bounded change: architect), EXPLORATORY (a question: librarian, archivalist or academic), OPEN_ENDED (a vague improvement: architect), GITHUB_WORK (an issue or pull request: architect), AMBIGUOUS (you cannot tell: target "").
For the librarian, knowledge_intent is LOCATE (where is X), PATTERN (how do we do X), EXPLAIN (how does X work) or GENERAL.
For the archivalist, knowledge_intent is HISTORICAL, ACTIVITY, OUTCOME, SIMILAR, RESUME or GENERAL, and time_scope is one of today, yesterday, this_week, last_week, last_month, last_year, recent (the last 7 days), before, or "".
subject is what the message is about, in snake_case (or a code identifier as written).
key_constraints and success_criteria are short phrases lifted from the message (may be empty).
confidence is your probability, from 0 to 1, that target is right; below 0.7 the user will be asked.
Answer with one JSON object and nothing else:
{"intent_type": "...", "target": "...", "knowledge_intent": "...", "subject": "...", "time_scope": "...", "key_constraints": [], "success_criteria": [], "confidence": 0.0, "candidates": [], "reason": "..."}`

// llmAnswer is the JSON the model answers with.
type llmAnswer struct {
	IntentType      string   `json:"intent_type"`
	Target          string   `json:"target"`
	KnowledgeIntent string   `json:"knowledge_intent"`
	Subject         string   `json:"subject"`
	TimeScope       string   `json:"time_scope"`
	KeyConstraints  []string `json:"key_constraints"`
	SuccessCriteria []string `json:"success_criteria"`
	Confidence      *float64 `json:"confidence"`
	Candidates      []string `json:"candidates"`
	Reason          string   `json:"reason"`
}

// Classify asks the model, and the offline rules when the model fails.
func (c *LLMClassifier) Classify(ctx context.Context, text string) (Classification, error) {
	cl, err := c.ask(ctx, text)
	if err == nil {
		c.outcomes.WithLabelValues("model").Inc()
		return cl, nil
	}
	if ctx.Err() != nil {
		return Classification{}, ctx.Err()
	}
	outcome := "error"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		outcome = "timeout"
	case errors.Is(err, errBadAnswer):
		outcome = "bad_answer"
	}
	c.outcomes.WithLabelValues(outcome).Inc()
	c.log.WarnContext(ctx, "model classification failed; using the offline rules", slog.String("outcome", outcome), logx.Err(err))
	out, ferr := c.fallback.Classify(ctx, text)
	if ferr != nil {
		return Classification{}, ferr
	}
	out.Reason += " (offline rules: model " + outcome + ")"
	return out, nil
}

var errBadAnswer = errors.New("unusable model answer")

func (c *LLMClassifier) ask(ctx context.Context, text string) (Classification, error) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	zero := 0.0
	req := &llm.Request{
		Provider:    c.cfg.Provider,
		Model:       c.cfg.Model,
		System:      classifierPrompt,
		Messages:    []llm.Message{{Role: llm.RoleUser, Content: text}},
		MaxTokens:   c.cfg.MaxTokens,
		Temperature: &zero,
		Attribution: llm.Attribution{AgentID: authorGuide, AgentType: authorGuide, UserInvoked: true},
	}
	if who, ok := identity.FromContext(ctx); ok {
		req.TenantID, req.UserID = who.TenantID, who.UserID
	}
	resp, err := c.llm.Complete(cctx, req)
	if err != nil {
		return Classification{}, err
	}
	return parseLLMAnswer(resp.Content)
}

var (
	jsonObject     = regexp.MustCompile(`(?s)\{.*\}`)
	snakeCaseWords = regexp.MustCompile(`[^\p{L}\p{N}_.]+`)
)

// knowledgeIntents are the valid knowledge intents per agent.
var knowledgeIntents = map[string][]string{
	topology.AgentLibrarian:   {"LOCATE", "PATTERN", "EXPLAIN", "GENERAL"},
	topology.AgentArchivalist: {"HISTORICAL", "ACTIVITY", "OUTCOME", "SIMILAR", "RESUME", "GENERAL"},
}

var (
	gateTypes  = []string{gateTrivial, gateExplicit, gateExploratory, gateOpenEnded, gateGitHubWork, gateAmbiguous}
	timeScopeN = []string{"", "today", "yesterday", "this_week", "last_week", "last_month", "last_year", "recent", "before"}
)

// parseLLMAnswer turns the model's answer into a classification, checking
// every value against what the Guide knows; anything unknown makes the
// whole answer unusable (errBadAnswer) rather than guessed at.
func parseLLMAnswer(content string) (Classification, error) {
	raw := jsonObject.FindString(content)
	if raw == "" {
		return Classification{}, fmt.Errorf("%w: no JSON object", errBadAnswer)
	}
	var a llmAnswer
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return Classification{}, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	intent := strings.ToUpper(strings.TrimSpace(a.IntentType))
	if !slices.Contains(gateTypes, intent) {
		return Classification{}, fmt.Errorf("%w: intent type %q", errBadAnswer, truncate(a.IntentType, 40))
	}
	target := strings.ToLower(strings.TrimSpace(a.Target))
	if target != "" {
		// A worker role named (an "engineer" for a trivial change) is the
		// Architect's to plan (targets.go).
		t, ok := routeTarget(target)
		if !ok {
			return Classification{}, fmt.Errorf("%w: target %q", errBadAnswer, truncate(a.Target, 40))
		}
		target = t
	}
	if a.Confidence == nil || math.IsNaN(*a.Confidence) || *a.Confidence < 0 || *a.Confidence > 1 {
		return Classification{}, fmt.Errorf("%w: confidence missing or outside [0, 1]", errBadAnswer)
	}
	out := Classification{
		Target:          target,
		Confidence:      math.Round(*a.Confidence*1000) / 1000,
		IntentType:      intent,
		Subject:         snakeCase(a.Subject),
		KeyConstraints:  cleanPhrases(a.KeyConstraints),
		SuccessCriteria: cleanPhrases(a.SuccessCriteria),
		Reason:          "model: " + truncate(strings.TrimSpace(a.Reason), 200),
	}
	if intent == gateAmbiguous || target == "" {
		out.Target, out.IntentType = "", gateAmbiguous
	}
	if valid, ok := knowledgeIntents[out.Target]; ok {
		ki := strings.ToUpper(strings.TrimSpace(a.KnowledgeIntent))
		if ki == "" {
			ki = "GENERAL"
		}
		if !slices.Contains(valid, ki) {
			return Classification{}, fmt.Errorf("%w: knowledge intent %q for the %s", errBadAnswer, truncate(a.KnowledgeIntent, 40), out.Target)
		}
		out.KnowledgeIntent = ki
	}
	if out.Target == topology.AgentArchivalist {
		ts := strings.ToLower(strings.TrimSpace(a.TimeScope))
		if !slices.Contains(timeScopeN, ts) {
			return Classification{}, fmt.Errorf("%w: time scope %q", errBadAnswer, truncate(a.TimeScope, 40))
		}
		out.TimeScope = ts
	}
	for _, cand := range a.Candidates {
		cand, ok := routeTarget(cand)
		if ok && !slices.Contains(out.Candidates, cand) {
			out.Candidates = append(out.Candidates, cand)
		}
	}
	if out.Target != "" && !slices.Contains(out.Candidates, out.Target) {
		out.Candidates = append([]string{out.Target}, out.Candidates...)
	}
	switch out.Target {
	case topology.AgentLibrarian, topology.AgentArchivalist, topology.AgentAcademic:
		out.Action = map[string]string{topology.AgentLibrarian: intentFindCode, topology.AgentArchivalist: intentRecall,
			topology.AgentAcademic: intentResearch}[out.Target]
	case topology.AgentArchitect:
		out.Action = intentModify
	}
	return out, nil
}

// snakeCase keeps an identifier as written and folds anything else to
// lower snake_case.
func snakeCase(s string) string {
	s = strings.TrimSpace(s)
	if isIdentifier(s) {
		return s
	}
	return strings.Trim(snakeCaseWords.ReplaceAllString(strings.ToLower(s), "_"), "_")
}

// cleanPhrases trims, drops empties and bounds a list from the model.
func cleanPhrases(in []string) []string {
	var out []string
	for _, p := range in {
		if p = strings.TrimSpace(p); p != "" && len(out) < 10 {
			out = append(out, truncate(p, 200))
		}
	}
	return out
}

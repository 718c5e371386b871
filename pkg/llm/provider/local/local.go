// Package local is the offline provider: deterministic rules, no network and
// no language model. It classifies requests with keyword rules, drafts
// template plans, counts tokens as len/4, and says plainly that it generates
// no code. It is the default when no provider is configured.
package local

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/llm"
)

// Model is the local provider's only model id.
const Model = "local-rules"

// NoCodeNotice is part of every answer that would otherwise contain code.
const NoCodeNotice = "The local provider is an offline rule engine, not a language model: it generates no code. Configure a model provider (see docs/llm.md) for generated answers and code."

// Provider is the offline provider.
type Provider struct{}

// New returns the offline provider.
func New() *Provider { return &Provider{} }

// Name is "local".
func (*Provider) Name() string { return llm.Local }

// Models lists the single offline model.
func (*Provider) Models() []llm.ModelInfo { return llm.Catalogue(llm.Local) }

// Resolve maps every alias to the offline model.
func (*Provider) Resolve(string) string { return Model }

// CountTokens is ceil(len/4) over the prompt.
func (*Provider) CountTokens(_ context.Context, req *llm.Request) (int, error) {
	return llm.EstimateRequest(req), nil
}

// Verify always succeeds: there is nothing to reach.
func (*Provider) Verify(context.Context) error { return nil }

// Complete answers by rule.
func (p *Provider) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	text, stop := limit(Answer(req))(req)
	u := llm.Usage{InputTokens: llm.EstimateRequest(req), OutputTokens: llm.EstimateTokens(text)}
	return &llm.Response{Content: text, Usage: u, FinishReason: stop, Provider: llm.Local, Model: Model, Latency: time.Since(start)}, nil
}

// Stream emits the rule answer word by word.
func (p *Provider) Stream(ctx context.Context, req *llm.Request, h llm.Handler) error {
	em := llm.NewEmitter(h, req.ID)
	if err := ctx.Err(); err != nil {
		return em.Fail(err)
	}
	if err := em.Start(); err != nil {
		return em.Fail(err)
	}
	text, stop := limit(Answer(req))(req)
	for _, w := range splitKeep(text) {
		if err := ctx.Err(); err != nil {
			return em.Fail(err)
		}
		if err := em.Text(w); err != nil {
			return em.Fail(err)
		}
	}
	u := llm.Usage{InputTokens: llm.EstimateRequest(req), OutputTokens: llm.EstimateTokens(text)}
	return em.End(u, stop)
}

func splitKeep(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexAny(s[1:], " \n")
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// Classification is the local provider's answer to a classification prompt.
type Classification struct {
	Agent      string   `json:"agent"`
	Confidence float64  `json:"confidence"`
	Matched    []string `json:"matched,omitempty"`
	Provider   string   `json:"provider"`
	Note       string   `json:"note"`
}

type rule struct {
	agent    string
	keywords []string
}

var rules = []rule{
	{"architect", []string{"implement", "add ", "build", "create", "fix", "refactor", "change", "write", "remove", "rename", "migrate", "update"}},
	{"librarian", []string{"where is", "where's", "defined", "function", "code", "file", "symbol", "call", "usage of", "find", "search", "repository"}},
	{"archivalist", []string{"history", "decided", "decision", "last time", "previous", "before", "failure", "failed", "remember", "what did we"}},
	{"academic", []string{"documentation", "docs", "best practice", "paper", "rfc", "standard", "how does", "explain", "research"}},
}

// Classify applies the keyword rules to text. Confidence grows with the
// number of matching keywords and shrinks when several agents match.
func Classify(text string) Classification {
	t := strings.ToLower(text)
	best, second := -1, 0
	scores := make([]int, len(rules))
	matched := make([][]string, len(rules))
	for i, r := range rules {
		for _, k := range r.keywords {
			if strings.Contains(t, k) {
				scores[i]++
				matched[i] = append(matched[i], strings.TrimSpace(k))
			}
		}
		if best < 0 || scores[i] > scores[best] {
			best = i
		}
	}
	for i, s := range scores {
		if i != best && s > second {
			second = s
		}
	}
	c := Classification{Provider: llm.Local, Note: "classified by offline keyword rules, not by a language model"}
	if scores[best] == 0 {
		c.Agent, c.Confidence = "guide", 0.3
		return c
	}
	conf := 0.6 + 0.1*float64(scores[best]-second)
	if conf > 0.95 {
		conf = 0.95
	}
	c.Agent, c.Confidence, c.Matched = rules[best].agent, conf, matched[best]
	return c
}

// Answer returns the rule-based answer to req and its stop reason.
func Answer(req *llm.Request) (string, string) {
	last := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleUser {
			last = req.Messages[i].Content
			break
		}
	}
	sys := strings.ToLower(req.System)
	lower := strings.ToLower(last)
	switch {
	case strings.Contains(sys, "classif") || strings.Contains(sys, "route") || strings.Contains(lower, "classify"):
		b, _ := json.Marshal(Classify(last))
		return string(b), "end_turn"
	case strings.Contains(sys, "plan") && strings.Contains(sys, "json"):
		return PlanJSON(last), "end_turn"
	case strings.Contains(sys, "plan") || strings.Contains(lower, "plan"):
		return Plan(last), "end_turn"
	case wantsCode(lower) || strings.Contains(sys, "engineer") || strings.Contains(sys, "code"):
		return NoCodeNotice, "end_turn"
	}
	return fmt.Sprintf("Offline answer (local provider, no language model): received %d message(s), about %d tokens. %s",
		len(req.Messages), llm.EstimateRequest(req), NoCodeNotice), "end_turn"
}

func wantsCode(s string) bool {
	for _, k := range []string{"write", "implement", "code", "function", "patch", "diff", "fix", "refactor", "```"} {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}

// Plan drafts the template plan for a request.
func Plan(request string) string {
	r := strings.TrimSpace(request)
	if len(r) > 200 {
		r = r[:200] + "..."
	}
	return fmt.Sprintf(`Template plan (local provider, drafted by rules, not by a language model) for: %q
1. Investigate: find the code and history related to the request.
2. Implement: change the code in an isolated workspace. The local provider generates no code; this step needs a configured model provider or a person.
3. Inspect: run formatters, linters and vet on the change.
4. Test: run the tests and report the results.`, r)
}

// PlanStep is one node of a JSON plan: the format the Architect asks models
// for ({"title": ..., "nodes": [...]}).
type PlanStep struct {
	ID        string   `json:"id"`
	Role      string   `json:"role"`
	Name      string   `json:"name"`
	Prompt    string   `json:"prompt"`
	DependsOn []string `json:"depends_on,omitempty"`
}

// JSONPlan is a plan in that format.
type JSONPlan struct {
	Title string     `json:"title"`
	Nodes []PlanStep `json:"nodes"`
	Note  string     `json:"note,omitempty"`
}

var (
	fixWords      = []string{"fix", "bug", "crash", "broken", "regression", "fails", "failing"}
	refactorWords = []string{"refactor", "rename", "restructure", "simplify", "clean up", "extract", "split"}
)

// PlanJSON drafts the rule-based plan for a request in the JSON plan
// format, when a system prompt asks for a JSON plan: a fix starts by
// reproducing the problem, a refactoring by surveying what it touches,
// anything else by surveying the code; an inspector reviews and a tester
// verifies.
func PlanJSON(request string) string {
	r := strings.TrimSpace(request)
	lower := strings.ToLower(r)
	has := func(ws []string) bool {
		for _, w := range ws {
			if strings.Contains(lower, w) {
				return true
			}
		}
		return false
	}
	first := PlanStep{ID: "survey", Role: "engineer", Name: "Survey", Prompt: "Survey the code relevant to the request below: the files, symbols and tests it touches.\n\nRequest: " + r}
	second := PlanStep{ID: "implement", Role: "engineer", Name: "Implement", Prompt: "Implement the request below, with tests for the new behaviour.\n\nRequest: " + r}
	switch {
	case has(fixWords):
		first = PlanStep{ID: "reproduce", Role: "tester", Name: "Reproduce", Prompt: "Write a test that reproduces the problem below; it must fail before the fix.\n\nProblem: " + r}
		second = PlanStep{ID: "fix", Role: "engineer", Name: "Fix", Prompt: "Fix the problem below so that the reproducing test passes, changing as little as possible.\n\nProblem: " + r}
	case has(refactorWords):
		second = PlanStep{ID: "refactor", Role: "engineer", Name: "Refactor", Prompt: "Carry out the refactoring below without changing behaviour.\n\nRequest: " + r}
	}
	second.DependsOn = []string{first.ID}
	p := JSONPlan{
		Title: r,
		Nodes: []PlanStep{first, second,
			{ID: "inspect", Role: "inspector", Name: "Inspect", Prompt: "Review the change: formatters, linters, vet and the request's intent.\n\nRequest: " + r, DependsOn: []string{second.ID}},
			{ID: "verify", Role: "tester", Name: "Verify", Prompt: "Run the tests covering the change and the packages it touched; all must pass.\n\nRequest: " + r, DependsOn: []string{"inspect"}},
		},
		Note: "drafted by offline rules (local provider), not by a language model",
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// limit cuts an answer to the request's token limit (len/4), reporting
// max_tokens as the stop reason when it does.
func limit(text, stop string) func(*llm.Request) (string, string) {
	return func(req *llm.Request) (string, string) {
		if req.MaxTokens > 0 && llm.EstimateTokens(text) > req.MaxTokens {
			return text[:req.MaxTokens*4], "max_tokens"
		}
		return text, stop
	}
}

// Package review reviews a code change with a language model, as the
// Inspector does for each task's change and the review API for a branch or
// a patch (spec P-01..P-14): the diff is read into files; the security
// registry marks the sensitive ones, which are never left out; generated,
// vendored, lock, minified and binary files are left out with their reason,
// documentation and fixtures shown by their first hunk; the rest is
// ordered by risk and, when it does not fit 95% of the model's input
// budget, truncated level by level, the level's disclaimer in the prompt;
// a prompt the provider still rejects as too long is tried once more at
// the next level within 85%. The model, speaking as the chosen persona,
// reports findings through the report_findings tool (or as JSON text).
//
// Review is the whole API: a request and a model in, a Review out.
package review

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/llm"
)

// Model is what reviews: the LLM gate, or any provider.
type Model interface {
	Complete(ctx context.Context, req *llm.Request) (*llm.Response, error)
}

// Request is a change to review.
type Request struct {
	// Diff is the change as a unified diff (git diff's output).
	Diff string
	// Title says what the change is, after Marker in the prompt's first
	// line ("fix (loop 2)", "reviews/<id>: main...feature").
	Title string
	// Persona is the pack that reviews ("" for the default); see
	// ResolvePersona for the precedence of choices.
	Persona string
	// Model is the model id or alias asked; MaxInputTokens its input
	// budget in tokens (its context window less MaxOutputTokens; 0 takes
	// llm.DefaultMaxContext's), MaxOutputTokens the answer's limit (0:
	// 4096).
	Model           string
	MaxInputTokens  int
	MaxOutputTokens int
	// Blocking are the severities that block the change (nil: high and
	// critical).
	Blocking []orchestratorv1.Severity
	// Exclude are more exclusion patterns (spec P-11); they only add.
	Exclude []string
	// Attribution and Priority are the model call's (llm.Request).
	Attribution llm.Attribution
	Priority    int
	// Log is told of truncation and retries; nil logs nothing.
	Log *slog.Logger
}

// DefaultBlocking are the severities that block a change unless configured
// otherwise.
var DefaultBlocking = []orchestratorv1.Severity{orchestratorv1.Severity_SEVERITY_HIGH, orchestratorv1.Severity_SEVERITY_CRITICAL}

const defaultOutputTokens = 4096

// Review reviews the change with m (nil: no model, outcome NO_MODEL). The
// outcome says how it ended: REVIEWED, NO_CHANGES, ALL_FILES_EXCLUDED (no
// model is asked), NO_MODEL, PROMPT_TOO_LARGE_AFTER_TRUNCATION, or FAILED,
// which comes with the error (the model call failed, its answer held no
// findings, the persona is unknown, ctx ended).
func Review(ctx context.Context, req Request, m Model) (*orchestratorv1.Review, error) {
	persona := ResolvePersona(req.Persona)
	out := &orchestratorv1.Review{Persona: persona}
	system, err := systemPrompt(persona)
	if err != nil {
		return failed(out, err)
	}
	files := Parse(req.Diff)
	if len(files) == 0 {
		out.Outcome, out.Summary = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_CHANGES, "the change is empty: nothing to review"
		return out, nil
	}
	p := classify(files, req.Exclude)
	p.title = req.Title
	out.ExcludedFiles = p.excludedFiles()
	for _, e := range p.included {
		out.ReviewedFiles = append(out.ReviewedFiles, e.Path)
	}
	switch {
	case len(p.included) == 0:
		out.Outcome = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_ALL_FILES_EXCLUDED
		out.Summary = fmt.Sprintf("all %s excluded (%s): no model was asked", plural(len(files), "changed file is", "changed files are"),
			p.exclusionCounts())
		return out, nil
	case m == nil:
		out.Outcome = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_MODEL
		out.Summary = "no model reviewed it: no language model is configured; " + p.describe()
		return out, nil
	}
	return (&reviewer{req: req, m: m, system: system, p: p, out: out}).run(ctx)
}

// reviewer is one review's model calls.
type reviewer struct {
	req    Request
	m      Model
	system string
	p      *plan
	out    *orchestratorv1.Review
}

func (r *reviewer) run(ctx context.Context) (*orchestratorv1.Review, error) {
	maxOut := r.req.MaxOutputTokens
	if maxOut <= 0 {
		maxOut = defaultOutputTokens
	}
	input := r.req.MaxInputTokens
	if input <= 0 {
		input = max(llm.DefaultMaxContext-maxOut, llm.DefaultMaxContext/2)
	}
	call := newCall(r.req, r.system, maxOut)
	f := &fitter{p: r.p, overhead: llm.EstimateRequest(call), budget: int(float64(input) * budgetShare)}
	l, ok := f.fit(0)
	if !ok {
		return r.tooLarge(f, false), nil
	}
	resp, err := r.ask(ctx, call, f, l)
	if err != nil && llm.IsContextOverflow(err) && ctx.Err() == nil {
		// The estimate was off for this model: once more, a level further
		// and within 85% (spec P-07).
		r.logf(ctx, "the provider rejected the review prompt as too long; retrying shorter", "level", l.level,
			"estimated_tokens", f.tokens(l.size()), "error", err.Error())
		r.out.RetriedShorter = true
		f.budget = int(float64(input) * retryShare)
		if l, ok = f.fit(l.level + 1); !ok {
			return r.tooLarge(f, true), nil
		}
		resp, err = r.ask(ctx, call, f, l)
		if err != nil && llm.IsContextOverflow(err) {
			return r.tooLarge(f, true), nil
		}
	}
	if err != nil {
		return failed(r.out, fmt.Errorf("the model call failed: %w", err))
	}
	return r.read(resp, l)
}

// newCall is the review's model call, its user message left empty.
func newCall(req Request, system string, maxOut int) *llm.Request {
	return &llm.Request{Model: req.Model, System: system, Tools: []llm.Tool{findingsTool}, MaxTokens: maxOut,
		Attribution: req.Attribution, Priority: req.Priority, Messages: []llm.Message{{Role: llm.RoleUser}}}
}

// ask sends layout l.
func (r *reviewer) ask(ctx context.Context, call *llm.Request, f *fitter, l *layout) (*llm.Response, error) {
	prompt := l.render()
	if l.level > 0 {
		r.logf(ctx, "review prompt truncated", "level", l.level, "estimated_tokens", f.tokens(len(prompt)), "budget", f.budget)
	}
	r.out.TruncationLevel = int32(l.level)
	c := *call
	c.Messages = []llm.Message{{Role: llm.RoleUser, Content: prompt}}
	return r.m.Complete(ctx, &c)
}

// read takes the model's findings.
func (r *reviewer) read(resp *llm.Response, l *layout) (*orchestratorv1.Review, error) {
	out := r.out
	out.Model = strings.Trim(resp.Provider+"/"+resp.Model, "/")
	out.InputTokens, out.OutputTokens = int64(resp.Usage.InputTokens), int64(resp.Usage.OutputTokens)
	if !l.statsOnly {
		out.ReviewedFiles = nil
		for _, b := range l.blocks {
			out.ReviewedFiles = append(out.ReviewedFiles, b.e.Path)
		}
	}
	for _, e := range l.dropped {
		out.ExcludedFiles = append(out.ExcludedFiles, e.Path+": left out at truncation level 1")
	}
	a, err := readAnswer(resp)
	if err != nil {
		return failed(out, err)
	}
	blocking := map[orchestratorv1.Severity]bool{}
	sevs := r.req.Blocking
	if sevs == nil {
		sevs = DefaultBlocking
	}
	for _, s := range sevs {
		blocking[s] = true
	}
	out.Findings = findings(a.Findings, blocking)
	out.Outcome = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED
	out.Summary = r.summary(a.Summary, l)
	return out, nil
}

// summary is the review in a line: what the model said, and what came of
// it.
func (r *reviewer) summary(said string, l *layout) string {
	var parts []string
	nBlocking := 0
	for _, f := range r.out.Findings {
		if f.GetBlocking() {
			nBlocking++
		}
	}
	r.out.Blocking = nBlocking > 0
	parts = append(parts, fmt.Sprintf("reviewed by %s as %s: %s, %d blocking", r.out.Model, r.out.Persona,
		plural(len(r.out.Findings), "finding", "findings"), nBlocking))
	if d := l.disclaimer(); d != "" {
		parts = append(parts, strings.Trim(d, "[]"))
	}
	if r.out.RetriedShorter {
		parts = append(parts, "retried shorter after the provider rejected the prompt's length")
	}
	if said = strings.TrimSpace(said); said != "" {
		parts = append(parts, said)
	}
	return strings.Join(parts, "; ")
}

// tooLarge ends a review whose last level did not fit.
func (r *reviewer) tooLarge(f *fitter, retried bool) *orchestratorv1.Review {
	r.out.Outcome = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_PROMPT_TOO_LARGE_AFTER_TRUNCATION
	r.out.TruncationLevel, r.out.RetriedShorter = 3, retried
	stats := &layout{p: r.p, level: 3, statsOnly: true}
	r.out.Summary = fmt.Sprintf("not reviewed: even the file list (level 3, about %d tokens) exceeds the model's budget of %d tokens; %s",
		f.tokens(stats.size()), f.budget, r.p.describe())
	return r.out
}

func (r *reviewer) logf(ctx context.Context, msg string, args ...any) {
	if r.req.Log != nil {
		r.req.Log.InfoContext(ctx, msg, args...)
	}
}

// describe says what the change holds, for a person.
func (p *plan) describe() string {
	var sensitive []string
	for _, e := range p.included {
		if e.security != "" {
			sensitive = append(sensitive, e.Path+" ("+strings.SplitN(e.security, ":", 2)[0]+")")
		}
	}
	s := fmt.Sprintf("%s changed (+%d -%d), %d excluded", plural(len(p.included)+len(p.excluded), "file", "files"), p.added, p.deleted, len(p.excluded))
	if len(sensitive) > 0 {
		s += "; security-sensitive: " + strings.Join(sensitive[:min(len(sensitive), 10)], ", ")
	}
	return s
}

// failed ends a review with err.
func failed(out *orchestratorv1.Review, err error) (*orchestratorv1.Review, error) {
	out.Outcome = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED
	out.Summary = "the review failed: " + err.Error()
	return out, err
}

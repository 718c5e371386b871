package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/topology"
)

// The Inspector's review (pkg/review, spec P-01..P-14): once a pipeline's
// linters pass, the Engineer's change so far is reviewed with the node's
// persona; blocking findings go back to the Engineer as its next feedback,
// the others into the report's concerns. The review is the report's and
// an event on the session. Without a model it says that no model reviewed
// the change, and only the linters judge it.

// reviewOutputTokens bounds the review model's answer.
const reviewOutputTokens = 4096

// reviewModel is the model reviews ask: nil without one, or with only the
// offline provider (which reviews nothing).
func (s *Service) reviewModel() review.Model {
	if s.model == nil || s.modelLocal {
		return nil
	}
	return s.model
}

// reviewBudget is the review model and its input budget in tokens: its
// context window less the answer's room.
func (s *Service) reviewBudget() (model string, input int) {
	model = cmp.Or(s.cfg.ReviewModel, s.cfg.EngineerModel)
	window := s.cfg.ReviewContextTokens
	if window == 0 {
		window = llm.DefaultMaxContext
		if g, ok := s.model.(*gate.Gate); ok {
			p := g.Providers().Default()
			if m, ok := llm.LookupModel(p.Name(), p.Resolve(model)); ok {
				window = m.MaxContext
			}
		}
	}
	return model, max(window-reviewOutputTokens, window/2)
}

// reviewChange reviews diff for dispatch d, titled title in the prompt.
func (s *Service) reviewChange(ctx context.Context, d *taskv1.TaskDispatch, title, persona, diff string) (*orchestratorv1.Review, error) {
	blocking, _ := review.ParseSeverities(s.cfg.ReviewBlocking)
	if blocking == nil {
		// An empty list: nothing blocks.
		blocking = []orchestratorv1.Severity{}
	}
	model, input := s.reviewBudget()
	return review.Review(ctx, review.Request{Diff: diff, Title: title, Persona: persona, Model: model, MaxInputTokens: input,
		MaxOutputTokens: reviewOutputTokens, Blocking: blocking,
		Attribution: llm.Attribution{TenantID: d.GetTenantId(), UserID: d.GetUserId(), SessionID: d.GetSessionId(),
			PipelineID: pipeline.ID(d.GetRunId(), d.GetNodeId(), d.GetAttempt()), TaskID: d.GetRunId() + "/" + d.GetNodeId(),
			AgentID: s.cfg.ID, AgentType: roleInspector},
		Log: s.log.With(logx.KeyRunID, d.GetRunId(), "node", d.GetNodeId())}, s.reviewModel())
}

// review reviews the Engineer's change so far (the checkout as the
// Inspector's linters just saw it, staged), or returns nil when reviews
// are off or the node has no repository to diff.
func (pr *pipelineRun) review(ctx context.Context, loop int32) *orchestratorv1.Review {
	if !pr.s.cfg.Review || pr.wsp == nil {
		return nil
	}
	diff, err := pr.wsp.run(ctx, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "-M", pr.wsp.base)
	if err != nil {
		return &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED,
			Persona: review.ResolvePersona(pr.spec.GetReviewPersona()), Summary: "the review failed: the change could not be read: " + err.Error()}
	}
	rv, err := pr.s.reviewChange(ctx, pr.d, fmt.Sprintf("%s (loop %d)", pr.d.GetNodeId(), loop), pr.spec.GetReviewPersona(), diff)
	if err != nil && ctx.Err() == nil {
		pr.s.log.WarnContext(ctx, "review", logx.KeyRunID, pr.d.GetRunId(), "node", pr.d.GetNodeId(), logx.Err(err))
	}
	return rv
}

// takeReview records a review (nil: none ran) in the report and on the
// session, and returns its blocking findings, as the Engineer is told
// them, and the others, as concerns.
func (pr *pipelineRun) takeReview(ctx context.Context, rv *orchestratorv1.Review, loop int32) (blocking, others []string) {
	if rv == nil {
		return nil, nil
	}
	pr.report.Review = rv
	fmt.Fprintf(&pr.log, "loop %d: review %s: %s\n", loop, outcomeWord(rv.GetOutcome()), rv.GetSummary())
	for _, f := range rv.GetFindings() {
		if f.GetBlocking() {
			blocking = append(blocking, review.FeedbackLine(f))
		} else {
			others = append(others, "review: "+review.FeedbackLine(f))
		}
	}
	pr.s.publishReview(ctx, pr.d, fmt.Sprintf("%d", loop), rv)
	return blocking, others
}

// publishReview puts a review on the dispatch's session (none outside a
// session); key tells the reviews of one dispatch apart.
func (s *Service) publishReview(ctx context.Context, d *taskv1.TaskDispatch, key string, rv *orchestratorv1.Review) {
	if d.GetSessionId() == "" || s.bus == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	defer cancel()
	ev := &eventv1.Event{SessionId: d.GetSessionId(), Type: eventv1.EventType_EVENT_TYPE_REVIEW_COMPLETED, Source: roleInspector,
		CorrelationId: "runs/" + d.GetRunId(), Text: "the Inspector reviewed " + d.GetNodeId() + ": " + rv.GetSummary(),
		Payload: &eventv1.Event_Review{Review: &eventv1.ReviewEvent{Run: "runs/" + d.GetRunId(), Node: d.GetNodeId(),
			Attempt: d.GetAttempt(), Result: rv}}}
	id := fmt.Sprintf("%s:%s:%d:review:%s", d.GetRunId(), d.GetNodeId(), d.GetAttempt(), key)
	if _, err := topology.PublishEvent(ctx, s.bus, d.GetTenantId(), id, ev); err != nil {
		s.log.WarnContext(ctx, "publish a review", slog.String("node", d.GetNodeId()), logx.Err(err))
	}
}

// outcomeWord is an outcome for the pipeline's log ("reviewed",
// "no_model").
func outcomeWord(o orchestratorv1.ReviewOutcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "REVIEW_OUTCOME_"))
}

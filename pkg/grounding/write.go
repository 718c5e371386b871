package grounding

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
)

// Writer asks a model, through the LLM gate (which redacts secrets from
// the prompt, applies the provider's limits and records usage), for an
// answer that cites what it rests on, and checks the citations.
type Writer struct {
	Gate *gate.Gate
	// Agent is whose answer it is: the calls' usage is attributed to it.
	Agent     string
	System    string
	MaxTokens int
	Log       *slog.Logger
}

// Online reports a gate whose default provider is a model, not the
// offline `local` rules.
func (w Writer) Online() bool {
	return w.Gate != nil && w.Gate.Providers().Default().Name() != llm.Local
}

// Write asks the model to answer prompt, for env's user in env's session,
// and checks its citations with v. ok is false when the model could not
// answer (the failure is logged, never with the prompt or the answer: they
// hold the tenant's code, history or documents); err is v's.
func (w Writer) Write(ctx context.Context, env *messagev1.Envelope, prompt string, v Verifier) (res Result, model string, ok bool, err error) {
	resp, err := w.Gate.Complete(ctx, &llm.Request{
		System: w.System, Messages: []llm.Message{{Role: llm.RoleUser, Content: prompt}},
		MaxTokens: w.MaxTokens, Priority: llm.PriorityUserInteractive,
		Attribution: llm.Attribution{TenantID: env.GetTenantId(), UserID: env.GetUserId(), SessionID: env.GetSessionId(),
			AgentType: w.Agent, AgentID: w.Agent, UserInvoked: true},
	})
	if err == nil && strings.TrimSpace(resp.Content) == "" {
		err = errors.New("the model answered with no text")
	}
	if err != nil {
		if w.Log != nil {
			w.Log.WarnContext(ctx, "model answer failed; answering with the search results", slog.String(logx.KeyTenantID, env.GetTenantId()),
				slog.String("error", err.Error()))
		}
		return Result{}, "", false, nil
	}
	res, err = Check(ctx, resp.Content, v)
	if err != nil {
		return Result{}, "", false, err
	}
	return res, resp.Provider + "/" + resp.Model, true, nil
}

// Apply writes a checked answer into a: the model that wrote it, its
// grounding (what names what the answer rests on: "the history"), the
// citations that held, once each (cite builds a citation from a check's
// reference, and the key it is known by), the dropped ones with their
// problem, and the text followed by the grounding sentence.
func Apply(a *messagev1.AgentAnswer, res Result, model, what string, cite func(Ref) (*messagev1.Citation, string)) {
	a.Model = model
	a.GroundingRatio, a.Ungrounded = res.Ratio, res.Ungrounded
	a.Grounding = Sentence(res, what)
	seen := map[string]bool{}
	for _, c := range res.Checks {
		cit, key := cite(c.Ref)
		if !c.OK() {
			cit.Problem = c.Problem
			a.DroppedCitations = append(a.DroppedCitations, cit)
		} else if !seen[key] {
			seen[key] = true
			a.Citations = append(a.Citations, cit)
		}
	}
	a.Text = strings.TrimSpace(res.Text)
	if a.Grounding != "" {
		a.Text += "\n\n" + a.Grounding
	}
}

package worker

import (
	"context"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/agent/codetools"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
)

// Model is what the task agents call: the LLM gate (pkg/llm/gate), so that
// priority classes, budgets and rate limits apply. The gate also streams,
// and then the agents' text reaches the session as it arrives.
type Model interface {
	Complete(ctx context.Context, req *llm.Request) (*llm.Response, error)
}

// SetModel gives the task agents a language model. Without one (or with
// the offline local provider only) nodes apply their explicit edits and
// commands, and a node asked to change the code ends NO_CHANGES, saying no
// model is configured.
func (s *Service) SetModel(m Model) { s.model = m }

// SetLLMGate is how the mesh gives the worker its gate (configured
// providers, or the offline local one, which writes no code).
func (s *Service) SetLLMGate(g *gate.Gate) {
	s.SetModel(g)
	s.modelLocal = g != nil && g.Providers().Default().Name() == llm.Local
}

// engineerReads says whether a language model acts on a task's prompt (and
// on the user's guidance for it).
func (s *Service) engineerReads(spec *orchestratorv1.Node) bool {
	return s.agentReads(spec)
}

// modelAnswer is the report a task's agent gave when it finished.
type modelAnswer struct {
	Summary, Tested, Decisions, Deviations, Concerns string
}

func answerOf(f *codetools.Finish) *modelAnswer {
	if f == nil {
		return nil
	}
	return &modelAnswer{Summary: f.Summary, Tested: f.Tested, Decisions: f.Decisions, Deviations: f.Deviations, Concerns: f.Concerns}
}

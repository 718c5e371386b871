package archivalist

import (
	"context"
	"errors"
	"fmt"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/grounding"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/textsearch"
	"sylk.dev/sylk/pkg/topology"
)

// SetLLMGate makes the archivalist write its answers to routed questions
// with the gate's default model, citing the entries. Call it before Run.
func (s *Service) SetLLMGate(g *gate.Gate) {
	s.answers = grounding.Writer{Gate: g, Agent: topology.AgentArchivalist, System: answerSystem, MaxTokens: answerMaxTokens, Log: s.log}
}

// NeedsLLMGate: only a model (not the offline `local` rules) writing
// answers has a use for a gate.
func (s *Service) NeedsLLMGate(defaultProvider string) bool {
	return s.cfg.AnswerModel && defaultProvider != llm.Local
}

func (s *Service) modelOnline() bool { return s.cfg.AnswerModel && s.answers.Online() }

// Answer bounds.
const (
	answerContentChars = 1500
	answerMaxTokens    = 600
	noModelSentence    = "No model summarised this: these are the entries the search found, best first."
)

// answerSystem is the system prompt of an answer from the history.
const answerSystem = `You are the Archivalist of a software team: you answer questions from the team's recorded history (decisions, failures, notes), from the entries shown to you and nothing else.
Rules:
1. Answer briefly, in plain language.
2. Back every statement with the entry it comes from, written [entries/<id>] with the id exactly as shown.
3. Quote the entry's own words in double quotes, or write identifiers in backticks, when you rely on them.
4. When the entries shown do not answer the question, say so plainly instead of guessing.`

// writeAnswer sets a's text from the entries found: a model's cited
// answer, verified, or without a model the entries listed with their
// snippets. With no hits, a keeps the text it has.
func (s *Service) writeAnswer(ctx context.Context, env *messagev1.Envelope, scope string, hits []hit, a *messagev1.AgentAnswer) error {
	if len(hits) == 0 {
		return nil
	}
	closing := noModelSentence
	if s.modelOnline() {
		ok, err := s.modelAnswer(ctx, env, hits, a)
		if ok || err != nil {
			return err
		}
		closing = "The model could not answer just now, so no model summarised this: these are the entries the search found."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d archived %s %s match:\n", len(hits), plural(len(hits), "entry", "entries"), scope)
	for _, h := range hits {
		fmt.Fprintf(&b, "\n- %q (%s, %s) [entries/%s]\n", truncateChars(h.Title, 80), h.Category, h.CreatedAt.Format("2006-01-02"), h.ID)
		if snip := strings.TrimSpace(textsearch.CleanSnippet(h.Snippet, SnippetChars)); snip != "" {
			b.WriteString("    " + strings.ReplaceAll(snip, "\n", " ") + "\n")
		}
	}
	b.WriteString("\n" + closing)
	a.Text = b.String()
	return nil
}

// modelAnswer asks the model for a cited answer from the hits and verifies
// its citations into a; ok is false when the model could not answer.
func (s *Service) modelAnswer(ctx context.Context, env *messagev1.Envelope, hits []hit, a *messagev1.AgentAnswer) (bool, error) {
	var p strings.Builder
	fmt.Fprintf(&p, "Question: %s\n\nEntries found:\n", a.GetQuery())
	for _, h := range hits {
		fmt.Fprintf(&p, "\n[entries/%s] %s, %s: %s\n%s\n", h.ID, h.Category, h.CreatedAt.Format("2006-01-02"), h.Title,
			truncateChars(h.Content, answerContentChars))
	}
	res, model, ok, err := s.answers.Write(ctx, env, p.String(), entryVerifier{s: s, tenant: env.GetTenantId(), viewer: ownViewer(env.GetUserId())})
	if !ok || err != nil {
		return false, err
	}
	grounding.Apply(a, res, model, "the history", func(r grounding.Ref) (*messagev1.Citation, string) {
		return &messagev1.Citation{Name: namePrefix + r.ID, Title: titleOf(hits, r.ID)}, r.ID
	})
	return true, nil
}

func titleOf(hits []hit, id string) string {
	for _, h := range hits {
		if h.ID == id {
			return h.Title
		}
	}
	return ""
}

// entryVerifier resolves [entries/<id>] to the entry's title and content,
// among the entries the asker may see.
type entryVerifier struct {
	s              *Service
	tenant, viewer string
}

// Resolve implements grounding.Verifier.
func (v entryVerifier) Resolve(ctx context.Context, r grounding.Ref) (string, string, error) {
	if r.Kind != grounding.Entry {
		return "", "the archivalist cites entries, not " + r.Raw, nil
	}
	if !ids.Valid(r.ID) {
		return "", fmt.Sprintf("no entry %s", r.ID), nil
	}
	e, err := v.s.store.get(ctx, v.tenant, v.viewer, r.ID)
	if errors.Is(err, errNotFound) {
		return "", fmt.Sprintf("no entry %s", r.ID), nil
	}
	if err != nil {
		return "", "", err
	}
	return e.Title + "\n" + e.Content, "", nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

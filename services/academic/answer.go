package academic

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/grounding"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/topology"
)

// SetLLMGate makes the academic write its answers to routed questions with
// the gate's default model, citing the document sections. Call it before
// Run.
func (s *Service) SetLLMGate(g *gate.Gate) {
	s.answers = grounding.Writer{Gate: g, Agent: topology.AgentAcademic, System: answerSystem, MaxTokens: answerMaxTokens, Log: s.log}
}

// NeedsLLMGate: only a model (not the offline `local` rules) writing
// answers has a use for a gate.
func (s *Service) NeedsLLMGate(defaultProvider string) bool {
	return s.cfg.AnswerModel && defaultProvider != llm.Local
}

func (s *Service) modelOnline() bool { return s.cfg.AnswerModel && s.answers.Online() }

// Answer bounds.
const (
	answerSectionChars = 2000
	answerMaxTokens    = 600
	noModelSentence    = "No model summarised this: these are the sections the search found, best first."
)

// answerSystem is the system prompt of an answer from the documents.
const answerSystem = `You are the Academic of a software team: you answer questions from the documents the team ingested, from the sections shown to you and nothing else.
Rules:
1. Answer briefly, in plain language.
2. Back every statement with the section it comes from, written [documents/<id>#<heading>] with the id and heading exactly as shown.
3. Quote the section's own words in double quotes, or write identifiers in backticks, when you rely on them.
4. When the sections shown do not answer the question, say so plainly instead of guessing.`

// writeAnswer sets a's text from the sections found: a model's cited
// answer, verified, or without a model the sections grouped by document.
// With no hits, a keeps the text it has.
func (s *Service) writeAnswer(ctx context.Context, env *messagev1.Envelope, hits []hit, a *messagev1.AgentAnswer) error {
	if len(hits) == 0 {
		return nil
	}
	closing := noModelSentence
	if s.modelOnline() {
		ok, err := s.modelAnswer(ctx, env, hits, a)
		if ok || err != nil {
			return err
		}
		closing = "The model could not answer just now, so no model summarised this: these are the sections the search found."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s of the ingested documents %s:\n", len(hits), plural(len(hits), "section", "sections"),
		plural(len(hits), "matches", "match"))
	var order []string
	byDoc := map[string][]hit{}
	for _, h := range hits {
		if _, ok := byDoc[h.DocumentID]; !ok {
			order = append(order, h.DocumentID)
		}
		byDoc[h.DocumentID] = append(byDoc[h.DocumentID], h)
	}
	for _, id := range order {
		fmt.Fprintf(&b, "\n%s [documents/%s]\n", truncateChars(byDoc[id][0].DocumentTitle, 80), id)
		for _, h := range byDoc[id] {
			heading := h.Heading
			if heading == "" {
				heading = "(no heading)"
			}
			fmt.Fprintf(&b, "- %s, lines %d-%d\n", truncateChars(heading, 80), h.LineStart, h.LineEnd)
			if snip := strings.TrimSpace(h.Snippet); snip != "" {
				b.WriteString("    " + strings.ReplaceAll(snip, "\n", " ") + "\n")
			}
		}
	}
	b.WriteString("\n" + closing)
	a.Text = b.String()
	return nil
}

// modelAnswer asks the model for a cited answer from the sections and
// verifies its citations into a; ok is false when the model could not
// answer.
func (s *Service) modelAnswer(ctx context.Context, env *messagev1.Envelope, hits []hit, a *messagev1.AgentAnswer) (bool, error) {
	var p strings.Builder
	fmt.Fprintf(&p, "Question: %s\n\nSections found:\n", a.GetQuery())
	for _, h := range hits {
		body, _, err := s.store.sectionText(ctx, env.GetTenantId(), h.DocumentID, h.Heading)
		if err != nil {
			return false, err
		}
		fmt.Fprintf(&p, "\n[documents/%s#%s] %s\n%s\n", h.DocumentID, h.Heading, h.DocumentTitle, truncateChars(body, answerSectionChars))
	}
	res, model, ok, err := s.answers.Write(ctx, env, p.String(), sectionVerifier{s: s, tenant: env.GetTenantId()})
	if !ok || err != nil {
		return false, err
	}
	grounding.Apply(a, res, model, "the documents", func(r grounding.Ref) (*messagev1.Citation, string) {
		return &messagev1.Citation{Name: namePrefix + r.ID, Heading: r.Heading}, r.ID + "#" + r.Heading
	})
	return true, nil
}

// sectionVerifier resolves [documents/<id>#<heading>] to the section's
// heading and body (the whole document without a heading).
type sectionVerifier struct {
	s      *Service
	tenant string
}

// Resolve implements grounding.Verifier.
func (v sectionVerifier) Resolve(ctx context.Context, r grounding.Ref) (string, string, error) {
	if r.Kind != grounding.Section {
		return "", "the academic cites document sections, not " + r.Raw, nil
	}
	if !ids.Valid(r.ID) {
		return "", "no document " + r.ID, nil
	}
	text, found, err := v.s.store.sectionText(ctx, v.tenant, r.ID, r.Heading)
	if err != nil || found {
		return text, "", err
	}
	if r.Heading == "" {
		return "", "no document " + r.ID, nil
	}
	return "", fmt.Sprintf("document %s has no section %q", r.ID, r.Heading), nil
}

// sectionText is the heading and body of a document's sections under
// heading (parts of a long section joined), or the whole document when
// heading is empty; found is false when there is none.
func (s *store) sectionText(ctx context.Context, tenant, docID, heading string) (string, bool, error) {
	if heading == "" {
		var title, content string
		err := s.db.QueryRow(ctx, `SELECT title, content FROM documents WHERE tenant_id = $1 AND id = $2::uuid`,
			tenant, docID).Scan(&title, &content)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("read document %s: %w", docID, err)
		}
		return title + "\n" + content, true, nil
	}
	rows, err := s.db.Query(ctx, `SELECT body FROM sections WHERE tenant_id = $1 AND document_id = $2::uuid AND heading = $3
		ORDER BY ordinal`, tenant, docID, heading)
	if err != nil {
		return "", false, fmt.Errorf("read sections of %s: %w", docID, err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", false, fmt.Errorf("read sections of %s: %w", docID, err)
	}
	if len(bodies) == 0 {
		return "", false, nil
	}
	return heading + "\n" + strings.Join(bodies, "\n"), true, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

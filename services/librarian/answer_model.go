package librarian

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/grounding"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// answerModel writes answers through the LLM gate (which redacts secrets
// from the prompt, applies the provider's limits and records usage).
type answerModel struct {
	gate *gate.Gate
}

// online reports whether a model writes answers: enabled, with a gate
// whose default provider is a model, not the offline `local` rules.
func (m answerModel) online(cfg AnswerConfig) bool {
	return cfg.Model && m.gate != nil && m.gate.Providers().Default().Name() != llm.Local
}

// answerSystem is the system prompt of an answer (spec K-11, G-12).
const answerSystem = `You are the Librarian of a software team: you answer questions about the team's code from the code shown to you, and from nothing else.
Rules:
1. Answer briefly: a few sentences or a short list, in plain language.
2. Back every statement about the code with a citation of the lines that show it, written [repository:path:line] or [repository:path:start-end], with the repository names, paths and line numbers exactly as shown with the code. Cite only lines you were shown.
3. Write identifiers (functions, types, variables, constants) in backticks, spelled exactly as in the code, and cite lines that hold them.
4. When the code shown does not answer the question, say so plainly instead of guessing. Mark a conclusion the code does not state with [INFERENCE].`

// Context bounds.
const (
	// contextLines is the most lines shown for one hit.
	contextLines = 40
	// maxCitedLines is the widest span a citation may name: a wider one
	// would hold any identifier and prove nothing.
	maxCitedLines = 200
)

// modelAnswer asks the model for a cited answer to q from the hits and
// verifies its citations into answer. ok is false when the model could
// not answer (the caller then answers without it); err is a failure to
// verify.
func (s *Service) modelAnswer(ctx context.Context, q question, sc answerScope, hits []hit, answer *messagev1.AgentAnswer) (bool, error) {
	prompt, err := s.answerPrompt(ctx, q, sc, hits)
	if err != nil {
		return false, err
	}
	resp, err := s.answers.gate.Complete(ctx, &llm.Request{
		Model:     s.cfg.Answer.ModelName,
		System:    answerSystem,
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: prompt}},
		MaxTokens: s.cfg.Answer.MaxTokens,
		Priority:  llm.PriorityUserInteractive,
		Attribution: llm.Attribution{TenantID: q.tenant, UserID: q.user, SessionID: q.session,
			AgentType: topology.AgentLibrarian, AgentID: topology.AgentLibrarian, UserInvoked: true},
	})
	if err == nil && strings.TrimSpace(resp.Content) == "" {
		err = errors.New("the model answered with no text")
	}
	if err != nil {
		// Never the prompt or the answer: they hold the tenant's code.
		s.log.WarnContext(ctx, "model answer failed; answering from the hits", slog.String(logx.KeyTenantID, q.tenant),
			slog.String("error", err.Error()))
		return false, nil
	}
	res, err := grounding.Check(ctx, resp.Content, codeVerifier{s: s, tenant: q.tenant, sc: sc})
	if err != nil {
		return false, err
	}
	applyGrounding(answer, res, sc)
	answer.Model = resp.Provider + "/" + resp.Model
	answer.Text = strings.TrimSpace(res.Text) + "\n\n" + readPhrase(sc, hits)
	if answer.Grounding != "" {
		answer.Text += " " + answer.Grounding
	}
	return true, nil
}

// applyGrounding records res on answer: the ratio, the citations that held
// and those dropped, and a sentence when any failed. An ungrounded answer's
// confidence is halved (spec G-06: an unsupported claim).
func applyGrounding(answer *messagev1.AgentAnswer, res grounding.Result, sc answerScope) {
	answer.GroundingRatio = res.Ratio
	answer.Ungrounded = res.Ungrounded
	seen := map[string]bool{}
	for _, c := range res.Checks {
		cit := codeCitation(c.Ref, sc)
		if !c.OK() {
			cit.Problem = c.Problem
			answer.DroppedCitations = append(answer.DroppedCitations, cit)
			continue
		}
		key := cit.GetName() + "\x00" + cit.GetPath() + fmt.Sprint(cit.GetLineStart(), cit.GetLineEnd())
		if !seen[key] {
			seen[key] = true
			answer.Citations = append(answer.Citations, cit)
		}
	}
	answer.Grounding = grounding.Sentence(res, "the code")
	if res.Ungrounded && answer.Confidence != nil {
		answer.Confidence.Confidence /= 2
	}
}

// codeCitation is r as an answer's citation.
func codeCitation(r grounding.Ref, sc answerScope) *messagev1.Citation {
	c := &messagev1.Citation{Title: r.Repo, Path: r.Path, LineStart: int32(r.Start), LineEnd: int32(r.End)}
	if id, ok := sc.repoID(r.Repo); ok {
		c.Name = repositoryPrefix + id
		c.Revision = sc.repos[id].LastCommit
	}
	return c
}

// repoID is the id of the scope's repository an answer names name (its
// name in the answer, its id, or its resource name).
func (sc answerScope) repoID(name string) (string, bool) {
	name = strings.TrimPrefix(strings.TrimSpace(name), repositoryPrefix)
	for id, n := range sc.names {
		if n == name || id == name {
			return id, true
		}
	}
	return "", false
}

// answerPrompt is the question and the code found, each hit as numbered
// lines under the citation that names them, within the context bound.
func (s *Service) answerPrompt(ctx context.Context, q question, sc answerScope, hits []hit) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Question: %s\n\nCode found (%s):\n", q.text, strings.TrimSuffix(readPhrase(sc, hits), "."))
	for _, h := range hits {
		lines, err := s.store.codeLines(ctx, q.tenant, h.repoID, h.path, h.lineStart, h.lineEnd)
		if err != nil {
			return "", err
		}
		from, to := contextSpan(lines, h)
		var block strings.Builder
		fmt.Fprintf(&block, "\n[%s:%s:%d-%d]", sc.names[h.repoID], h.path, from, to)
		if h.symbol != "" {
			fmt.Fprintf(&block, " defines `%s`", h.symbol)
		}
		block.WriteString("\n")
		for n := from; n <= to; n++ {
			fmt.Fprintf(&block, "%d| %s\n", n, lines.text[n])
		}
		if b.Len()+block.Len() > s.cfg.Answer.ContextChars {
			break
		}
		b.WriteString(block.String())
	}
	return b.String(), nil
}

// contextSpan is the lines of h shown to the model: from the snippet's
// first line, at most contextLines.
func contextSpan(lines spanLines, h hit) (int, int) {
	from := h.lineStart
	if first := firstSnippetLine(h.snippet); first != "" {
		for n := h.lineStart; n <= h.lineEnd; n++ {
			if strings.TrimSpace(lines.text[n]) == first {
				from = n
				break
			}
		}
	}
	to := min(h.lineEnd, from+contextLines-1)
	for to > from && lines.text[to] == "" {
		to--
	}
	return from, to
}

func firstSnippetLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" {
			return t
		}
	}
	return ""
}

// codeVerifier resolves code citations against the indexed revision of
// the answer's repositories (the librarian's own stored chunks).
type codeVerifier struct {
	s      *Service
	tenant string
	sc     answerScope
}

// Resolve implements grounding.Verifier.
func (v codeVerifier) Resolve(ctx context.Context, r grounding.Ref) (string, string, error) {
	if r.Kind != grounding.Code {
		return "", "the librarian cites code, not " + r.Raw, nil
	}
	id, ok := v.sc.repoID(r.Repo)
	if !ok {
		return "", fmt.Sprintf("repository %q was not searched", r.Repo), nil
	}
	if r.End-r.Start+1 > maxCitedLines {
		return "", fmt.Sprintf("a span of %d lines is too wide to check (at most %d)", r.End-r.Start+1, maxCitedLines), nil
	}
	lines, err := v.s.store.codeLines(ctx, v.tenant, id, r.Path, r.Start, r.End)
	if err != nil {
		return "", "", err
	}
	switch {
	case !lines.found:
		return "", fmt.Sprintf("%s is not in the indexed revision of %s", r.Path, r.Repo), nil
	case r.End > lines.count:
		return "", fmt.Sprintf("%s has %d lines; line %d is past its end", r.Path, lines.count, r.End), nil
	}
	out := make([]string, 0, r.End-r.Start+1)
	for n := r.Start; n <= r.End; n++ {
		out = append(out, lines.text[n])
	}
	return strings.Join(out, "\n"), "", nil
}

// spanLines are lines of one indexed file.
type spanLines struct {
	// found is false when the file is not in the index.
	found bool
	// count is the file's line count.
	count int
	// text holds the lines asked for that the index holds, by number.
	text map[int]string
}

// codeLines reads lines from to to of a file of the repository's indexed
// revision from its chunks.
func (st store) codeLines(ctx context.Context, tenant, repoID, path string, from, to int) (spanLines, error) {
	out := spanLines{text: map[int]string{}}
	err := st.db.QueryRow(ctx, `SELECT line_count FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = $3`,
		tenant, uuidParam(repoID), path).Scan(&out.count)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read file %s: %w", path, err)
	}
	out.found = true
	rows, err := st.db.Query(ctx, `SELECT line_start, content FROM chunks
		WHERE tenant_id = $1 AND repository_id = $2 AND path = $3 AND line_start <= $5 AND line_end >= $4
		ORDER BY line_start`, tenant, uuidParam(repoID), path, from, to)
	if err != nil {
		return out, fmt.Errorf("read lines of %s: %w", path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var start int
		var content string
		if err := rows.Scan(&start, &content); err != nil {
			return out, fmt.Errorf("read lines of %s: %w", path, err)
		}
		for i, l := range strings.Split(content, "\n") {
			if n := start + i; n >= from && n <= to {
				out.text[n] = l
			}
		}
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("read lines of %s: %w", path, err)
	}
	return out, nil
}

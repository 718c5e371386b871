package librarian

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// AnswerConfig is how the librarian answers routed questions.
type AnswerConfig struct {
	// Model writes the answer with the configured model provider when
	// there is one; offline (or false) the answer is the hits grouped by
	// file and says that no model wrote it.
	Model bool
	// ModelName is the model id or alias (default, fast, powerful).
	ModelName string
	// MaxTokens bounds the model's answer.
	MaxTokens int
	// ContextChars bounds the code shown to the model.
	ContextChars int
}

// registerFlags registers the answer flags.
func (c *AnswerConfig) registerFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Model, "librarian.answer-model", true, "write answers to routed questions with the configured model provider, citing the code (offline: the hits grouped by file)")
	fs.StringVar(&c.ModelName, "librarian.answer-model-name", "default", "model id or alias (default, fast, powerful) that writes answers")
	fs.IntVar(&c.MaxTokens, "librarian.answer-max-tokens", 800, "longest model-written answer, in tokens")
	fs.IntVar(&c.ContextChars, "librarian.answer-context-chars", 12000, "most characters of code shown to the model for one answer")
}

// validate checks the answer settings.
func (c AnswerConfig) validate() error {
	if c.MaxTokens < 64 || c.ContextChars < 500 {
		return errors.New("librarian.answer-max-tokens must be at least 64 and librarian.answer-context-chars at least 500")
	}
	return nil
}

// Bounds of an answer assembled without a model.
const (
	answerFiles        = 5
	answerHitsPerFile  = 3
	answerSnippetLines = 4
	answerQuoteLen     = 80
	shortCommit        = 12
	// maxAnswerRepos bounds the repositories an unscoped answer names.
	maxAnswerRepos = 1000
)

// noModelSentence ends every answer no model wrote.
const noModelSentence = "No model summarised this: these are the best matches of the search, grouped by file."

// question is one routed question.
type question struct {
	tenant, session, user string
	text                  string
	// repository is the session's repository id ("" for none).
	repository string
}

func questionOf(env *messagev1.Envelope, text string) question {
	return question{tenant: env.GetTenantId(), session: env.GetSessionId(), user: env.GetUserId(), text: text,
		repository: strings.TrimPrefix(env.GetRepository(), repositoryPrefix)}
}

// answerScope is what an answer searched: the session's repository, or
// every repository of the tenant.
type answerScope struct {
	repos map[string]repository
	// names are the repositories' names in the answer, unique.
	names map[string]string
	// scoped is true when the session named its repository.
	scoped bool
}

// scope reads the repositories q may be answered from. A session's
// repository that is no longer registered widens to the tenant's.
func (s *Service) scope(ctx context.Context, q question) (answerScope, error) {
	sc := answerScope{repos: map[string]repository{}, names: map[string]string{}}
	if q.repository != "" {
		r, err := s.store.getRepo(ctx, q.tenant, q.repository)
		if err == nil {
			sc.repos[r.ID], sc.scoped = r, true
		} else if !errors.Is(err, errNotFound) {
			return sc, err
		}
	}
	if !sc.scoped {
		all, err := s.store.listRepos(ctx, q.tenant, "", maxAnswerRepos)
		if err != nil {
			return sc, err
		}
		for _, r := range all {
			sc.repos[r.ID] = r
		}
	}
	seen := map[string]int{}
	for _, r := range sc.repos {
		seen[repoName(r)]++
	}
	for id, r := range sc.repos {
		// Two repositories of one name are told apart by id.
		if n := repoName(r); seen[n] == 1 {
			sc.names[id] = n
		} else {
			sc.names[id] = id
		}
	}
	return sc, nil
}

// repoName is how an answer names r: its display name without the
// characters that would break a citation.
func repoName(r repository) string {
	n := strings.Map(func(c rune) rune {
		if c == ':' || c == '[' || c == ']' || c == ';' || c == ',' || c == '\n' {
			return '-'
		}
		return c
	}, strings.TrimSpace(r.DisplayName))
	if n == "" {
		return r.ID
	}
	return n
}

// ids are the scope's repository ids (nil for none, which searches all).
func (sc answerScope) ids() []string {
	if !sc.scoped {
		return nil
	}
	out := make([]string, 0, len(sc.repos))
	for id := range sc.repos {
		out = append(out, id)
	}
	return out
}

// buildAnswer searches the question's scope and answers it: with a model,
// a short text citing the code, each citation verified; without one, the
// hits grouped by file.
func (s *Service) buildAnswer(ctx context.Context, q question) (*messagev1.AgentAnswer, error) {
	sc, err := s.scope(ctx, q)
	if err != nil {
		return nil, err
	}
	hits, err := s.search(ctx, q.tenant, q.text, sc.ids(), s.cfg.DefaultPageSize, "inbox")
	if err != nil && !errors.Is(err, errNoTerms) {
		return nil, err
	}
	answer := &messagev1.AgentAnswer{Query: q.text, Hits: answerHits(hits), Confidence: confidenceEntry(confidence(hits))}
	answer.Revision = sc.revision(hits)
	if len(hits) == 0 {
		answer.Text = fmt.Sprintf("No indexed code matches %q%s.", truncateRunes(q.text, answerQuoteLen), sc.where())
		return answer, nil
	}
	if s.answers.online(s.cfg.Answer) {
		ok, err := s.modelAnswer(ctx, q, sc, hits, answer)
		if err != nil {
			return nil, err
		}
		if ok {
			return answer, nil
		}
		answer.Text = offlineText(sc, hits, "The model could not answer just now, so no model summarised this: "+
			"these are the best matches of the search, grouped by file.")
		return answer, nil
	}
	answer.Text = offlineText(sc, hits, noModelSentence)
	return answer, nil
}

// where names the scope for an answer that found nothing.
func (sc answerScope) where() string {
	if sc.scoped {
		for id := range sc.repos {
			return " in " + sc.names[id]
		}
	}
	return ""
}

// revision is the commit the answer read: the scope's repository's, or
// the one repository's all hits come from; "" otherwise.
func (sc answerScope) revision(hits []hit) string {
	ids := map[string]bool{}
	for _, h := range hits {
		ids[h.repoID] = true
	}
	if sc.scoped || len(ids) == 0 {
		for id := range sc.repos {
			ids[id] = true
		}
	}
	if len(ids) != 1 {
		return ""
	}
	for id := range ids {
		return sc.repos[id].LastCommit
	}
	return ""
}

// readPhrase says which revision of the hits' repositories was read.
func readPhrase(sc answerScope, hits []hit) string {
	var parts []string
	done := map[string]bool{}
	for _, h := range hits {
		if done[h.repoID] {
			continue
		}
		done[h.repoID] = true
		r := sc.repos[h.repoID]
		switch {
		case r.LastCommit != "":
			parts = append(parts, fmt.Sprintf("%s at commit %s", sc.names[h.repoID], truncateRunes(r.LastCommit, shortCommit)))
		case r.IndexTime != nil:
			parts = append(parts, fmt.Sprintf("%s as indexed at %s (not a git repository)", sc.names[h.repoID],
				r.IndexTime.UTC().Format(time.RFC3339)))
		default:
			parts = append(parts, sc.names[h.repoID])
		}
	}
	return "Read " + strings.Join(parts, "; ") + "."
}

// offlineText is the answer no model wrote: the best hits grouped by file
// (each file named with its repository when the tenant has several and the
// session names none), their symbols and snippets, the revision read, and
// closing, which says no model wrote it.
func offlineText(sc answerScope, hits []hit, closing string) string {
	type file struct {
		key  string
		hits []hit
	}
	var files []*file
	byKey := map[string]*file{}
	for _, h := range hits {
		key := h.repoID + "\x00" + h.path
		f := byKey[key]
		if f == nil {
			if len(files) == answerFiles {
				continue
			}
			f = &file{key: key}
			byKey[key] = f
			files = append(files, f)
		}
		if len(f.hits) < answerHitsPerFile {
			f.hits = append(f.hits, h)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s in %d %s. %s\n", len(hits), plural(len(hits), "match", "matches"), len(byKey),
		plural(len(byKey), "file", "files"), readPhrase(sc, hits))
	nameRepos := !sc.scoped && len(sc.repos) > 1
	shown := 0
	for _, f := range files {
		shown += len(f.hits)
		h0 := f.hits[0]
		b.WriteString("\n")
		if nameRepos {
			b.WriteString(sc.names[h0.repoID] + ": ")
		}
		b.WriteString(h0.path + "\n")
		for _, h := range f.hits {
			fmt.Fprintf(&b, "- %s:%d-%d", h.path, h.lineStart, h.lineEnd)
			if h.symbol != "" {
				fmt.Fprintf(&b, " `%s`", h.symbol)
				if h.kind != "" {
					fmt.Fprintf(&b, " (%s)", h.kind)
				}
			}
			b.WriteString("\n")
			for _, l := range leadLines(h.snippet, answerSnippetLines) {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	if more := len(hits) - shown; more > 0 {
		fmt.Fprintf(&b, "\n%d more %s in the hits.\n", more, plural(more, "match", "matches"))
	}
	b.WriteString("\n" + closing)
	return b.String()
}

// leadLines are the first n non-blank lines of a snippet.
func leadLines(snippet string, n int) []string {
	var out []string
	for _, l := range strings.Split(snippet, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		out = append(out, truncateRunes(strings.TrimRight(l, " \t"), 160))
		if len(out) == n {
			break
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

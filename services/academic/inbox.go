package academic

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/textsearch"
)

// answer answers one routed question: the tenant's documents are searched
// and the hits become the answer (pkg/inbox publishes it on the session).
func (s *Service) answer(ctx context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	if res, done, err := s.step0(ctx, env); done || err != nil {
		return res, err
	}
	text, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, err
	}
	// A NUL (which the database cannot take) separates words like a space.
	query := strings.Join(strings.Fields(strings.ReplaceAll(text, "\x00", " ")), " ")
	query = textsearch.Truncate(query, s.cfg.MaxQueryBytes)
	var hits []hit
	if textsearch.HasWords(query) {
		if hits, err = s.search(ctx, env.GetTenantId(), query, s.cfg.InboxHits); err != nil {
			return inbox.Result{}, err
		}
	}
	a := &messagev1.AgentAnswer{Text: answerText(query, hits), Query: query, Hits: answerHits(hits)}
	if err := s.writeAnswer(ctx, env, hits, a); err != nil {
		return inbox.Result{}, err
	}
	return inbox.Result{Answer: a}, nil
}

// answerText is the answer when nothing matched (writeAnswer writes the
// answer from hits).
func answerText(query string, hits []hit) string {
	switch {
	case len(hits) > 0:
		return ""
	case query == "":
		return "Nothing to search for: ask about a topic of the ingested documents."
	}
	return fmt.Sprintf("No section of the ingested documents matches %q.", truncateChars(query, 80))
}

// answerHits are the sections found, as the answer's hits.
func answerHits(hits []hit) []*messagev1.Hit {
	out := make([]*messagev1.Hit, 0, len(hits))
	for _, h := range hits {
		out = append(out, &messagev1.Hit{
			Kind:      messagev1.HitKind_HIT_KIND_DOCUMENT,
			Id:        h.DocumentID,
			Name:      namePrefix + h.DocumentID,
			Title:     h.DocumentTitle,
			Heading:   h.Heading,
			LineStart: int32(h.LineStart),
			LineEnd:   int32(h.LineEnd),
			Snippet:   h.Snippet,
			Score:     h.Score,
		})
	}
	return out
}

// truncateChars bounds s to n characters.
func truncateChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

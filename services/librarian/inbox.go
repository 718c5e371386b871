package librarian

import (
	"context"
	"fmt"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/topology"
)

// Inbox answer settings.
const (
	noReposAnswer   = "No repositories are indexed yet: register one with POST /v1/repositories"
	confidenceEmpty = 0.3
	unavailable     = "The librarian could not search the code just now; please ask again in a moment."
	// inboxMaxDeliver is how often a message is tried; the last try answers
	// even when the search fails, so that a question never goes unanswered.
	inboxMaxDeliver = 5
	// reasonNoRepositories is the cannot_help reason of a tenant with no
	// indexed repository: the librarian holds nothing to search.
	reasonNoRepositories = "NO_INDEXED_REPOSITORY"
)

// inboxConfig is how the librarian's inbox runs: a question whose search
// keeps failing is answered, on its last delivery, that the librarian is
// unavailable.
func (s *Service) inboxConfig() inbox.Config {
	return inbox.Config{
		Agent:       topology.AgentLibrarian,
		Timeout:     s.cfg.InboxTimeout,
		AckWait:     s.cfg.InboxTimeout + s.cfg.InboxTimeout/2,
		MaxDeliver:  inboxMaxDeliver,
		NakDelay:    s.cfg.InboxRetryDelay,
		Unavailable: func(*messagev1.Envelope, error) *messagev1.AgentAnswer { return unavailableAnswer() },
		Log:         s.log,
	}
}

// answer answers one message the Guide routed to the librarian: it searches
// the tenant's code for the question (pkg/inbox publishes the answer on
// the session, de-duplicated on the envelope id, so a redelivered message
// never answers twice).
func (s *Service) answer(ctx context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	if res, done, err := s.step0(ctx, env); done || err != nil {
		return res, err
	}
	text, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, err
	}
	answer, err := s.answerQuestion(ctx, env, text)
	if err != nil {
		return inbox.Result{}, fmt.Errorf("answer envelope %q: %w", env.GetId(), err)
	}
	return inbox.Result{Answer: answer}, nil
}

// answerQuestion answers text, asked in env's session: from the session's
// repository when it names one, else from every repository of the tenant
// (answer.go).
func (s *Service) answerQuestion(ctx context.Context, env *messagev1.Envelope, text string) (*messagev1.AgentAnswer, error) {
	indexed, err := s.store.hasIndexed(ctx, env.GetTenantId())
	if err != nil {
		return nil, err
	}
	if !indexed {
		return &messagev1.AgentAnswer{Text: noReposAnswer, CannotHelp: true, CannotHelpReason: reasonNoRepositories,
			Confidence: confidenceEntry(0)}, nil
	}
	text = strings.ToValidUTF8(strings.TrimSpace(text), "\uFFFD")
	return s.buildAnswer(ctx, questionOf(env, truncateRunes(text, s.cfg.MaxQueryChars)))
}

// answerHits are the code hits of an answer.
func answerHits(hits []hit) []*messagev1.Hit {
	out := make([]*messagev1.Hit, 0, len(hits))
	for _, h := range hits {
		out = append(out, &messagev1.Hit{
			Kind:       messagev1.HitKind_HIT_KIND_CODE,
			Name:       repositoryPrefix + h.repoID,
			Repository: repositoryPrefix + h.repoID,
			Title:      h.path,
			Path:       h.path,
			LineStart:  int32(h.lineStart),
			LineEnd:    int32(h.lineEnd),
			Snippet:    h.snippet,
			Score:      h.score,
			Symbol:     h.symbol,
		})
	}
	return out
}

// unavailableAnswer is the answer to a question whose search kept failing.
func unavailableAnswer() *messagev1.AgentAnswer {
	return &messagev1.AgentAnswer{Text: unavailable, Confidence: confidenceEntry(0)}
}

// confidenceEntry is the librarian's confidence c in an answer.
func confidenceEntry(c float64) *messagev1.ConfidenceEntry {
	return &messagev1.ConfidenceEntry{Agent: topology.AgentLibrarian, Confidence: c}
}

// confidence is how sure the librarian is that its hits answer the
// question: low when nothing matched (lexical search can miss), from 0.5 up
// to 0.95 as the best hit's score grows; a verbatim identifier match scores
// at least 1 and so gives the most.
func confidence(hits []hit) float64 {
	if len(hits) == 0 {
		return confidenceEmpty
	}
	return 0.5 + 0.45*min(1, hits[0].score)
}

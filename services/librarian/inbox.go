package librarian

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Inbox answer settings.
const (
	eventAnswered   = "message.answered"
	answerListed    = 5
	answerQuoteLen  = 80
	noReposAnswer   = "No repositories are indexed yet: register one with POST /v1/repositories"
	confidenceEmpty = 0.3
	unavailable     = "The librarian could not search the code just now; please ask again in a moment."
	// inboxMaxDeliver is how often a message is tried; the last try answers
	// even when the search fails, so that a question never goes unanswered.
	inboxMaxDeliver = 5
)

// handleInbox answers one message the Guide routed to the librarian: it
// searches the tenant's code for the text and appends the answer to the
// session's event stream. Publishing is de-duplicated on the envelope id,
// so a redelivered message never answers twice.
func (s *Service) handleInbox(ctx context.Context, msg jetstream.Msg) error {
	var env messagev1.Envelope
	if err := natsx.Unmarshal(msg, &env); err != nil {
		return err
	}
	tenant, session := env.GetTenantId(), env.GetSessionId()
	if !(identity.Identity{TenantID: tenant, UserID: topology.AgentLibrarian}).Valid() || session == "" {
		return natsx.Permanent(fmt.Errorf("envelope %q: tenant_id and session_id are required", env.GetId()))
	}
	text := env.GetUserInput().GetText()
	if strings.TrimSpace(text) == "" {
		text = env.GetStructuredIntent().GetOriginalRequest()
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.InboxTimeout)
	defer cancel()
	answer, data, err := s.answer(ctx, tenant, text)
	if err != nil {
		if !lastDelivery(msg) {
			return fmt.Errorf("answer envelope %q: %w", env.GetId(), err)
		}
		s.log.ErrorContext(ctx, "search failed on the last delivery; answering that it is unavailable",
			slog.String(logx.KeySessionID, session), logx.Err(err))
		answer = unavailable
		data = map[string]any{"agent": topology.AgentLibrarian, "hits": []any{}, "confidence": 0.0}
	}
	correlation := env.GetCorrelationId()
	if correlation == "" {
		correlation = env.GetId()
	}
	eventID := ""
	if env.GetId() != "" {
		eventID = env.GetId() + ":answer"
	}
	if _, err := topology.PublishEvent(ctx, s.bus, topology.Event{
		Tenant:        tenant,
		Session:       session,
		ID:            eventID,
		Type:          eventAnswered,
		Source:        topology.AgentLibrarian,
		CorrelationID: correlation,
		Text:          answer,
		Data:          data,
	}); err != nil {
		return fmt.Errorf("publish answer to envelope %q: %w", env.GetId(), err)
	}
	hits, _ := data["hits"].([]any)
	s.log.InfoContext(ctx, "question answered", slog.String(logx.KeyTenantID, tenant),
		slog.String(logx.KeySessionID, session), slog.String(logx.KeyCorrelationID, correlation),
		slog.Int("hits", len(hits)))
	return nil
}

// answer searches the tenant's code for text and returns a short answer for
// a person and the structured data of the event.
func (s *Service) answer(ctx context.Context, tenant, text string) (string, map[string]any, error) {
	data := map[string]any{"agent": topology.AgentLibrarian, "hits": []any{}}
	indexed, err := s.store.hasIndexed(ctx, tenant)
	if err != nil {
		return "", nil, err
	}
	if !indexed {
		data["confidence"] = 0.0
		return noReposAnswer, data, nil
	}
	text = strings.ToValidUTF8(strings.TrimSpace(text), "\uFFFD")
	text = truncateRunes(text, s.cfg.MaxQueryChars)
	hits, err := s.search(ctx, tenant, text, nil, s.cfg.DefaultPageSize, "inbox")
	if err != nil && !errors.Is(err, errNoTerms) {
		return "", nil, err
	}
	data["confidence"] = confidence(hits)
	if len(hits) == 0 {
		return fmt.Sprintf("No indexed code matches %q.", truncateRunes(text, answerQuoteLen)), data, nil
	}
	list := make([]any, 0, len(hits))
	places := make([]string, 0, answerListed)
	for i, h := range hits {
		list = append(list, map[string]any{
			"repository": repositoryPrefix + h.repoID,
			"path":       h.path,
			"line_start": float64(h.lineStart),
			"line_end":   float64(h.lineEnd),
			"snippet":    h.snippet,
			"score":      h.score,
		})
		if i < answerListed {
			places = append(places, fmt.Sprintf("%s:%d-%d", h.path, h.lineStart, h.lineEnd))
		}
	}
	data["hits"] = list
	noun := "places"
	if len(hits) == 1 {
		noun = "place"
	}
	answer := fmt.Sprintf("Found %d %s: %s", len(hits), noun, strings.Join(places, ", "))
	if more := len(hits) - len(places); more > 0 {
		answer += fmt.Sprintf(" and %d more", more)
	}
	return answer, data, nil
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

// lastDelivery reports whether msg will not be delivered again after a
// failure.
func lastDelivery(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	return err == nil && md.NumDelivered >= inboxMaxDeliver
}

package academic

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"

	"sylk.dev/sylk/pkg/textsearch"
)

// EventAnswered is the type of the event that carries an answer.
const EventAnswered = "message.answered"

// handleInbox answers one routed question: the tenant's documents are
// searched and the answer is published on the session's event stream.
func (s *Service) handleInbox(ctx context.Context, msg jetstream.Msg) error {
	var env messagev1.Envelope
	if err := natsx.Unmarshal(msg, &env); err != nil {
		s.metrics.inbox.WithLabelValues("rejected").Inc()
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.InboxTimeout)
	defer cancel()
	outcome, err := s.answer(ctx, &env)
	if err != nil && outcome == "" {
		outcome = "failed"
	}
	s.metrics.inbox.WithLabelValues(outcome).Inc()
	return err
}

// reject drops a message that redelivery cannot fix.
func reject(format string, args ...any) (string, error) {
	return "rejected", natsx.Permanent(fmt.Errorf(format, args...))
}

func (s *Service) answer(ctx context.Context, env *messagev1.Envelope) (string, error) {
	log := s.log.With(slog.String("message_id", env.GetId()), slog.String(logx.KeyCorrelationID, env.GetCorrelationId()),
		slog.String(logx.KeyTenantID, env.GetTenantId()), slog.String(logx.KeySessionID, env.GetSessionId()))
	switch {
	case env.GetTenantId() == "":
		return reject("message %s has no tenant", env.GetId())
	case !ids.Valid(env.GetSessionId()):
		return reject("message %s: session_id %q is not a UUID", env.GetId(), env.GetSessionId())
	case env.GetUserInput() == nil:
		return reject("message %s: unsupported type %s", env.GetId(), env.GetType())
	}
	if d := env.GetDeadline(); d != nil && d.IsValid() && time.Now().After(d.AsTime()) {
		log.WarnContext(ctx, "inbox message expired before handling")
		return "expired", nil
	}
	// A NUL (which the database cannot take) separates words like a space.
	query := strings.Join(strings.Fields(strings.ReplaceAll(env.GetUserInput().GetText(), "\x00", " ")), " ")
	query = textsearch.Truncate(query, s.cfg.MaxQueryBytes)
	var hits []hit
	if textsearch.HasWords(query) {
		var err error
		if hits, err = s.search(ctx, env.GetTenantId(), query, s.cfg.InboxHits); err != nil {
			return "", err
		}
	}
	corr := env.GetCorrelationId()
	if corr == "" {
		corr = env.GetId()
	}
	_, err := topology.PublishEvent(ctx, s.bus, topology.Event{
		Tenant:        env.GetTenantId(),
		Session:       env.GetSessionId(),
		ID:            env.GetId() + ":answer",
		Type:          EventAnswered,
		Source:        topology.AgentAcademic,
		CorrelationID: corr,
		Text:          answerText(query, hits),
		Data:          answerData(query, hits),
	})
	if err != nil {
		return "", fmt.Errorf("publish answer: %w", err)
	}
	log.InfoContext(ctx, "question answered", slog.Int("hits", len(hits)))
	return "answered", nil
}

func answerText(query string, hits []hit) string {
	if len(hits) == 0 {
		if query == "" {
			return "Nothing to search for: ask about a topic of the ingested documents."
		}
		return fmt.Sprintf("No section of the ingested documents matches %q.", truncateChars(query, 80))
	}
	var parts []string
	for i, h := range hits {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		where := truncateChars(h.DocumentTitle, 80)
		if h.Heading != "" {
			where += " › " + truncateChars(h.Heading, 80)
		}
		parts = append(parts, fmt.Sprintf("%s (lines %d-%d)", where, h.LineStart, h.LineEnd))
	}
	noun := "sections"
	if len(hits) == 1 {
		noun = "section"
	}
	return fmt.Sprintf("Found %d matching %s in the ingested documents: %s.", len(hits), noun, strings.Join(parts, "; "))
}

func answerData(query string, hits []hit) map[string]any {
	hs := make([]any, 0, len(hits))
	for _, h := range hits {
		hs = append(hs, map[string]any{
			"document":       namePrefix + h.DocumentID,
			"document_title": h.DocumentTitle,
			"heading":        h.Heading,
			"line_start":     h.LineStart,
			"line_end":       h.LineEnd,
			"snippet":        h.Snippet,
			"score":          h.Score,
		})
	}
	return map[string]any{
		"agent": topology.AgentAcademic,
		"query": query,
		"hits":  hs,
	}
}

// truncateChars bounds s to n characters.
func truncateChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

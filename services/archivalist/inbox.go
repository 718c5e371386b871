package archivalist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
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

// CrossSessionPhrases in a routed question widen its search from the current
// session to every session of the tenant.
var CrossSessionPhrases = []string{"all sessions", "across sessions", "any session", "previous sessions"}

var crossSessionPattern = regexp.MustCompile(`(?i)\b(?:` + strings.Join(quoteAll(CrossSessionPhrases), "|") + `)\b`)

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ReplaceAll(regexp.QuoteMeta(s), " ", `\s+`)
	}
	return out
}

// Event types and the metadata keys of store requests.
const (
	EventAnswered    = "message.answered"
	MetadataCategory = "category"
	MetadataTitle    = "title"
	// defaultStoreCategory is used when a store request names no category.
	defaultStoreCategory = "note"
)

// handleInbox answers one routed message: a question is searched and
// answered on the session's event stream; a store request is recorded.
func (s *Service) handleInbox(ctx context.Context, msg jetstream.Msg) error {
	var env messagev1.Envelope
	if err := natsx.Unmarshal(msg, &env); err != nil {
		s.metrics.inbox.WithLabelValues("rejected").Inc()
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.InboxTimeout)
	defer cancel()
	outcome, err := s.dispatch(ctx, &env)
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

func (s *Service) dispatch(ctx context.Context, env *messagev1.Envelope) (string, error) {
	log := s.log.With(slog.String("message_id", env.GetId()), slog.String(logx.KeyCorrelationID, env.GetCorrelationId()),
		slog.String(logx.KeyTenantID, env.GetTenantId()), slog.String(logx.KeySessionID, env.GetSessionId()))
	if env.GetTenantId() == "" {
		return reject("message %s has no tenant", env.GetId())
	}
	if d := env.GetDeadline(); d != nil && d.IsValid() && time.Now().After(d.AsTime()) {
		log.WarnContext(ctx, "inbox message expired before handling")
		return "expired", nil
	}
	switch {
	case env.GetType() == messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST:
		ar := env.GetAgentResponse()
		if ar == nil {
			return reject("store request %s carries no agent_response", env.GetId())
		}
		return s.storeResponse(ctx, log, env, ar)
	case env.GetUserInput() != nil:
		return s.answer(ctx, log, env)
	}
	return reject("message %s: unsupported type %s", env.GetId(), env.GetType())
}

// storeResponse records an agent's response as an entry. The message id
// makes it idempotent, so a redelivered request is stored once.
func (s *Service) storeResponse(ctx context.Context, log *slog.Logger, env *messagev1.Envelope, ar *messagev1.AgentResponse) (string, error) {
	md := env.GetMetadata()
	category := strings.TrimSpace(md[MetadataCategory])
	if category == "" {
		category = defaultStoreCategory
	}
	source := strings.TrimSpace(ar.GetAgent())
	if source == "" {
		source = strings.TrimSpace(env.GetSource())
	}
	source = truncateChars(source, MaxSourceChars)
	content := responseContent(ar)
	title := strings.TrimSpace(md[MetadataTitle])
	if title == "" {
		title = firstLine(content)
	}
	if title == "" {
		title = source + " response"
	}
	e := entry{
		TenantID:  env.GetTenantId(),
		ID:        ids.New(),
		Category:  category,
		Title:     truncateChars(title, MaxTitleChars),
		Content:   textsearch.Truncate(content, s.cfg.MaxContentBytes),
		SessionID: env.GetSessionId(),
		UserID:    env.GetUserId(),
		Source:    source,
	}
	if err := s.validateEntry(e); err != nil {
		return reject("store request %s: %w", env.GetId(), err)
	}
	stored, err := s.store.insert(ctx, e, env.GetId())
	if errors.Is(err, errDuplicate) {
		return "duplicate", nil
	}
	if err != nil {
		return "", err
	}
	s.metrics.created.WithLabelValues(stored.Category).Inc()
	log.InfoContext(ctx, "entry stored from message", slog.String("entry", stored.ID), slog.String("category", stored.Category))
	return "stored", nil
}

// responseContent is the response text followed by its hits, one a line.
func responseContent(ar *messagev1.AgentResponse) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(ar.GetText()))
	for i, h := range ar.GetHits() {
		if i == 0 {
			b.WriteString("\n\n")
		} else {
			b.WriteString("\n")
		}
		b.WriteString("- ")
		b.WriteString(h.GetTitle())
		if p := h.GetPath(); p != "" {
			fmt.Fprintf(&b, " (%s", p)
			if h.GetLineStart() > 0 {
				fmt.Fprintf(&b, ":%d-%d", h.GetLineStart(), h.GetLineEnd())
			}
			b.WriteString(")")
		}
		if sn := h.GetSnippet(); sn != "" {
			b.WriteString(": ")
			b.WriteString(sn)
		}
	}
	return strings.TrimSpace(b.String())
}

// answer searches the archive for a routed question and publishes the
// answer on the session's event stream.
func (s *Service) answer(ctx context.Context, log *slog.Logger, env *messagev1.Envelope) (string, error) {
	if !ids.Valid(env.GetSessionId()) {
		return reject("message %s: session_id %q is not a UUID", env.GetId(), env.GetSessionId())
	}
	text := env.GetUserInput().GetText()
	cross := crossSessionPattern.MatchString(text)
	query := strings.Join(strings.Fields(crossSessionPattern.ReplaceAllString(text, " ")), " ")
	query = textsearch.Truncate(query, s.cfg.MaxQueryBytes)
	q := searchQuery{Text: query, SessionID: env.GetSessionId(), Limit: s.cfg.InboxHits, Viewer: ownViewer(env.GetUserId())}
	if cross {
		q.SessionID = ""
	}
	var hits []hit
	if textsearch.HasWords(query) {
		var err error
		if hits, err = s.search(ctx, env.GetTenantId(), q); err != nil {
			return "", err
		}
	}
	var recent []entry
	if len(hits) == 0 {
		var err error
		recent, _, err = s.store.list(ctx, env.GetTenantId(), listQuery{SessionID: q.SessionID, Limit: s.cfg.InboxHits, Viewer: q.Viewer})
		if err != nil {
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
		Source:        topology.AgentArchivalist,
		CorrelationID: corr,
		Text:          answerText(query, cross, hits, recent),
		Data:          answerData(query, cross, hits, recent),
	})
	if err != nil {
		return "", fmt.Errorf("publish answer: %w", err)
	}
	log.InfoContext(ctx, "question answered", slog.Int("hits", len(hits)), slog.Bool("cross_session", cross))
	return "answered", nil
}

func answerText(query string, cross bool, hits []hit, recent []entry) string {
	scope := "in this session"
	if cross {
		scope = "across sessions"
	}
	switch {
	case len(hits) == 1:
		return fmt.Sprintf("Found 1 archived entry %s: %s", scope, titles([]entry{hits[0].entry}))
	case len(hits) > 1:
		es := make([]entry, len(hits))
		for i, h := range hits {
			es[i] = h.entry
		}
		return fmt.Sprintf("Found %d archived entries %s: %s", len(hits), scope, titles(es))
	case query == "" && len(recent) > 0:
		return fmt.Sprintf("Most recent archived entries %s: %s", scope, titles(recent))
	case len(recent) > 0:
		return fmt.Sprintf("No archived entries %s match %q. Most recent: %s", scope, truncateChars(query, 80), titles(recent))
	}
	return fmt.Sprintf("The archive holds no entries %s yet.", scope)
}

// titles lists up to three entries as "title" (category).
func titles(es []entry) string {
	var parts []string
	for i, e := range es {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%q (%s)", truncateChars(e.Title, 80), e.Category))
	}
	return strings.Join(parts, "; ") + "."
}

func answerData(query string, cross bool, hits []hit, recent []entry) map[string]any {
	hs := make([]any, 0, len(hits))
	for _, h := range hits {
		hs = append(hs, map[string]any{
			"id":         h.ID,
			"name":       namePrefix + h.ID,
			"title":      h.Title,
			"category":   h.Category,
			"snippet":    h.Snippet,
			"score":      h.Score,
			"session_id": h.SessionID,
		})
	}
	data := map[string]any{
		"agent":         topology.AgentArchivalist,
		"query":         query,
		"cross_session": cross,
		"hits":          hs,
	}
	if len(recent) > 0 {
		rs := make([]any, 0, len(recent))
		for _, e := range recent {
			rs = append(rs, map[string]any{
				"id":         e.ID,
				"name":       namePrefix + e.ID,
				"title":      e.Title,
				"category":   e.Category,
				"snippet":    textsearch.CleanSnippet(e.Content, SnippetChars),
				"session_id": e.SessionID,
			})
		}
		data["recent"] = rs
	}
	return data
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

// truncateChars bounds s to n characters.
func truncateChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

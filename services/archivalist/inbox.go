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

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/logx"
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

// defaultStoreCategory is used when a store request names no category.
const defaultStoreCategory = "note"

// Inbox outcomes of the archivalist's own (pkg/inbox counts the others).
const (
	outcomeStored    = "stored"
	outcomeDuplicate = "duplicate"
)

// handleInbox handles one routed message: a store request is recorded; a
// question is searched and answered on the session's event stream.
func (s *Service) handleInbox(ctx context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	if req := env.GetStoreRequest(); req != nil {
		return s.record(ctx, env, req)
	}
	if env.GetType() == messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST {
		return inbox.Result{}, inbox.Reject("store request %s carries no store_request", env.GetId())
	}
	return s.answer(ctx, env)
}

// record records a store request as an entry. The message id makes it
// idempotent, so a redelivered request is stored once.
func (s *Service) record(ctx context.Context, env *messagev1.Envelope, req *messagev1.StoreRequest) (inbox.Result, error) {
	e := s.storedEntry(env, req)
	if err := s.validateEntry(e); err != nil {
		return inbox.Result{}, inbox.Reject("store request %s: %w", env.GetId(), err)
	}
	stored, err := s.store.insert(ctx, e, env.GetId())
	if errors.Is(err, errDuplicate) {
		return inbox.Result{Outcome: outcomeDuplicate}, nil
	}
	if err != nil {
		return inbox.Result{}, err
	}
	s.metrics.created.WithLabelValues(stored.Category).Inc()
	s.log.InfoContext(ctx, "entry stored from message", slog.String("entry", stored.ID), slog.String("category", stored.Category),
		slog.String(logx.KeyTenantID, stored.TenantID), slog.String("message_id", env.GetId()))
	return inbox.Result{Outcome: outcomeStored}, nil
}

// storedEntry is the entry a store request asks for: its category (else
// a note), its title (else the content's first line), its content clipped
// to the configured bound, recorded by its source (else the envelope's).
func (s *Service) storedEntry(env *messagev1.Envelope, req *messagev1.StoreRequest) entry {
	category := strings.TrimSpace(req.GetCategory())
	if category == "" {
		category = defaultStoreCategory
	}
	source := strings.TrimSpace(req.GetSource())
	if source == "" {
		source = strings.TrimSpace(env.GetSource())
	}
	source = truncateChars(source, MaxSourceChars)
	content := strings.TrimSpace(req.GetContent())
	title := strings.TrimSpace(req.GetTitle())
	if title == "" {
		title = firstLine(content)
	}
	if title == "" {
		title = source + " record"
	}
	return entry{
		TenantID:  env.GetTenantId(),
		ID:        ids.New(),
		Category:  category,
		Title:     truncateChars(title, MaxTitleChars),
		Content:   textsearch.Truncate(content, s.cfg.MaxContentBytes),
		SessionID: env.GetSessionId(),
		UserID:    env.GetUserId(),
		Source:    source,
		// A malformed repository is dropped rather than losing the record.
		Repository: validRepository(env.GetRepository()),
	}
}

// answer searches the archive for a routed question; when nothing matches,
// the answer lists the newest entries instead.
func (s *Service) answer(ctx context.Context, env *messagev1.Envelope) (inbox.Result, error) {
	if res, done, err := s.step0(ctx, env); done || err != nil {
		return res, err
	}
	text, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, err
	}
	// A time-scoped question is about the tenant's history: it searches
	// every session, within its window (timescope.go).
	w, text := questionWindow(env.GetStructuredIntent().GetTimeScope(), text, time.Now())
	cross := crossSessionPattern.MatchString(text) || w.set()
	query := strings.Join(strings.Fields(crossSessionPattern.ReplaceAllString(text, " ")), " ")
	query = textsearch.Truncate(query, s.cfg.MaxQueryBytes)
	q := searchQuery{Text: query, SessionID: env.GetSessionId(), Limit: s.cfg.InboxHits, Viewer: ownViewer(env.GetUserId()), Window: w}
	if cross {
		q.SessionID = ""
	}
	var hits []hit
	if textsearch.HasWords(query) {
		if hits, err = s.search(ctx, env.GetTenantId(), q); err != nil {
			return inbox.Result{}, err
		}
	}
	var recent []entry
	if len(hits) == 0 {
		recent, _, err = s.store.list(ctx, env.GetTenantId(), listQuery{SessionID: q.SessionID, Limit: s.cfg.InboxHits, Viewer: q.Viewer, Window: w})
		if err != nil {
			return inbox.Result{}, err
		}
	}
	a := &messagev1.AgentAnswer{
		Text:         answerText(query, cross, hits, recent),
		Query:        query,
		CrossSession: cross,
		Hits:         answerHits(hits),
		Recent:       recentHits(recent),
	}
	if err := s.writeAnswer(ctx, env, scopeOf(cross), hits, a); err != nil {
		return inbox.Result{}, err
	}
	a.Text = withWindow(a.Text, w)
	return inbox.Result{Answer: a}, nil
}

// scopeOf names what a question searched.
func scopeOf(cross bool) string {
	if cross {
		return "across sessions"
	}
	return "in this session"
}

// answerText is the answer when nothing matched (writeAnswer writes the
// answer from hits).
func answerText(query string, cross bool, hits []hit, recent []entry) string {
	scope := scopeOf(cross)
	switch {
	case len(hits) > 0:
		return ""
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

// entryHit is e as an answer's hit.
func entryHit(e entry) *messagev1.Hit {
	return &messagev1.Hit{
		Kind:      messagev1.HitKind_HIT_KIND_ENTRY,
		Id:        e.ID,
		Name:      namePrefix + e.ID,
		Title:     e.Title,
		Category:  e.Category,
		SessionId: e.SessionID,
	}
}

// answerHits are the entries found, with their snippets and scores.
func answerHits(hits []hit) []*messagev1.Hit {
	out := make([]*messagev1.Hit, 0, len(hits))
	for _, h := range hits {
		eh := entryHit(h.entry)
		eh.Snippet, eh.Score = h.Snippet, h.Score
		out = append(out, eh)
	}
	return out
}

// recentHits are the newest entries shown when nothing matched, each with
// the start of its content.
func recentHits(recent []entry) []*messagev1.Hit {
	out := make([]*messagev1.Hit, 0, len(recent))
	for _, e := range recent {
		eh := entryHit(e)
		eh.Snippet = textsearch.CleanSnippet(e.Content, SnippetChars)
		out = append(out, eh)
	}
	return out
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

package archivalist

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/textsearch"
)

// Categories are the entry categories the archivalist accepts.
var Categories = []string{
	"decision",
	"failure",
	"outcome",
	"pattern",
	"note",
	"routing_failure",
	"consultation",
	"message",
	"pipeline_handoff",
	"architect_workflow",
	"inspector_findings",
	"tester_summary",
}

// DefaultSource is recorded when an entry created through the API names none.
const DefaultSource = "user"

const namePrefix = "entries/"

// CreateEntry stores a new entry for the caller's tenant.
func (s *Service) CreateEntry(ctx context.Context, req *archivalistv1.CreateEntryRequest) (*archivalistv1.CreateEntryResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if who.Role == identity.RoleViewer {
		return nil, errViewer
	}
	in := req.GetEntry()
	if in == nil {
		return nil, errNoEntry
	}
	e := entry{
		TenantID:  who.TenantID,
		ID:        ids.New(),
		Category:  strings.TrimSpace(in.GetCategory()),
		Title:     strings.TrimSpace(in.GetTitle()),
		Content:   in.GetContent(),
		SessionID: strings.TrimSpace(in.GetSessionId()),
		UserID:    who.UserID,
		Source:    strings.TrimSpace(in.GetSource()),
		// Repository is the registered repository's name as given: an
		// entry about a repository the caller cannot see only misleads its
		// own tenant's searches.
		Repository: strings.TrimSpace(in.GetRepository()),
	}
	if e.Source == "" {
		e.Source = DefaultSource
	}
	if err := s.validateEntry(e); err != nil {
		return nil, err
	}
	if e.SessionID != "" {
		// Sessions belong to users: an entry is recorded in one of the
		// caller's own sessions, or in none.
		if _, err := s.sessions.Get(ctx, who, e.SessionID, "the session"); err != nil {
			return nil, err
		}
	}
	stored, err := s.store.insert(ctx, e, "")
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create entry", err)
	}
	s.metrics.created.WithLabelValues(stored.Category).Inc()
	s.log.InfoContext(ctx, "entry created", slog.String("entry", stored.ID), slog.String("category", stored.Category),
		slog.String(logx.KeyTenantID, stored.TenantID), slog.String(logx.KeySessionID, stored.SessionID))
	return &archivalistv1.CreateEntryResponse{Entry: toProto(stored)}, nil
}

// GetEntry returns one entry of the caller's tenant.
func (s *Service) GetEntry(ctx context.Context, req *archivalistv1.GetEntryRequest) (*archivalistv1.GetEntryResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := strings.CutPrefix(req.GetName(), namePrefix)
	if !ok || !ids.Valid(id) {
		return nil, apierr.Invalid("name", "want %s{uuid}, got %q", namePrefix, req.GetName())
	}
	e, err := s.store.get(ctx, who.TenantID, viewerOf(who), id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get entry", err)
	}
	return &archivalistv1.GetEntryResponse{Entry: toProto(e)}, nil
}

// ListEntries pages through the caller's entries, newest first, optionally
// restricted to one session and one category.
func (s *Service) ListEntries(ctx context.Context, req *archivalistv1.ListEntriesRequest) (*archivalistv1.ListEntriesResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	var problems []apierr.FieldViolation
	if req.GetPageSize() < 0 {
		problems = append(problems, apierr.FieldViolation{Field: "page_size", Description: "must not be negative"})
	}
	if sid := req.GetSessionId(); sid != "" && !ids.Valid(sid) {
		problems = append(problems, apierr.FieldViolation{Field: "session_id", Description: "must be a UUID"})
	}
	if c := req.GetCategory(); c != "" && !slices.Contains(Categories, c) {
		problems = append(problems, categoryProblem("category", c))
	}
	after, err := textsearch.ParseToken(req.GetPageToken())
	if err != nil {
		problems = append(problems, apierr.FieldViolation{Field: "page_token", Description: "invalid"})
	}
	w, wp := requestWindow(req.GetTimeScope(), req.GetSince(), req.GetUntil(), time.Now())
	problems = append(append(problems, wp...), repositoryProblems("repository", req.GetRepository())...)
	if err := apierr.InvalidFields(problems...); err != nil {
		return nil, err
	}
	entries, next, err := s.store.list(ctx, who.TenantID, listQuery{
		Viewer:     viewerOf(who),
		SessionID:  req.GetSessionId(),
		Category:   req.GetCategory(),
		After:      after,
		Limit:      textsearch.PageSize(req.GetPageSize(), DefaultPageSize, MaxPageSize),
		Repository: req.GetRepository(),
		Window:     w,
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list entries", err)
	}
	resp := &archivalistv1.ListEntriesResponse{Entries: make([]*archivalistv1.Entry, 0, len(entries))}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, toProto(e))
	}
	if next != nil {
		resp.NextPageToken = next.Token()
	}
	return resp, nil
}

// SearchEntries ranks entries against a full-text query. It searches one
// session unless cross_session is set, in which case it searches every
// session of the tenant, and entries recorded outside any session (spec A-18).
func (s *Service) SearchEntries(ctx context.Context, req *archivalistv1.SearchEntriesRequest) (*archivalistv1.SearchEntriesResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	query := strings.TrimSpace(req.GetQuery())
	sid := strings.TrimSpace(req.GetSessionId())
	w, err := s.checkSearch(req, query, sid)
	if err != nil {
		return nil, err
	}
	q := searchQuery{Text: query, SessionID: sid, Category: req.GetCategory(), Limit: textsearch.PageSize(req.GetPageSize(), DefaultPageSize, MaxPageSize),
		Viewer: viewerOf(who), Repository: req.GetRepository(), Window: w}
	if req.GetCrossSession() {
		q.SessionID = ""
	}
	hits, err := s.search(ctx, who.TenantID, q)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "search entries", err)
	}
	resp := &archivalistv1.SearchEntriesResponse{Hits: make([]*archivalistv1.EntryHit, 0, len(hits))}
	for _, h := range hits {
		resp.Hits = append(resp.Hits, &archivalistv1.EntryHit{Entry: toProto(h.entry), Score: h.Score, Snippet: h.Snippet})
	}
	return resp, nil
}

// checkSearch reports every problem of a search request, naming the
// fields, and returns the window it searches.
func (s *Service) checkSearch(req *archivalistv1.SearchEntriesRequest, query, sid string) (window, error) {
	var problems []apierr.FieldViolation
	if p := textsearch.QueryProblem(query, s.cfg.MaxQueryBytes); p != "" {
		problems = append(problems, apierr.FieldViolation{Field: "query", Description: p})
	}
	switch {
	case sid == "" && !req.GetCrossSession():
		problems = append(problems, apierr.FieldViolation{Field: "session_id", Description: "required unless cross_session is set"})
	case sid != "" && !ids.Valid(sid):
		problems = append(problems, apierr.FieldViolation{Field: "session_id", Description: "must be a UUID"})
	}
	if c := req.GetCategory(); c != "" && !slices.Contains(Categories, c) {
		problems = append(problems, categoryProblem("category", c))
	}
	if req.GetPageSize() < 0 {
		problems = append(problems, apierr.FieldViolation{Field: "page_size", Description: "must not be negative"})
	}
	w, wp := requestWindow(req.GetTimeScope(), req.GetSince(), req.GetUntil(), time.Now())
	problems = append(append(problems, wp...), repositoryProblems("repository", req.GetRepository())...)
	return w, apierr.InvalidFields(problems...)
}

// repositoryProblems checks a repository name: "" or "repositories/{uuid}".
func repositoryProblems(field, name string) []apierr.FieldViolation {
	if name == "" {
		return nil
	}
	if id, ok := strings.CutPrefix(name, "repositories/"); ok && ids.Valid(id) {
		return nil
	}
	return []apierr.FieldViolation{{Field: field, Description: fmt.Sprintf("want repositories/{uuid} (as the repository's name says), got %q", truncateChars(name, 80))}}
}

// search runs a search and records its duration.
func (s *Service) search(ctx context.Context, tenant string, q searchQuery) ([]hit, error) {
	scope := "session"
	if q.SessionID == "" {
		scope = "cross_session"
	}
	start := time.Now()
	hits, err := s.store.search(ctx, tenant, q)
	s.metrics.searchDuration.WithLabelValues(scope).Observe(time.Since(start).Seconds())
	return hits, err
}

// viewerOf is whose private entries the caller reads: an admin everyone's
// (""), anyone else their own.
func viewerOf(who identity.Identity) string {
	if who.Role == identity.RoleAdmin {
		return ""
	}
	return ownViewer(who.UserID)
}

// ownViewer is a user as a viewer; no user matches no private entry.
func ownViewer(user string) string {
	if user == "" {
		return " " // no user id holds a space
	}
	return user
}

// validateEntry reports every problem with a new entry, naming the fields.
func (s *Service) validateEntry(e entry) error {
	var problems []apierr.FieldViolation
	problem := func(field, format string, args ...any) {
		problems = append(problems, apierr.FieldViolation{Field: "entry." + field, Description: fmt.Sprintf(format, args...)})
	}
	switch {
	case e.Category == "":
		problem("category", "required; %s", allowedCategories())
	case !slices.Contains(Categories, e.Category):
		problems = append(problems, categoryProblem("entry.category", e.Category))
	}
	switch {
	case e.Title == "":
		problem("title", "required")
	case utf8.RuneCountInString(e.Title) > MaxTitleChars:
		problem("title", "at most %d characters", MaxTitleChars)
	}
	if len(e.Content) > s.cfg.MaxContentBytes {
		problem("content", "at most %d bytes", s.cfg.MaxContentBytes)
	}
	if e.SessionID != "" && !ids.Valid(e.SessionID) {
		problem("session_id", "must be a UUID")
	}
	if utf8.RuneCountInString(e.Source) > MaxSourceChars {
		problem("source", "at most %d characters", MaxSourceChars)
	}
	for _, p := range repositoryProblems("entry.repository", e.Repository) {
		problems = append(problems, p)
	}
	for _, f := range [...]struct{ name, value string }{{"content", e.Content}, {"source", e.Source}, {"title", e.Title}} {
		if strings.ContainsRune(f.value, 0) || !utf8.ValidString(f.value) {
			problem(f.name, "must be valid UTF-8 without NUL characters")
		}
	}
	return apierr.InvalidFields(problems...)
}

// categoryProblem says category c of field is not one of Categories.
func categoryProblem(field, c string) apierr.FieldViolation {
	return apierr.FieldViolation{Field: field, Description: fmt.Sprintf("%q is not allowed; %s", c, allowedCategories())}
}

func allowedCategories() string {
	return "allowed values: " + strings.Join(Categories, ", ")
}

func toProto(e entry) *archivalistv1.Entry {
	return &archivalistv1.Entry{
		Name:       namePrefix + e.ID,
		Id:         e.ID,
		Category:   e.Category,
		Title:      e.Title,
		Content:    e.Content,
		SessionId:  e.SessionID,
		TenantId:   e.TenantID,
		UserId:     e.UserID,
		Source:     e.Source,
		CreateTime: timestamppb.New(e.CreatedAt),
		Repository: e.Repository,
	}
}

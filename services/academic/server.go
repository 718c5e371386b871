package academic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/textsearch"
)

const namePrefix = "documents/"

// CreateDocument ingests a document: it is split into sections, and the
// document and its sections are stored together or not at all.
func (s *Service) CreateDocument(ctx context.Context, req *academicv1.CreateDocumentRequest) (*academicv1.CreateDocumentResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if who.Role == identity.RoleViewer {
		return nil, errViewer
	}
	in := req.GetDocument()
	if in == nil {
		return nil, errNoDocument
	}
	d := document{
		TenantID: who.TenantID,
		ID:       ids.New(),
		Title:    strings.TrimSpace(in.GetTitle()),
		Source:   strings.TrimSpace(in.GetSource()),
		Format:   strings.ToLower(strings.TrimSpace(in.GetFormat())),
		UserID:   who.UserID,
	}
	if d.Format == "" {
		d.Format = Formats[0]
	}
	content := in.GetContent()
	if err := s.validateDocument(d, content); err != nil {
		return nil, err
	}
	// Stored, split and indexed without its secrets (line numbers kept).
	d.Title, d.Source, content = secrets.Scrub(d.Title), secrets.Scrub(d.Source), secrets.Scrub(content)
	start := time.Now()
	// One section past the limit is enough to refuse the document.
	var sections []section
	if d.Format == FormatText {
		sections = splitText(content, s.cfg.TextSectionLines, s.cfg.MaxSectionBytes, s.cfg.MaxSections+1)
	} else {
		sections = splitMarkdown(content, s.cfg.MaxSectionBytes, s.cfg.MaxSections+1)
	}
	if len(sections) > s.cfg.MaxSections {
		return nil, apierr.Invalid("document.content", "splits into more than %d sections (academic.max-sections)", s.cfg.MaxSections)
	}
	sum := sha256.Sum256([]byte(content))
	stored, err := s.store.insert(ctx, d, content, hex.EncodeToString(sum[:]), sections)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "create document", err)
	}
	s.metrics.ingested.WithLabelValues(stored.Format).Inc()
	s.metrics.sections.Add(float64(stored.SectionCount))
	s.log.InfoContext(ctx, "document ingested", slog.String("document", stored.ID), slog.String("format", stored.Format),
		slog.Int("sections", stored.SectionCount), slog.Int("bytes", len(content)),
		slog.String(logx.KeyTenantID, stored.TenantID), slog.Duration(logx.KeyDuration, time.Since(start)))
	return &academicv1.CreateDocumentResponse{Document: toProto(stored)}, nil
}

// GetDocument returns one document of the caller's tenant, without content.
func (s *Service) GetDocument(ctx context.Context, req *academicv1.GetDocumentRequest) (*academicv1.GetDocumentResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := strings.CutPrefix(req.GetName(), namePrefix)
	if !ok || !ids.Valid(id) {
		return nil, apierr.Invalid("name", "want %s{uuid}, got %q", namePrefix, req.GetName())
	}
	d, err := s.store.get(ctx, who.TenantID, id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get document", err)
	}
	return &academicv1.GetDocumentResponse{Document: toProto(d)}, nil
}

// ListDocuments pages through the caller's documents, newest first.
func (s *Service) ListDocuments(ctx context.Context, req *academicv1.ListDocumentsRequest) (*academicv1.ListDocumentsResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	var problems []apierr.FieldViolation
	if req.GetPageSize() < 0 {
		problems = append(problems, apierr.FieldViolation{Field: "page_size", Description: "must not be negative"})
	}
	after, err := textsearch.ParseToken(req.GetPageToken())
	if err != nil {
		problems = append(problems, apierr.FieldViolation{Field: "page_token", Description: "invalid"})
	}
	if err := apierr.InvalidFields(problems...); err != nil {
		return nil, err
	}
	docs, next, err := s.store.list(ctx, who.TenantID, after, textsearch.PageSize(req.GetPageSize(), DefaultPageSize, MaxPageSize))
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list documents", err)
	}
	resp := &academicv1.ListDocumentsResponse{Documents: make([]*academicv1.Document, 0, len(docs))}
	for _, d := range docs {
		resp.Documents = append(resp.Documents, toProto(d))
	}
	if next != nil {
		resp.NextPageToken = next.Token()
	}
	return resp, nil
}

// SearchDocuments ranks the sections of the caller's documents against a
// full-text query.
func (s *Service) SearchDocuments(ctx context.Context, req *academicv1.SearchDocumentsRequest) (*academicv1.SearchDocumentsResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	var problems []apierr.FieldViolation
	query := strings.TrimSpace(req.GetQuery())
	if p := textsearch.QueryProblem(query, s.cfg.MaxQueryBytes); p != "" {
		problems = append(problems, apierr.FieldViolation{Field: "query", Description: p})
	}
	if req.GetPageSize() < 0 {
		problems = append(problems, apierr.FieldViolation{Field: "page_size", Description: "must not be negative"})
	}
	if err := apierr.InvalidFields(problems...); err != nil {
		return nil, err
	}
	hits, err := s.search(ctx, who.TenantID, query, textsearch.PageSize(req.GetPageSize(), DefaultPageSize, MaxPageSize))
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "search documents", err)
	}
	resp := &academicv1.SearchDocumentsResponse{Hits: make([]*academicv1.SectionHit, 0, len(hits))}
	for _, h := range hits {
		resp.Hits = append(resp.Hits, &academicv1.SectionHit{
			Document:      namePrefix + h.DocumentID,
			DocumentTitle: h.DocumentTitle,
			Heading:       h.Heading,
			LineStart:     int32(h.LineStart),
			LineEnd:       int32(h.LineEnd),
			Snippet:       h.Snippet,
			Score:         h.Score,
		})
	}
	return resp, nil
}

// search runs a search and records its duration.
func (s *Service) search(ctx context.Context, tenant, query string, limit int) ([]hit, error) {
	start := time.Now()
	hits, err := s.store.search(ctx, tenant, query, limit)
	s.metrics.searchDuration.Observe(time.Since(start).Seconds())
	return hits, err
}

// validateDocument reports every problem with a new document, naming the fields.
func (s *Service) validateDocument(d document, content string) error {
	var problems []apierr.FieldViolation
	problem := func(field, format string, args ...any) {
		problems = append(problems, apierr.FieldViolation{Field: "document." + field, Description: fmt.Sprintf(format, args...)})
	}
	switch {
	case d.Title == "":
		problem("title", "required")
	case utf8.RuneCountInString(d.Title) > MaxTitleChars:
		problem("title", "at most %d characters", MaxTitleChars)
	}
	switch {
	case strings.TrimSpace(content) == "":
		problem("content", "required")
	case len(content) > s.cfg.MaxDocumentBytes:
		problem("content", "at most %d bytes", s.cfg.MaxDocumentBytes)
	}
	if !slices.Contains(Formats, d.Format) {
		problem("format", "%q is not supported; allowed values: %s", d.Format, strings.Join(Formats, ", "))
	}
	if utf8.RuneCountInString(d.Source) > MaxSourceChars {
		problem("source", "at most %d characters", MaxSourceChars)
	}
	for _, f := range [...]struct{ name, value string }{{"content", content}, {"source", d.Source}, {"title", d.Title}} {
		if strings.ContainsRune(f.value, 0) || !utf8.ValidString(f.value) {
			problem(f.name, "must be valid UTF-8 without NUL characters")
		}
	}
	return apierr.InvalidFields(problems...)
}

func toProto(d document) *academicv1.Document {
	return &academicv1.Document{
		Name:         namePrefix + d.ID,
		Id:           d.ID,
		Title:        d.Title,
		Source:       d.Source,
		Format:       d.Format,
		SectionCount: int32(d.SectionCount),
		CreateTime:   timestamppb.New(d.CreatedAt),
	}
}

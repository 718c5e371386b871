package architect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Consulting before planning (spec E-11): the Librarian says which code of
// the plan's repository the request touches and how that repository's
// index stands; the Archivalist says which failures and decisions of any of
// the tenant's sessions resemble it. Both are asked at once, each within
// Config.ConsultTimeout; one that cannot answer is recorded as
// "unavailable: <why>" and planning goes on.

// Bounds of a consultation.
const (
	maxConsultHits   = 8
	maxConsultFiles  = 5
	maxConsultQuery  = 500
	maxConsultLine   = 200
	consultedFailure = "failure"
	consultedChoice  = "decision"
	unavailable      = "unavailable: "
)

// consultation asks the Librarian and the Archivalist, as who, what they
// know of request; repository scopes the code search ("" searches none).
func (s *Service) consultation(ctx context.Context, who identity.Identity, repository, request string) *architectv1.PlanConsultation {
	ctx = consult.WithCaller(identity.AppendOutgoing(ctx, who), topology.AgentArchitect)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConsultTimeout)
	defer cancel()
	query := clip(strings.Join(strings.Fields(request), " "), maxConsultQuery)
	out := &architectv1.PlanConsultation{}
	var wg sync.WaitGroup
	var failures []*archivalistv1.EntryHit
	wg.Add(3)
	go func() {
		defer wg.Done()
		out.Code, out.Files, out.CodebaseHealth = s.codeOf(ctx, repository, query)
	}()
	go func() {
		defer wg.Done()
		// Failures are the repository's own (failurealerts.go).
		out.Failures, failures = s.history(ctx, consultedFailure, repository, query)
	}()
	go func() {
		defer wg.Done()
		out.Decisions, _ = s.history(ctx, consultedChoice, "", query)
	}()
	wg.Wait()
	out.FailureAlerts = failureAlerts(failures, request, out.GetFiles(), time.Now())
	return out
}

// codeOf asks the Librarian for the code of repository that query
// touches, and describes the repository's index in a line.
func (s *Service) codeOf(ctx context.Context, repository, query string) (code, files []string, health string) {
	switch {
	case repository == "":
		return nil, nil, "not searched: the session has no repository"
	case s.librarian == nil:
		return nil, nil, unavailable + "no librarian configured"
	}
	repo, err := s.librarian.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: repository})
	if err != nil {
		return nil, nil, s.consultFailed(ctx, "the librarian", err)
	}
	resp, err := s.librarian.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: query,
		Repositories: []string{repository}, PageSize: maxConsultHits})
	if err != nil {
		return nil, nil, s.consultFailed(ctx, "the librarian", err)
	}
	s.metrics.consulted.WithLabelValues("librarian", "answered").Inc()
	var languages []string
	for _, h := range resp.GetHits() {
		c := fmt.Sprintf("%s:%d-%d", h.GetPath(), h.GetLineStart(), h.GetLineEnd())
		if h.GetSymbol() != "" {
			c += " " + h.GetSymbol()
		}
		code = append(code, c)
		if !slices.Contains(files, h.GetPath()) {
			files = append(files, h.GetPath())
		}
		if l := h.GetLanguage(); l != "" && !slices.Contains(languages, l) {
			languages = append(languages, l)
		}
	}
	return code, files, indexHealth(repo.GetRepository(), resp, files, languages)
}

// indexHealth describes in a line how far the repository's index can be
// trusted and what the search found in it. The Librarian offers no
// maturity assessment of an area (spec E-17), so this says only what it
// knows.
func indexHealth(r *librarianv1.Repository, resp *librarianv1.SearchCodeResponse, files, languages []string) string {
	name := r.GetName()
	if d := r.GetDisplayName(); d != "" {
		name += " (" + d + ")"
	}
	state := strings.ToLower(strings.TrimPrefix(r.GetIndexState().String(), "INDEX_STATE_"))
	line := fmt.Sprintf("%s: index %s, %d files, %d chunks", name, state, r.GetFileCount(), r.GetChunkCount())
	if c := r.GetLastCommit(); c != "" {
		line += " at commit " + c[:min(len(c), 12)]
	}
	if r.GetIndexState() != librarianv1.IndexState_INDEX_STATE_READY {
		line += " (what it found may be incomplete)"
	}
	if len(resp.GetHits()) == 0 {
		line += "; found no code for the request"
		if h := resp.GetHint(); h != "" {
			line += " (" + clip(h, maxConsultLine) + ")"
		}
		return line
	}
	line += fmt.Sprintf("; the request touches %d %s in %d %s", len(resp.GetHits()), plural(len(resp.GetHits()), "place", "places"),
		len(files), plural(len(files), "file", "files"))
	if len(languages) > 0 {
		line += " (" + strings.Join(languages, ", ") + ")"
	}
	return line
}

// history asks the Archivalist for entries of category like query, from
// any session of the tenant (about repository, when set), in lines and as
// found.
func (s *Service) history(ctx context.Context, category, repository, query string) ([]string, []*archivalistv1.EntryHit) {
	if s.archivalist == nil {
		return []string{unavailable + "no archivalist configured"}, nil
	}
	resp, err := s.archivalist.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: query, CrossSession: true,
		Category: category, PageSize: maxConsultHits, Repository: repository})
	if err != nil {
		return []string{s.consultFailed(ctx, "the archivalist", err)}, nil
	}
	s.metrics.consulted.WithLabelValues("archivalist", "answered").Inc()
	var out []string
	for _, h := range resp.GetHits() {
		line := h.GetEntry().GetTitle()
		if sn := strings.Join(strings.Fields(h.GetSnippet()), " "); sn != "" && sn != line {
			line += ": " + sn
		}
		out = append(out, clip(line, maxConsultLine))
	}
	return out, resp.GetHits()
}

// consultFailed logs and counts why who could not answer, and says it in
// a line.
func (s *Service) consultFailed(ctx context.Context, who string, err error) string {
	s.log.WarnContext(ctx, "consult before planning", slog.String("agent", who), logx.Err(err))
	s.metrics.consulted.WithLabelValues(strings.TrimPrefix(who, "the "), "unavailable").Inc()
	why := status.Convert(err).Message()
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		why = "no answer in time"
	}
	return unavailable + who + ": " + clip(why, maxConsultLine)
}

// consultationText is the consultation for a planner's prompt, and for a
// person reading an offline plan's tasks.
func consultationText(repository string, c *architectv1.PlanConsultation) string {
	var b strings.Builder
	b.WriteString("## What was found before planning\n\n")
	if repository == "" {
		b.WriteString("Repository: none is set; the run will have no repository to change.\n")
	} else {
		b.WriteString("Repository: " + repository + "\n")
	}
	list := func(title string, items []string, none string) {
		b.WriteString("\n" + title + ":\n")
		if len(items) == 0 {
			b.WriteString("- " + none + "\n")
		}
		for _, it := range items {
			b.WriteString("- " + it + "\n")
		}
	}
	list("Code the request touches (the Librarian)", c.GetCode(), "none found")
	b.WriteString("\nCodebase health: " + c.GetCodebaseHealth() + "\n")
	var alerts []string
	for _, a := range c.GetFailureAlerts() {
		alerts = append(alerts, alertLine(a))
	}
	if len(alerts) > 0 {
		list("SIMILAR FAILURE DETECTED: do not repeat these (the Archivalist)", alerts, "")
	}
	list("Similar past failures (the Archivalist)", c.GetFailures(), "none recorded")
	list("Past decisions (the Archivalist)", c.GetDecisions(), "none recorded")
	return b.String()
}

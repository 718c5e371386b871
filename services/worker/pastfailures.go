package worker

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/textsearch"
)

// Past failures (spec E-09, G-25 check_mistakes). Before the Engineer
// edits, its brief names the failures the Orchestrator recorded for the
// run's repository on the task's files (failurememory.go there): what was
// tried, and how it failed. It is asked of the Archivalist once per brief,
// bounded in entries and bytes; without an answer the brief goes without.

// Bounds of the past failures in a brief.
const (
	maxPastFailures      = 3
	maxPastFailureBytes  = 600
	pastFailuresCategory = "failure"
)

var failureFilesLine = regexp.MustCompile(`(?m)^Files: (.+)$`)

// failureSignatureLine is a failure record's normalized error line.
var failureSignatureLine = regexp.MustCompile(`(?m)^Signature: (.+)$`)

// pastFailures is the brief's section on the failures recorded for the
// task's files in its repository; "" when there are none, the task names
// no files, or the Archivalist cannot be asked.
func (s *Service) pastFailures(ctx context.Context, d *taskv1.TaskDispatch, spec *orchestratorv1.Node, role string) string {
	files := taskFiles(spec)
	if s.know.archivalist == nil || d.GetRepositoryName() == "" || len(files) == 0 {
		return ""
	}
	cctx, cancel := context.WithTimeout(asUser(ctx, d, role), knowledgeTimeout)
	defer cancel()
	var words []string
	for _, f := range files {
		words = append(words, strings.FieldsFunc(f, func(r rune) bool { return r == '/' || r == '.' || r == '_' || r == '-' })...)
	}
	resp, err := s.know.archivalist.SearchEntries(cctx, &archivalistv1.SearchEntriesRequest{
		Query: textsearch.Truncate(strings.Join(words, " "), 1000), CrossSession: true, Category: pastFailuresCategory,
		Repository: d.GetRepositoryName(), PageSize: 10})
	if err != nil {
		s.log.WarnContext(ctx, "ask the archivalist for past failures", logx.Err(err))
		return ""
	}
	return pastFailuresSection(resp.GetHits(), files)
}

// taskFiles are the files a task is meant to touch.
func taskFiles(spec *orchestratorv1.Node) []string {
	out := slices.Clone(spec.GetFiles())
	for _, e := range spec.GetEdits() {
		if !slices.Contains(out, e.GetPath()) {
			out = append(out, e.GetPath())
		}
	}
	return out
}

// pastFailuresSection lists the hits that name one of files, up to the
// bounds.
func pastFailuresSection(hits []*archivalistv1.EntryHit, files []string) string {
	var b strings.Builder
	n := 0
	for _, h := range hits {
		e := h.GetEntry()
		m := failureFilesLine.FindStringSubmatch(e.GetContent())
		if m == nil || !sharesFile(strings.Split(m[1], ", "), files) {
			continue
		}
		if n == 0 {
			b.WriteString("\n## Past failures on these files (the Archivalist): do not repeat them\n\n")
		}
		fmt.Fprintf(&b, "- %s (%s, %s):\n  %s\n", e.GetTitle(), e.GetName(), e.GetCreateTime().AsTime().UTC().Format("2006-01-02"),
			textsearch.Truncate(strings.Join(strings.Fields(failureGist(e.GetContent())), " "), maxPastFailureBytes))
		if n++; n == maxPastFailures {
			break
		}
	}
	return b.String()
}

// failureGist is a failure record's first line (which says whether a
// later attempt recovered) and its error, or, when it has none, its error
// signature (the line its output ended with).
func failureGist(content string) string {
	first, _, _ := strings.Cut(content, "\n")
	if _, after, ok := strings.Cut(content, "## Error\n"); ok {
		errText, _, _ := strings.Cut(strings.TrimSpace(after), "\n## ")
		return first + " Error: " + errText
	}
	if m := failureSignatureLine.FindStringSubmatch(content); m != nil {
		return first + " Cause: " + m[1]
	}
	return first
}

// sharesFile says whether a and b name a file in common (by path, or by
// a path's end).
func sharesFile(a, b []string) bool {
	for _, f := range a {
		f = strings.TrimSpace(f)
		for _, g := range b {
			if f != "" && (f == g || path.Base(f) == path.Base(g) && (strings.HasSuffix(f, "/"+g) || strings.HasSuffix(g, "/"+f))) {
				return true
			}
		}
	}
	return false
}

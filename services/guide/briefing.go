package guide

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Session briefings (spec E-09). A session that starts or resumes on a
// repository, or is moved to one, is told what the tenant's recent history
// says about it: the failures, decisions and runs the Archivalist filed
// under that repository in the last 7 days ("recently", spec A-35), newest
// first. It is a structured list, not a model's text, and is published
// only when there is something to say. The Archivalist is asked as the
// session's user (who sees the shared history and their own runs), within
// PreRouteTimeout; a briefing it cannot give is logged, not published.

// Bounds of a briefing.
const (
	briefingWindow   = 7 * 24 * time.Hour
	briefingEntries  = 50
	briefingPerKind  = 5
	briefingSummary  = 200
	categoryFailure  = "failure"
	categoryDecision = "decision"
	categoryWorkflow = "architect_workflow"
)

// briefSession publishes the briefing of sess on its repository, if any;
// why says what started it ("created", "resumed", "repository").
func (s *Service) briefSession(ctx context.Context, sess session, why string) {
	if sess.Repository == "" || s.archivalist == nil {
		return
	}
	b, err := s.briefing(ctx, sess)
	if err != nil {
		s.log.WarnContext(ctx, "brief the session", slog.String(logx.KeySessionID, sess.ID), logx.Err(err))
		return
	}
	if len(b.GetFailures())+len(b.GetDecisions())+len(b.GetRuns()) == 0 {
		return
	}
	ev := newEvent(eventv1.EventType_EVENT_TYPE_SESSION_BRIEFING, sess.ID, "", briefingText(b))
	ev.Payload = &eventv1.Event_Briefing{Briefing: b}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	id := fmt.Sprintf("%s.briefing.%s.%d", sess.ID, why, sess.UpdateTime.UnixNano())
	if err := s.publishEvent(pctx, sess.TenantID, id, ev); err != nil {
		s.log.WarnContext(ctx, "publish the session briefing", slog.String(logx.KeySessionID, sess.ID), logx.Err(err))
	}
}

// briefing asks the Archivalist for the last 7 days of sess's repository.
func (s *Service) briefing(ctx context.Context, sess session) (*eventv1.SessionBriefing, error) {
	who := identity.Identity{TenantID: sess.TenantID, UserID: sess.UserID, Role: identity.RoleViewer}
	cctx, cancel := context.WithTimeout(consult.WithCaller(identity.AppendOutgoing(ctx, who), topology.AgentGuide), s.cfg.PreRouteTimeout)
	defer cancel()
	since := s.now().Add(-briefingWindow)
	resp, err := s.archivalist.ListEntries(cctx, &archivalistv1.ListEntriesRequest{Repository: sess.Repository,
		Since: timestamppb.New(since), PageSize: briefingEntries})
	if err != nil {
		return nil, fmt.Errorf("list the repository's recent entries: %w", err)
	}
	b := &eventv1.SessionBriefing{Repository: sess.Repository, Since: timestamppb.New(since)}
	for _, e := range resp.GetEntries() {
		var list *[]*eventv1.BriefingItem
		switch e.GetCategory() {
		case categoryFailure:
			list = &b.Failures
		case categoryDecision:
			list = &b.Decisions
		case categoryWorkflow:
			list = &b.Runs
		default:
			continue
		}
		if len(*list) < briefingPerKind {
			*list = append(*list, &eventv1.BriefingItem{Entry: e.GetName(), Title: e.GetTitle(), Category: e.GetCategory(),
				CreateTime: e.GetCreateTime(), Summary: truncate(strings.Join(strings.Fields(e.GetContent()), " "), briefingSummary)})
		}
	}
	return b, nil
}

// briefingText is a briefing for a person reading the stream.
func briefingText(b *eventv1.SessionBriefing) string {
	var parts []string
	add := func(what string, items []*eventv1.BriefingItem) {
		if len(items) == 0 {
			return
		}
		titles := make([]string, len(items))
		for i, it := range items {
			titles[i] = fmt.Sprintf("%q", truncate(it.GetTitle(), 100))
		}
		parts = append(parts, fmt.Sprintf("%d %s: %s", len(items), what, strings.Join(titles, "; ")))
	}
	add("recent failures", b.GetFailures())
	add("decisions", b.GetDecisions())
	add("runs", b.GetRuns())
	return fmt.Sprintf("Recent history of %s (the last 7 days, from the archive; no model wrote this): %s.", b.GetRepository(),
		strings.Join(parts, ". "))
}

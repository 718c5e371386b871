package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/textsearch"
)

// decisionLogTitle starts a run's decision log (spec H-07).
const decisionLogTitle = "# Implementation Log\n\n"

// ListDecisions returns a run's decision log: one entry per finished task
// attempt, in the order they finished, each with the task's structured
// report when it is the node's latest attempt, and, for a run that ended
// with nodes that changed nothing, its outcome.
func (s *Service) ListDecisions(ctx context.Context, req *orchestratorv1.ListDecisionsRequest) (_ *orchestratorv1.ListDecisionsResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "list decisions", err) }()
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(req.GetName())
	if err != nil {
		return nil, err
	}
	if err := s.checkRun(ctx, who, id); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT a.node_id, a.attempt, a.section, CASE WHEN n.attempt = a.attempt THEN n.report ELSE '' END
		FROM attempts a LEFT JOIN nodes n ON n.tenant_id = a.tenant_id AND n.run_id = a.run_id AND n.node_id = a.node_id
		WHERE a.tenant_id = $1 AND a.run_id = $2 AND a.section <> '' ORDER BY a.seq`, who.TenantID, id)
	if err != nil {
		return nil, fmt.Errorf("read decision log: %w", err)
	}
	resp := &orchestratorv1.ListDecisionsResponse{}
	var node, section, report string
	var attempt int32
	var log strings.Builder
	log.WriteString(decisionLogTitle)
	if _, err := pgx.ForEachRow(rows, []any{&node, &attempt, &section, &report}, func() error {
		e := &orchestratorv1.DecisionEntry{NodeId: node, Attempt: attempt, Section: section}
		if report != "" {
			e.Report = &orchestratorv1.TaskReport{}
			_ = protojson.Unmarshal([]byte(report), e.Report)
		}
		log.WriteString(section)
		resp.Entries = append(resp.Entries, e)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read decision log: %w", err)
	}
	state, changes, err := loadRunChanges(ctx, s.db, who.TenantID, id) // outcome.go
	if err != nil {
		return nil, fmt.Errorf("read decision log: %w", err)
	}
	log.WriteString(outcomeSection(state, changes))
	resp.Log = log.String()
	return resp, nil
}

// decisionSection is a task's entry in the run's decision log (spec H-07),
// from its result as stored, its structured report (nil: a task that
// reported none) and the number of git calls it made.
func decisionSection(nodeID string, attempt int32, res nodeResult, rep *orchestratorv1.TaskReport, gitCalls int) string {
	orNone := func(s string) string {
		if strings.TrimSpace(s) == "" {
			return "none"
		}
		return s
	}
	files := "none"
	if len(rep.GetFilesChanged()) > 0 {
		files = strings.Join(rep.GetFilesChanged(), ", ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Task %s (attempt %d): %s\n\n", nodeID, attempt, strings.ToLower(res.State))
	if res.State == stateNoChanges {
		fmt.Fprintf(&b, "- No changes: %s\n", res.Error)
	}
	fmt.Fprintf(&b, "- Implemented: %s\n- Tested: %s\n- Files changed: %s\n- Decisions: %s\n- Deviations: %s\n- Concerns: %s\n",
		orNone(rep.GetImplemented()), orNone(rep.GetTested()), files, orNone(rep.GetDecisions()), orNone(rep.GetDeviations()), orNone(rep.GetConcerns()))
	if gitCalls > 0 {
		fmt.Fprintf(&b, "- Git calls: %d\n", gitCalls)
	}
	if rep.GetBriefing() != "" {
		fmt.Fprintf(&b, "- Briefing: %s\n", rep.GetBriefing())
	}
	if a := rep.GetActivity(); a != nil {
		fmt.Fprintf(&b, "- Agent: %s\n", activityLine(a))
	}
	return b.String() + "\n"
}

// activityLine is what a task's agent did, in a line: its turns, tool
// calls, tokens and why it stopped.
func activityLine(a *orchestratorv1.AgentActivity) string {
	var b strings.Builder
	if a.GetModel() != "" {
		fmt.Fprintf(&b, "%s, ", a.GetModel())
	}
	fmt.Fprintf(&b, "%d turn(s), %d tool call(s), %d tokens in, %d out", a.GetTurns(), a.GetToolCallCount(), a.GetInputTokens(), a.GetOutputTokens())
	if a.GetReverts() > 0 {
		fmt.Fprintf(&b, ", %d revert(s)", a.GetReverts())
	}
	stop := a.GetStopReason()
	if stop == "" {
		stop = "unknown"
	}
	fmt.Fprintf(&b, "; stopped: %s", stop)
	if d := strings.TrimSpace(a.GetStopDetail()); d != "" {
		fmt.Fprintf(&b, " (%s)", textsearch.Clip(oneLine(d), maxActivityDetail))
	}
	return b.String()
}

// maxActivityDetail bounds the stop detail quoted in the decision log.
const maxActivityDetail = 300

// oneLine is s with its line breaks as spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

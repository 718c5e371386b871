package orchestrator

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
)

// decisionLogTitle starts a run's decision log (spec H-07).
const decisionLogTitle = "# Implementation Log\n\n"

// ListDecisions returns a run's decision log: one entry per finished task
// attempt, in the order they finished, each with the task's structured
// report when it is the node's latest attempt.
func (s *Service) ListDecisions(ctx context.Context, req *orchestratorv1.ListDecisionsRequest) (*orchestratorv1.ListDecisionsResponse, error) {
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
		return nil, s.internal(ctx, "read decision log", err)
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
		return nil, s.internal(ctx, "read decision log", err)
	}
	resp.Log = log.String()
	return resp, nil
}

package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/textsearch"
	"sylk.dev/sylk/pkg/topology"
)

// Stage checkpoints (spec F-22 inspector_findings, tester_summary). When a
// pipeline ends (completed or failed, not handed off), the Inspector's
// findings and the Tester's summary go to the Archivalist, each under its
// category, so that later sessions can ask what a task's checks found. The
// spec takes these checkpoints at 85% of each stage's context; here the
// Inspector and the Tester are the detected tools, with no conversation,
// so each is taken when its state is final. A stage that never ran (the
// pipeline failed before it, or the user skipped it) stores nothing.

// Archivalist categories of the stage checkpoints.
const (
	CategoryInspectorFindings = "inspector_findings"
	CategoryTesterSummary     = "tester_summary"
)

// checkpoint sends a finished pipeline's stage checkpoints. A record that
// cannot be sent is logged and lost; the task's result is not held back.
func (pr *pipelineRun) checkpoint(ctx context.Context, p *orchestratorv1.PipelineStatus) {
	if pr.s.bus == nil {
		return // a worker without a bus runs tasks directly (tests)
	}
	id := pipeline.ID(pr.d.GetRunId(), pr.d.GetNodeId(), pr.d.GetAttempt())
	record := func(source, category, title string, write func(*strings.Builder)) *messagev1.Envelope {
		var b strings.Builder
		fmt.Fprintf(&b, "# %s\n\n- Pipeline: %s\n- Loops: %d of %d\n- Pipeline state: %s\n", title, id, p.GetLoops(), p.GetMaxLoops(), p.GetState())
		write(&b)
		return topology.StoreRequest(topology.Record{ID: id + ":" + category, Tenant: pr.d.GetTenantId(), Session: pr.d.GetSessionId(),
			User: pr.d.GetUserId(), Correlation: "runs/" + pr.d.GetRunId(), Source: source, Category: category, Title: title, Text: textsearch.Clip(b.String(), topology.MaxRecordBytes)})
	}
	var recs []*messagev1.Envelope
	if len(pr.findings) > 0 {
		in := pr.inspectorState()
		recs = append(recs, record(topology.RoleInspector, CategoryInspectorFindings, fmt.Sprintf("Inspector findings of %s: %s", id, in.GetValidationState()),
			func(b *strings.Builder) { pipeline.InspectorText(b, in) }))
	}
	if p.GetLastTestResult() != nil {
		var changed []string
		if pr.wsp != nil {
			changed, _ = pr.wsp.changedFiles(ctx)
		}
		t := pr.testerState(p, changed)
		recs = append(recs, record(topology.RoleTester, CategoryTesterSummary, fmt.Sprintf("Tester summary of %s: %s", id, passWord(p.GetTesterPassed())),
			func(b *strings.Builder) { pipeline.TesterText(b, t) }))
	}
	for _, env := range recs {
		if _, err := pr.s.bus.Publish(ctx, topology.InboxSubject(pr.s.bus, topology.AgentArchivalist), env.GetId(), env); err != nil {
			pr.s.log.WarnContext(ctx, "send a stage checkpoint to the archivalist", slog.String("category", env.GetStoreRequest().GetCategory()),
				logx.KeyRunID, pr.d.GetRunId(), logx.KeyNodeID, pr.d.GetNodeId(), logx.Err(err))
		}
	}
}

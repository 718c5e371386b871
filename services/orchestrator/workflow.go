package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/textsearch"
	"sylk.dev/sylk/pkg/topology"
)

// Workflow checkpoints (spec F-22 architect_workflow). When a run ends, its
// workflow's state is stored in the Archivalist: the DAG summary (id, total
// and completed nodes, current layer, execution order) and the completed,
// pending and blocked tasks, so that later sessions can ask what a run did
// and where it stopped. The spec takes this checkpoint when the Architect's
// context reaches 85%; here the Architect keeps no conversation (each plan
// is one call) and the workflow's state lives in the Orchestrator, so the
// checkpoint is taken when that state is final: each time the run ends (a
// run retried after a failure ends again, with a checkpoint of its own).

// CategoryArchitectWorkflow is the Archivalist category of workflow
// checkpoints.
const CategoryArchitectWorkflow = "architect_workflow"

// Bounds of a workflow checkpoint: the first entries of each list (the
// rest are counted), each entry cut to its byte bound.
const (
	maxWorkflowItems     = 50
	maxWorkflowItemBytes = 1000
)

type workflowNode struct {
	id, state, err string
	layer, attempt int32
	exitCode       int32
	userSkipped    bool
}

// workflowCheckpoint builds the Archivalist record of a run that ended in
// state; id is the completion's event id, which the record's id derives
// from, so that a re-sent record is a duplicate.
func workflowCheckpoint(ctx context.Context, q querier, tenant, session, user, runID, state, id string) (*messagev1.Envelope, error) {
	rows, err := q.Query(ctx, `SELECT node_id, layer, state, error, attempt, exit_code, user_skipped FROM nodes
		WHERE tenant_id = $1 AND run_id = $2 ORDER BY layer, position`, tenant, runID)
	if err != nil {
		return nil, err
	}
	var nodes []workflowNode
	var n workflowNode
	if _, err := pgx.ForEachRow(rows, []any{&n.id, &n.layer, &n.state, &n.err, &n.attempt, &n.exitCode, &n.userSkipped}, func() error {
		nodes = append(nodes, n)
		return nil
	}); err != nil {
		return nil, err
	}
	return archivalistRecord(tenant, session, user, runID, id+":workflow", CategoryArchitectWorkflow,
		fmt.Sprintf("Workflow of %s (%s)", runName(runID), strings.ToLower(state)), workflowText(runID, state, nodes)), nil
}

// workflowText renders a checkpoint as markdown.
func workflowText(runID, state string, nodes []workflowNode) string {
	var done, pending, blocked []string
	var layers [][]string
	current := int32(-1)
	for _, n := range nodes {
		for int(n.layer) >= len(layers) {
			layers = append(layers, nil)
		}
		layers[n.layer] = append(layers[n.layer], n.id)
		switch {
		case n.state == stateSucceeded:
			done = append(done, n.id)
		case n.state == stateNoChanges:
			done = append(done, n.id+": changed nothing: "+reasonText(n.err))
		case n.state == statePending || n.state == stateDispatched:
			pending = append(pending, n.id)
		case n.state == stateSkipped && n.userSkipped:
			blocked = append(blocked, n.id+": skipped by the user; its dependents went on")
		case n.state == stateSkipped:
			blocked = append(blocked, n.id+": skipped, a dependency did not succeed")
		case n.attempt == 0:
			blocked = append(blocked, fmt.Sprintf("%s: %s before it ran", n.id, strings.ToLower(n.state)))
		default:
			why := fmt.Sprintf("%s: %s after %d attempt(s)", n.id, strings.ToLower(n.state), n.attempt)
			if n.err != "" {
				why += ": " + n.err
			} else if n.exitCode != 0 {
				why += fmt.Sprintf(", exit code %d", n.exitCode)
			}
			blocked = append(blocked, why)
		}
		if !metForDependents(n.state) && current < 0 {
			current = n.layer
		}
	}
	if current < 0 {
		current = int32(max(len(layers)-1, 0))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Workflow of %s: %s\n\n", runName(runID), strings.ToLower(state))
	fmt.Fprintf(&b, "DAG summary:\n- ID: %s\n- Total nodes: %d\n- Completed nodes: %d\n", runName(runID), len(nodes), len(done))
	if len(layers) > 0 {
		fmt.Fprintf(&b, "- Current layer: %d of %d\n", current+1, len(layers))
	}
	order := make([]string, len(layers))
	for i, l := range layers {
		order[i] = fmt.Sprintf("layer %d: %s", i+1, strings.Join(l, ", "))
	}
	// What needs attention first: a checkpoint past the Archivalist's
	// content bound loses its tail.
	workflowList(&b, "Blocked tasks", blocked)
	workflowList(&b, "Pending tasks", pending)
	workflowList(&b, "Completed tasks", done)
	workflowList(&b, "Execution order", order)
	return textsearch.Clip(b.String(), topology.MaxRecordBytes)
}

// workflowList writes the first entries of a list and counts the rest.
func workflowList(b *strings.Builder, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s (%d):\n", title, len(items))
	for _, x := range items[:min(len(items), maxWorkflowItems)] {
		fmt.Fprintf(b, "- %s\n", textsearch.Clip(x, maxWorkflowItemBytes))
	}
	if len(items) > maxWorkflowItems {
		fmt.Fprintf(b, "- … and %d more\n", len(items)-maxWorkflowItems)
	}
}

// archivalistRecord is a STORE_REQUEST for the Archivalist about a run.
func archivalistRecord(tenant, session, user, runID, id, category, title, text string) *messagev1.Envelope {
	return topology.StoreRequest(topology.Record{ID: id, Tenant: tenant, Session: session, User: user, Correlation: runName(runID),
		Source: topology.AgentOrchestrator, Category: category, Title: title, Text: text})
}

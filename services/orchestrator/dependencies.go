package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
)

// Dependencies' changes (spec T-10). A node of a repository run starts from
// the run's base commit with the patches of every node it depends on,
// directly or not, applied in the order the run's result merges them
// (keptPatchSQL: the succeeded nodes' patches, by layer and position), and
// its own patch is taken from there. The merge applies each patch on top of
// those before it on the base commit, so each one finds the files it was
// made from. A retry gets the same patches: they are read from the
// dependencies' rows at each dispatch, and a node's dependencies have all
// ended before it runs.

// dependencyInputsSQL reads what the dependencies of the nodes about to be
// dispatched ($3) pass on to them: for every node they depend on, directly
// or not, its patch when the run keeps it, with the dispatched nodes it is
// for (targets), and, when $4, the stdout of the direct dependencies; in
// topological order. It replaces the stdouts query for repository runs, so
// a dispatch costs no extra round trip.
//
// It walks depends_on, each step a primary-key lookup per node reached
// (edges are keyed for the other direction, from a node to its dependents).
const dependencyInputsSQL = `WITH RECURSIVE anc(target, node_id, direct) AS (
			SELECT n.node_id, d.id, true FROM nodes n, unnest(n.depends_on) AS d(id)
			WHERE n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = ANY($3)
			UNION
			SELECT a.target, d.id, false FROM anc a
				JOIN nodes n ON n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = a.node_id, unnest(n.depends_on) AS d(id)),
		want AS (SELECT node_id, bool_or(direct) AS direct, array_agg(DISTINCT target) AS targets FROM anc GROUP BY node_id)
	SELECT n.node_id, CASE WHEN $4 AND w.direct THEN n.stdout ELSE '' END,
		CASE WHEN ` + keptPatchSQL + ` THEN n.patch ELSE '' END, w.targets
	FROM want w JOIN nodes n ON n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = w.node_id
	WHERE ($4 AND w.direct) OR (` + keptPatchSQL + `)
	ORDER BY n.layer, n.position`

// dependencyInputs loads, for nodes about to be dispatched, their
// dependencies' patches (in the order they apply) and, with outputs, the
// stdout of their direct dependencies.
func dependencyInputs(ctx context.Context, q querier, tenant, runID string, nodeIDs []string, outputs bool) (map[string]string,
	map[string][]*taskv1.DependencyPatch, error) {
	rows, err := q.Query(ctx, dependencyInputsSQL, tenant, runID, nodeIDs, outputs)
	if err != nil {
		return nil, nil, err
	}
	stdout := map[string]string{}
	patches := map[string][]*taskv1.DependencyPatch{}
	var id, out, patch string
	var targets []string
	_, err = pgx.ForEachRow(rows, []any{&id, &out, &patch, &targets}, func() error {
		if out != "" {
			stdout[id] = out
		}
		if patch == "" {
			return nil
		}
		// Shared by the dispatches it is for: messages only read it.
		p := &taskv1.DependencyPatch{NodeId: id, Patch: patch}
		for _, t := range targets {
			patches[t] = append(patches[t], p)
		}
		return nil
	})
	return stdout, patches, err
}

// dispatchSlack is the room a dispatch leaves in a bus message for its
// headers (message id, trace context).
const dispatchSlack = 8 << 10

// withDependencyPatches adds a node's dependencies' patches to its dispatch
// d, or says why they cannot go with it: together they exceed
// -orchestrator.max-dependency-patch-bytes, or the dispatch would not fit
// in one bus message.
func (s *Service) withDependencyPatches(d *taskv1.TaskDispatch, ps []*taskv1.DependencyPatch) string {
	total := 0
	for _, p := range ps {
		total += len(p.GetPatch())
	}
	if total > s.cfg.MaxDependencyPatchBytes {
		return fmt.Sprintf("not dispatched: the patches of the %d node(s) it depends on total %d bytes, over the limit of %d "+
			"(-orchestrator.max-dependency-patch-bytes)", len(ps), total, s.cfg.MaxDependencyPatchBytes)
	}
	d.DependencyPatches = ps
	if room := int(s.bus.Conn.MaxPayload()) - dispatchSlack; room > 0 {
		if size := proto.Size(d); size > room {
			d.DependencyPatches = nil
			return fmt.Sprintf("not dispatched: with the %d bytes of patches of the node(s) it depends on, its task of %d bytes exceeds "+
				"the %d a bus message may hold (the NATS server's max_payload, less %d for headers)", total, size, room+dispatchSlack, dispatchSlack)
		}
	}
	return ""
}

// refusedTask is a node attempt marked DISPATCHED whose task could not be
// sent, and why.
type refusedTask struct {
	node    string
	attempt int32
	reason  string
}

// failRefusedSQL fails refused attempts still DISPATCHED, with their
// history rows and decision log sections, and returns those it failed.
const failRefusedSQL = `WITH r AS (
			SELECT * FROM unnest($3::text[], $4::int4[], $5::text[], $6::text[]) AS r(node_id, attempt, error, section)),
		upd AS (
			UPDATE nodes n SET state = 'FAILED', exit_code = -1, error = r.error, end_time = now(), not_before = NULL
			FROM r
			WHERE n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = r.node_id AND n.attempt = r.attempt AND n.state = 'DISPATCHED'
			RETURNING n.node_id, n.attempt, r.error, r.section),
		history AS (
			INSERT INTO attempts (tenant_id, run_id, node_id, attempt, state, exit_code, error, section)
			SELECT $1, $2, node_id, attempt, 'FAILED', -1, error, section FROM upd
			ON CONFLICT DO NOTHING)
	SELECT node_id, attempt, error FROM upd`

// failRefused fails the nodes whose tasks could not be sent, for good: a
// retry would carry the same dependencies' patches. Their failure is
// announced, their slots given back, and the run moves on in a decision of
// its own once this one is carried out (their dependents are skipped, or
// the run ends).
func (s *Service) failRefused(ctx context.Context, q querier, run *runRow, refused []refusedTask, eff *effects) error {
	n := len(refused)
	nodes, attempts, reasons, sections := make([]string, n), make([]int32, n), make([]string, n), make([]string, n)
	for i, r := range refused {
		nodes[i], attempts[i], reasons[i] = r.node, r.attempt, r.reason
		sections[i] = fmt.Sprintf("## Task %s (attempt %d): failed\n\n- %s\n\n", r.node, r.attempt, upperFirst(r.reason))
	}
	rows, err := q.Query(ctx, failRefusedSQL, run.TenantID, run.ID, nodes, attempts, reasons, sections)
	if err != nil {
		return fmt.Errorf("fail undispatchable nodes: %w", err)
	}
	var node, reason string
	var attempt int32
	_, err = pgx.ForEachRow(rows, []any{&node, &attempt, &reason}, func() error {
		eff.event(fmt.Sprintf("%s:%s:%d:completed", run.ID, node, attempt), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED, run.ID,
			fmt.Sprintf("node %s failed: %s", node, reason),
			&eventv1.NodeEvent{Node: node, Attempt: attempt, State: orchestratorv1.NodeState_NODE_STATE_FAILED, ExitCode: -1, Error: reason}))
		if s.slots != nil {
			eff.release = append(eff.release, slotMember(run.TenantID, run.ID, node, attempt))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fail undispatchable nodes: %w", err)
	}
	now := time.Now()
	eff.wakeAt = &now
	return nil
}

// upperFirst is s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

// failFastReason is the error of a node fail_fast cancelled; it tells those
// nodes from the ones a user cancelled.
const failFastReason = "cancelled by fail_fast: another node failed"

// cancelForFailFast cancels pending nodes under fail_fast.
func cancelForFailFast(ctx context.Context, tx pgx.Tx, tenant, runID string, nodeIDs []string) error {
	_, err := tx.Exec(ctx, `UPDATE nodes SET state = 'CANCELLED', end_time = now(), error = $4
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND state = 'PENDING'`, tenant, runID, nodeIDs, failFastReason)
	return err
}

// reopenNode runs a failed node, or one that changed nothing, again (spec
// F-11's options): the node goes back to PENDING with its spec changed, the
// dependents its failure skipped and the nodes fail_fast cancelled become
// pending again (fail_fast cancels them anew while another node stays
// failed, except the node itself and those downstream of it), and a run
// that had ended runs again (owned by this replica). Nodes a user cancelled
// stay cancelled. A node that changed nothing was met for its dependents:
// it is unmet again until it ends anew (those that already ran keep what
// they did).
func (s *Service) reopenNode(ctx context.Context, tenant, runID, nodeID string, act orchestratorv1.TaskActionType, mutate func(*orchestratorv1.Node)) error {
	_, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		var st string
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT state, spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
			tenant, runID, nodeID).Scan(&st, &raw); err != nil {
			return err
		}
		if st != stateFailed && st != stateNoChanges {
			return errNodeNotFailed.Withf("node %s is %s: only a failed node or one that changed nothing runs again", nodeID, strings.ToLower(st))
		}
		if run.State == stateCancelled {
			return errRunCancelled.Withf("run %s was cancelled", runName(runID))
		}
		b, err := changedSpec(ctx, tx, tenant, runID, nodeID, raw, mutate) // taskaction.go
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET state = 'PENDING', spec = $4, not_before = NULL, paused = false, end_time = NULL
			WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, tenant, runID, nodeID, b); err != nil {
			return err
		}
		if st == stateNoChanges {
			// Its next end unblocks them again (recordResultsSQL).
			if _, err := tx.Exec(ctx, `UPDATE nodes d SET unmet_deps = d.unmet_deps + 1
				FROM edges e
				WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.node_id = $3
					AND d.tenant_id = $1 AND d.run_id = $2 AND d.node_id = e.dependent_id`, tenant, runID, nodeID); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `WITH RECURSIVE dep(node_id) AS (
				SELECT dependent_id FROM edges WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3
				UNION SELECT e.dependent_id FROM edges e JOIN dep ON e.node_id = dep.node_id WHERE e.tenant_id = $1 AND e.run_id = $2)
			UPDATE nodes SET state = 'PENDING', end_time = NULL
			WHERE tenant_id = $1 AND run_id = $2 AND node_id IN (SELECT node_id FROM dep) AND state = 'SKIPPED'`, tenant, runID, nodeID); err != nil {
			return err
		}
		if err := reviveFailFast(ctx, tx, tenant, runID); err != nil {
			return err
		}
		// The node and everything downstream of it run even while another
		// node stays failed under fail_fast: the user asked for them.
		if _, err := tx.Exec(ctx, `WITH RECURSIVE dep(node_id) AS (
				SELECT $3::text
				UNION SELECT e.dependent_id FROM edges e JOIN dep ON e.node_id = dep.node_id WHERE e.tenant_id = $1 AND e.run_id = $2)
			UPDATE nodes SET user_reopened = true
			WHERE tenant_id = $1 AND run_id = $2 AND node_id IN (SELECT node_id FROM dep)`, tenant, runID, nodeID); err != nil {
			return err
		}
		if err := s.reopenRun(ctx, tx, run); err != nil {
			return err
		}
		eff.event(fmt.Sprintf("%s:%s:reopened:%s", runID, nodeID, ids.New()), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_REOPENED, runID,
			fmt.Sprintf("node %s runs again (%s)", nodeID, actionWord(act)),
			&eventv1.NodeEvent{Node: nodeID, State: orchestratorv1.NodeState_NODE_STATE_PENDING, Action: actionWord(act)}))
		return s.advance(ctx, tx, run, eff)
	})
	if err != nil {
		return fmt.Errorf("reopen node: %w", err)
	}
	return nil
}

// reviveFailFast makes the nodes fail_fast cancelled pending again.
func reviveFailFast(ctx context.Context, tx pgx.Tx, tenant, runID string) error {
	_, err := tx.Exec(ctx, `UPDATE nodes SET state = 'PENDING', end_time = NULL, error = ''
		WHERE tenant_id = $1 AND run_id = $2 AND state = 'CANCELLED' AND error = $3`, tenant, runID, failFastReason)
	return err
}

// reopenRun makes an ended run run again, owned by this replica.
func (s *Service) reopenRun(ctx context.Context, tx pgx.Tx, run *runRow) error {
	if !terminalRun(run.State) {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'RUNNING', end_time = NULL, lease_owner = $3,
			lease_expires = now() + $4 * interval '1 microsecond', result_patch = '', merge_conflicts = '{}', session_check = '',
			delivery = '', reopened = reopened + 1
		WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID, s.cfg.ReplicaID, s.newLeaseTTL().Microseconds()); err != nil {
		return err
	}
	run.State = stateRunning
	return nil
}

// userSkipReason is the error of a node the user went on without.
const userSkipReason = "skipped by the user"

// skipNode goes on without a failed or pending node (spec H-01: retry or
// skip). The node ends SKIPPED and counts as met: its dependents lose it
// as an unmet dependency, those its failure skipped become pending again,
// and so do the nodes fail_fast cancelled (fail_fast cancels them anew
// while another node stays failed). A run that had ended runs again.
func (s *Service) skipNode(ctx context.Context, who identity.Identity, runID, nodeID, message string) error {
	tenant := who.TenantID
	reason := userSkipReason
	if m := strings.TrimSpace(message); m != "" {
		reason += ": " + m
	}
	_, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		if run.State == stateCancelled {
			return errRunCancelled.Withf("run %s was cancelled", runName(runID))
		}
		tag, err := tx.Exec(ctx, `UPDATE nodes SET state = 'SKIPPED', user_skipped = true, error = $4, end_time = now(), not_before = NULL
			WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3 AND state IN ('FAILED', 'PENDING')`, tenant, runID, nodeID, reason)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errNodeNotFailed.Withf("node %s is no longer failed or pending", nodeID)
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes d SET unmet_deps = d.unmet_deps - 1
			FROM edges e
			WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.node_id = $3
				AND d.tenant_id = $1 AND d.run_id = $2 AND d.node_id = e.dependent_id`, tenant, runID, nodeID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `WITH RECURSIVE dep(node_id) AS (
				SELECT dependent_id FROM edges WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3
				UNION SELECT e.dependent_id FROM edges e JOIN dep ON e.node_id = dep.node_id WHERE e.tenant_id = $1 AND e.run_id = $2)
			UPDATE nodes SET state = 'PENDING', end_time = NULL
			WHERE tenant_id = $1 AND run_id = $2 AND node_id IN (SELECT node_id FROM dep) AND state = 'SKIPPED' AND NOT user_skipped`,
			tenant, runID, nodeID); err != nil {
			return err
		}
		if err := reviveFailFast(ctx, tx, tenant, runID); err != nil {
			return err
		}
		if err := s.reopenRun(ctx, tx, run); err != nil {
			return err
		}
		eff.event(fmt.Sprintf("%s:%s:user-skipped:%s", runID, nodeID, ids.New()), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED, runID,
			"node "+nodeID+" skipped by "+who.UserID, &eventv1.NodeEvent{Node: nodeID, State: orchestratorv1.NodeState_NODE_STATE_SKIPPED, User: who.UserID}))
		return s.advance(ctx, tx, run, eff)
	})
	if err != nil {
		return fmt.Errorf("skip node: %w", err)
	}
	return nil
}

package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"sylk.dev/sylk/pkg/textsearch"
)

// What a run changed. A node whose agent was asked to change the code and
// changed nothing ends NO_CHANGES (the worker says why); its dependents run
// as after a success. A run whose nodes all ended without a failure ends
// NO_CHANGES when at least one node changed nothing and none succeeded
// with a patch: it delivers nothing, so it is neither merged nor checked,
// and its completion and decision log say why. Otherwise it succeeds, and
// says how many of its nodes changed nothing.

// noChange is a node that ended NO_CHANGES, and why.
type noChange struct{ node, reason string }

// runChanges is what a run's nodes changed.
type runChanges struct {
	// nodes counts the run's nodes; unchanged are its NO_CHANGES nodes in
	// topological order.
	nodes     int
	unchanged []noChange
	// changed: a node succeeded with a patch.
	changed bool
}

// loadRunChanges reads what a run's nodes changed, and the run's state.
func loadRunChanges(ctx context.Context, q querier, tenant, runID string) (state string, c runChanges, err error) {
	var ids, reasons []string
	err = q.QueryRow(ctx, `SELECT r.state, count(n.node_id),
			coalesce(array_agg(n.node_id ORDER BY n.layer, n.position) FILTER (WHERE n.state = 'NO_CHANGES'), '{}'),
			coalesce(array_agg(n.error ORDER BY n.layer, n.position) FILTER (WHERE n.state = 'NO_CHANGES'), '{}'),
			EXISTS (SELECT 1 FROM nodes k WHERE k.tenant_id = $1 AND k.run_id = $2 AND `+keptPatchSQL+`)
		FROM runs r LEFT JOIN nodes n ON n.tenant_id = r.tenant_id AND n.run_id = r.id
		WHERE r.tenant_id = $1 AND r.id = $2 GROUP BY r.state`, tenant, runID).Scan(&state, &c.nodes, &ids, &reasons, &c.changed)
	if err != nil {
		return "", c, err
	}
	for i, id := range ids {
		c.unchanged = append(c.unchanged, noChange{node: id, reason: reasons[i]})
	}
	return state, c, nil
}

// changesOf is runChanges of loaded nodes (in DAG order).
func changesOf(nodes []nodeRow) runChanges {
	c := runChanges{nodes: len(nodes)}
	for _, n := range nodes {
		switch {
		case n.State == stateNoChanges:
			c.unchanged = append(c.unchanged, noChange{node: n.NodeID, reason: n.Error})
		case n.State == stateSucceeded && n.Patch != "":
			c.changed = true
		}
	}
	return c
}

// endState is the state of a run whose nodes all ended and all met their
// dependents (none failed, none was cancelled).
func (c runChanges) endState() string {
	if len(c.unchanged) > 0 && !c.changed {
		return stateNoChanges
	}
	return stateSucceeded
}

// Bounds of the reasons a completion event and the decision log quote.
const (
	maxReasonBytes    = 300
	maxEventReasons   = 10
	maxOutcomeReasons = 50
)

// reasons lists the nodes that changed nothing with why, in a line: the
// first limit of them, the rest counted.
func (c runChanges) reasons(limit int) string {
	parts := make([]string, 0, min(len(c.unchanged), limit)+1)
	for i, u := range c.unchanged {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more", len(c.unchanged)-limit))
			break
		}
		parts = append(parts, u.node+": "+reasonText(u.reason))
	}
	return strings.Join(parts, "; ")
}

// reasonText is a node's reason for changing nothing, in a bounded line.
func reasonText(r string) string {
	r = oneLine(r)
	if r == "" {
		return "no reason given"
	}
	return textsearch.Clip(r, maxReasonBytes)
}

// completionText is what a run's completion event says, for a run that
// ended in state with changes c.
func completionText(runID, state string, c runChanges) string {
	switch {
	case state == stateNoChanges:
		return fmt.Sprintf("run %s changed nothing: %s", runName(runID), c.reasons(maxEventReasons))
	case state == stateSucceeded && len(c.unchanged) > 0:
		return fmt.Sprintf("run %s succeeded; %d of %d nodes changed nothing: %s", runName(runID), len(c.unchanged), c.nodes,
			c.reasons(maxEventReasons))
	}
	return "run " + runName(runID) + " " + strings.ToLower(state)
}

// outcomeSection ends the decision log of a run that ended in state: what
// it did not change, and why ("" when it has nothing to say).
func outcomeSection(state string, c runChanges) string {
	if len(c.unchanged) == 0 || (state != stateSucceeded && state != stateNoChanges) {
		return ""
	}
	var b strings.Builder
	if state == stateNoChanges {
		b.WriteString("## Outcome: nothing was changed\n\nNo task changed the code, so the run has no result patch. Why:\n\n")
	} else {
		fmt.Fprintf(&b, "## Outcome: %d of %d nodes changed nothing\n\n", len(c.unchanged), c.nodes)
	}
	for i, u := range c.unchanged {
		if i == maxOutcomeReasons {
			fmt.Fprintf(&b, "- and %d more\n", len(c.unchanged)-maxOutcomeReasons)
			break
		}
		fmt.Fprintf(&b, "- %s: %s\n", u.node, reasonText(u.reason))
	}
	return b.String() + "\n"
}

// withOutcome is a run's decision log with its outcome section.
func withOutcome(log, state string, c runChanges) string {
	out := outcomeSection(state, c)
	if out == "" {
		return log
	}
	if log == "" {
		log = decisionLogTitle
	}
	return log + out
}

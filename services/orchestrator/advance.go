package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
)

// advance moves a run on, under its lock: it starts a pending run, skips
// the nodes a failure made unreachable (or cancels every pending node under
// fail_fast), ends the run when no node is left to run, and dispatches ready
// nodes, highest priority first, while fewer than max_concurrency are out.
// A paused run dispatches nothing; its running nodes finish.
func (s *Service) advance(ctx context.Context, tx pgx.Tx, run *runRow, eff *effects) error {
	if run.State == statePending {
		if err := startRun(ctx, tx, run.TenantID, run.ID); err != nil {
			return fmt.Errorf("start run: %w", err)
		}
		run.State = stateRunning
		eff.event(run.ID+":started", runEvent(eventv1.EventType_EVENT_TYPE_RUN_STARTED, run.ID, "run "+runName(run.ID)+" started",
			&eventv1.RunEvent{State: orchestratorv1.RunState_RUN_STATE_RUNNING}))
	}
	if run.State != stateRunning && run.State != statePaused {
		return nil
	}
	nodes, err := listSchedNodes(ctx, tx, run.TenantID, run.ID)
	if err != nil {
		return fmt.Errorf("load nodes: %w", err)
	}
	state, err := settleUnreachable(ctx, tx, run, nodes, eff)
	if err != nil {
		return err
	}
	c := countNodes(run, nodes)
	if c.pending == 0 && c.dispatched == 0 {
		return s.endRun(ctx, tx, run, c, len(nodes), eff)
	}
	if run.State == statePaused {
		return nil
	}
	slots := int(run.MaxConcurrency) - c.dispatched
	if slots <= 0 {
		return nil
	}
	ready := readyOf(nodes, state, c.front, eff)
	if len(ready) == 0 {
		return nil
	}
	// Priority first; the topological order (spawn order) breaks ties.
	slices.SortStableFunc(ready, func(a, b *schedNode) int { return cmp.Compare(b.Priority, a.Priority) })
	if ready, err = s.withinSessionLimits(ctx, tx, run, ready); err != nil || len(ready) == 0 {
		return err
	}
	if len(ready) > slots {
		ready = ready[:slots]
	}
	return s.dispatch(ctx, tx, run, ready, eff)
}

// settleUnreachable skips the pending nodes a failure made unreachable
// (or, under fail_fast, cancels every pending node but those the user ran
// again) and returns each node's state as its dependents see it.
func settleUnreachable(ctx context.Context, tx pgx.Tx, run *runRow, nodes []schedNode, eff *effects) (map[string]string, error) {
	state := make(map[string]string, len(nodes))
	failed := false
	for _, n := range nodes {
		failed = failed || n.State == stateFailed
	}
	var skipped, cancelled []string
	// Nodes come in topological order, so one pass carries a failure to
	// every transitive dependent.
	for i := range nodes {
		n := &nodes[i]
		switch {
		case n.State == statePending && failed && run.FailFast && !n.UserReopened:
			n.State = stateCancelled
			cancelled = append(cancelled, n.ID)
			eff.event(fmt.Sprintf("%s:%s:cancelled", run.ID, n.ID), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED, run.ID,
				"node "+n.ID+" cancelled: fail_fast after a failure", &eventv1.NodeEvent{Node: n.ID, State: orchestratorv1.NodeState_NODE_STATE_CANCELLED}))
		case n.State == statePending && anyDep(n.DependsOn, state, stateFailed, stateSkipped, stateCancelled):
			n.State = stateSkipped
			skipped = append(skipped, n.ID)
			eff.event(fmt.Sprintf("%s:%s:skipped", run.ID, n.ID), nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_COMPLETED, run.ID,
				"node "+n.ID+" skipped: a dependency did not succeed", &eventv1.NodeEvent{Node: n.ID, State: orchestratorv1.NodeState_NODE_STATE_SKIPPED}))
		}
		state[n.ID] = n.State
		if n.UserSkipped || n.State == stateNoChanges {
			// The user went on without it, or it changed nothing: met for
			// its dependents.
			state[n.ID] = stateSucceeded
		}
	}
	if len(skipped) > 0 {
		if err := setNodesState(ctx, tx, run.TenantID, run.ID, skipped, statePending, stateSkipped); err != nil {
			return nil, fmt.Errorf("skip nodes: %w", err)
		}
	}
	if len(cancelled) > 0 {
		if err := cancelForFailFast(ctx, tx, run.TenantID, run.ID, cancelled); err != nil { // reopen.go
			return nil, fmt.Errorf("cancel nodes: %w", err)
		}
	}
	return state, nil
}

// nodeCounts counts a run's nodes by state (met: those met for their
// dependents, noChanges among them); front is the first layer with a node
// that has not ended: a layered run dispatches no node of a later one
// (layerFrontSQL).
type nodeCounts struct {
	pending, dispatched, met, noChanges int
	front                               int32
}

func countNodes(run *runRow, nodes []schedNode) nodeCounts {
	c := nodeCounts{front: math.MaxInt32}
	for _, n := range nodes {
		if run.Layered && (n.State == statePending || n.State == stateDispatched) {
			c.front = min(c.front, n.Layer)
		}
		switch {
		case n.State == statePending:
			c.pending++
		case n.State == stateDispatched:
			c.dispatched++
		case n.State == stateNoChanges:
			c.met++
			c.noChanges++
		case n.State == stateSucceeded, n.UserSkipped:
			c.met++
		}
	}
	return c
}

// endRun ends a run none of whose nodes is left to run: SUCCEEDED when
// every node succeeded (or the user went on without it, or it changed
// nothing), NO_CHANGES when the nodes that changed nothing are all the run
// did (outcome.go), else FAILED. A repository run that succeeded gets its
// patches merged.
func (s *Service) endRun(ctx context.Context, tx pgx.Tx, run *runRow, c nodeCounts, total int, eff *effects) error {
	final := stateSucceeded
	var changes runChanges
	switch {
	case c.met < total:
		final = stateFailed
	case c.noChanges > 0:
		var err error
		if _, changes, err = loadRunChanges(ctx, tx, run.TenantID, run.ID); err != nil {
			return fmt.Errorf("load the nodes' changes: %w", err)
		}
		final = changes.endState()
	}
	if err := finishRun(ctx, tx, run.TenantID, run.ID, final); err != nil {
		return fmt.Errorf("finish run: %w", err)
	}
	run.State = final
	eff.completed = final
	if final == stateSucceeded && run.Repository != "" {
		eff.merge = &mergeJob{repo: run.Repository, base: run.BaseCommit}
	}
	eff.completedID = completedEventID(ctx, tx, run) // effects.go
	ev := &eventv1.RunEvent{State: runStateOf(final)}
	if len(changes.unchanged) > 0 {
		ev.Detail = changes.reasons(maxEventReasons)
	}
	eff.event(eff.completedID, runEvent(eventv1.EventType_EVENT_TYPE_RUN_COMPLETED, run.ID, completionText(run.ID, final, changes), ev))
	return nil
}

// readyOf is the pending nodes that may run now, in topological order:
// every dependency met, not paused, within the layer front, and past their
// retry delay (the earliest one still waiting is when the run wakes).
func readyOf(nodes []schedNode, state map[string]string, front int32, eff *effects) []*schedNode {
	now := time.Now()
	var ready []*schedNode
	for i := range nodes {
		n := &nodes[i]
		if n.State != statePending || n.Paused || n.Layer > front || !allDeps(n.DependsOn, state, stateSucceeded) {
			continue
		}
		if n.NotBefore != nil && n.NotBefore.After(now) {
			if eff.wakeAt == nil || n.NotBefore.Before(*eff.wakeAt) {
				eff.wakeAt = n.NotBefore
			}
			continue
		}
		ready = append(ready, n)
	}
	return ready
}

// withinSession keeps, in order, the ready nodes that fit the room left
// under the session's limits: tasks in all, engineers among them.
func withinSession(ready []*schedNode, tasks, engineers int) []*schedNode {
	var out []*schedNode
	for _, n := range ready {
		if len(out) >= tasks {
			break
		}
		if n.Role == dag.RoleEngineer {
			if engineers <= 0 {
				continue
			}
			engineers--
		}
		out = append(out, n)
	}
	return out
}

func anyDep(deps []string, state map[string]string, states ...string) bool {
	for _, d := range deps {
		for _, st := range states {
			if state[d] == st {
				return true
			}
		}
	}
	return false
}

func allDeps(deps []string, state map[string]string, want string) bool {
	for _, d := range deps {
		if state[d] != want {
			return false
		}
	}
	return true
}

// withinSessionLimits keeps the ready nodes (in order) that fit the room
// left under the run's session limits, holding the session's lock until the
// transaction ends.
func (s *Service) withinSessionLimits(ctx context.Context, tx pgx.Tx, run *runRow, ready []*schedNode) ([]*schedNode, error) {
	if run.SessionID == "" || (run.SessionMaxTasks == 0 && run.SessionMaxEngineers == 0) || len(ready) == 0 {
		return ready, nil
	}
	tasks, engineers, limited, err := sessionRoom(ctx, tx, run.TenantID, run.ID)
	if err != nil {
		return nil, fmt.Errorf("session limits: %w", err)
	}
	if !limited {
		return ready, nil
	}
	return withinSession(ready, tasks, engineers), nil
}

// dispatch marks ready nodes DISPATCHED and queues their task messages.
func (s *Service) dispatch(ctx context.Context, tx pgx.Tx, run *runRow, ready []*schedNode, eff *effects) error {
	if s.slots != nil {
		members := make([]string, len(ready))
		for i, n := range ready {
			members[i] = slotMember(run.TenantID, run.ID, n.ID, n.Attempt+1)
		}
		got, err := s.slots.acquire(ctx, run.TenantID, run.SessionID, run.Interactive, members)
		if err != nil {
			return err
		}
		if got < len(ready) {
			eff.waiting, eff.waitPrio, eff.created = true, ready[got].Priority, run.CreateTime
			ready = ready[:got]
		} else {
			eff.satisfied = true
		}
		if len(ready) == 0 {
			return nil
		}
	}
	idsToMark := make([]string, len(ready))
	for i, n := range ready {
		idsToMark[i] = n.ID
	}
	attempts, err := markDispatched(ctx, tx, run.TenantID, run.ID, idsToMark)
	if err != nil {
		return fmt.Errorf("mark dispatched: %w", err)
	}
	return s.queueTasks(ctx, tx, run, ready, attempts, false, eff)
}

// advanceAfterSuccess is advance for the common case of a node that just
// succeeded in a running run: its dependents were unblocked in the same
// transaction, so only ready nodes and running ones are looked at, not the
// whole DAG. Anything else takes the full path.
func (s *Service) advanceAfterSuccess(ctx context.Context, tx pgx.Tx, run *runRow, eff *effects) error {
	if run.State != stateRunning {
		return s.advance(ctx, tx, run, eff)
	}
	if s.slots == nil {
		// No global slots to take first: pick, mark and read the ready nodes
		// in one statement; only when none was ready may the run be over.
		picked, err := dispatchReady(ctx, tx, run.TenantID, run.ID, int(run.MaxConcurrency))
		if err != nil {
			return fmt.Errorf("dispatch ready nodes: %w", err)
		}
		if len(picked) > 0 {
			return s.queueDispatches(ctx, tx, run, picked, eff)
		}
	}
	dispatched, open, err := runCounts(ctx, tx, run.TenantID, run.ID)
	if err != nil {
		return fmt.Errorf("count nodes: %w", err)
	}
	if !open {
		return s.advance(ctx, tx, run, eff)
	}
	if s.slots == nil {
		return nil
	}
	slots := int(run.MaxConcurrency) - dispatched
	if slots <= 0 {
		return nil
	}
	ready, err := readyNodes(ctx, tx, run.TenantID, run.ID, slots)
	if err != nil || len(ready) == 0 {
		return err
	}
	ptrs := make([]*schedNode, len(ready))
	for i := range ready {
		ptrs[i] = &ready[i]
	}
	if ptrs, err = s.withinSessionLimits(ctx, tx, run, ptrs); err != nil || len(ptrs) == 0 {
		return err
	}
	return s.dispatch(ctx, tx, run, ptrs, eff)
}

// queueDispatches adds the task messages of nodes just marked DISPATCHED
// (at their Attempt) to the decision's effects.
func (s *Service) queueDispatches(ctx context.Context, tx pgx.Tx, run *runRow, nodes []schedNode, eff *effects) error {
	ptrs, attempts := pickedAttempts(nodes)
	return s.queueTasks(ctx, tx, run, ptrs, attempts, false, eff)
}

// pickedAttempts is nodes just marked DISPATCHED, by pointer, with their
// attempts.
func pickedAttempts(nodes []schedNode) ([]*schedNode, map[string]int32) {
	ptrs := make([]*schedNode, len(nodes))
	attempts := make(map[string]int32, len(nodes))
	for i := range nodes {
		ptrs[i] = &nodes[i]
		attempts[nodes[i].ID] = nodes[i].Attempt
	}
	return ptrs, attempts
}

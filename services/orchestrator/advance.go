package orchestrator

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/worker"
)

// Event types published on the run's session stream.
const (
	EventRunStarted     = "run.started"
	EventNodeDispatched = "run.node_dispatched"
	EventNodeCompleted  = "run.node_completed"
	EventRunCompleted   = "run.completed"
	EventNodeRetrying   = "run.node_retrying"
	EventRunPaused      = "run.paused"
	EventRunResumed     = "run.resumed"
)

// Internal limits and timings.
const (
	// effectsTimeout bounds publishing a committed decision's effects.
	effectsTimeout      = 30 * time.Second
	maxStoredErrorBytes = 4 << 10
	// resyncBatch is how many unfinished runs one resync pass visits.
	resyncBatch           = 1000
	resultConsumerDurable = "orchestrator-results"
	resultRedeliveryDelay = 2 * time.Second
	// publishParallelism bounds the dispatches of one decision in flight.
	publishParallelism = 32
	// maxWoken bounds the waiting runs re-examined after slots freed up.
	maxWoken            = 256
	unlimitedDeliveries = -1
)

// effects are what a committed scheduling decision still has to tell the
// outside world, in order: task dispatches and session events. They are
// carried out after the commit, so nothing is announced that did not happen.
type effects struct {
	tenant, runID, session string
	// user created the run: the Archivalist's records of it are theirs.
	user  string
	steps []step
	// completed is the run's terminal state when this decision ended it.
	completed string
	durations []time.Duration
	// wakeAt is when a node waiting for its retry becomes ready.
	wakeAt *time.Time
	// cancels are running attempts the workers must stop.
	cancels []cancelTask
	// merge is set when a repository run succeeded: its patches are merged.
	merge *mergeJob
	// archive are records for the Archivalist (pipeline handoffs).
	archive []*messagev1.Envelope
	// completedID is the completion's event id when completed is set.
	completedID string
	// release are global dispatch slots to give back; waiting is set when
	// the run had ready nodes but no slot (with their top priority).
	release   []string
	satisfied bool
	waiting   bool
	waitPrio  int32
	created   time.Time
}

type mergeJob struct{ repo, base string }

type cancelTask struct {
	node    string
	attempt int32
}

// step is a dispatch (with the event announcing it) or a lone event.
type step struct {
	dispatch *dispatchMsg
	event    *topology.Event
}

type dispatchMsg struct {
	subject string
	msgID   string
	env     *messagev1.Envelope
	node    string
	attempt int32
	// republish marks a recovery re-send of a dispatch already announced.
	republish bool
}

func (e *effects) event(typ, id, text string, data map[string]any) {
	if e.session == "" {
		return
	}
	e.steps = append(e.steps, step{event: &topology.Event{
		Tenant: e.tenant, Session: e.session, ID: id, Type: typ, Source: topology.AgentOrchestrator,
		CorrelationID: runName(e.runID), Text: text, Data: data,
	}})
}

func runName(id string) string { return "runs/" + id }

// withRun runs fn in a transaction holding the run's lock, then carries out
// the effects fn collected. With skipLocked it returns (false, nil) at once
// when another transaction holds the run.
func (s *Service) withRun(ctx context.Context, tenant, runID string, skipLocked bool, fn func(tx pgx.Tx, run *runRow, eff *effects) error) (bool, error) {
	var eff *effects
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		lock := lockRun
		if skipLocked {
			lock = tryLockRun
		}
		run, err := lock(ctx, tx, tenant, runID)
		if err != nil {
			return err
		}
		eff = &effects{tenant: tenant, runID: runID, session: run.SessionID, user: run.UserID}
		return fn(tx, run, eff)
	})
	if errors.Is(err, errNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.carryOut(ctx, eff)
	return true, nil
}

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
		eff.event(EventRunStarted, run.ID+":started", "run "+runName(run.ID)+" started",
			map[string]any{"run": runName(run.ID)})
	}
	if run.State != stateRunning && run.State != statePaused {
		return nil
	}
	nodes, err := listSchedNodes(ctx, tx, run.TenantID, run.ID)
	if err != nil {
		return fmt.Errorf("load nodes: %w", err)
	}
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
			eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:cancelled", run.ID, n.ID), "node "+n.ID+" cancelled: fail_fast after a failure",
				map[string]any{"run": runName(run.ID), "node": n.ID, "state": stateCancelled, "exit_code": 0})
		case n.State == statePending && anyDep(n.DependsOn, state, stateFailed, stateSkipped, stateCancelled):
			n.State = stateSkipped
			skipped = append(skipped, n.ID)
			eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:skipped", run.ID, n.ID), "node "+n.ID+" skipped: a dependency did not succeed",
				map[string]any{"run": runName(run.ID), "node": n.ID, "state": stateSkipped, "exit_code": 0})
		}
		state[n.ID] = n.State
		if n.UserSkipped {
			// The user went on without it: met for its dependents.
			state[n.ID] = stateSucceeded
		}
	}
	if len(skipped) > 0 {
		if err := setNodesState(ctx, tx, run.TenantID, run.ID, skipped, statePending, stateSkipped); err != nil {
			return fmt.Errorf("skip nodes: %w", err)
		}
	}
	if len(cancelled) > 0 {
		if err := cancelForFailFast(ctx, tx, run.TenantID, run.ID, cancelled); err != nil { // task.go
			return fmt.Errorf("cancel nodes: %w", err)
		}
	}
	pending, dispatched, succeeded := 0, 0, 0
	// front is the first layer with a node that has not ended: a layered
	// run dispatches no node of a later one (layerFrontSQL).
	front := int32(math.MaxInt32)
	for _, n := range nodes {
		if run.Layered && (n.State == statePending || n.State == stateDispatched) {
			front = min(front, n.Layer)
		}
		switch {
		case n.State == statePending:
			pending++
		case n.State == stateDispatched:
			dispatched++
		case n.State == stateSucceeded, n.UserSkipped:
			succeeded++
		}
	}
	if pending == 0 && dispatched == 0 {
		final := stateSucceeded
		if succeeded != len(nodes) {
			final = stateFailed
		}
		if err := finishRun(ctx, tx, run.TenantID, run.ID, final); err != nil {
			return fmt.Errorf("finish run: %w", err)
		}
		run.State = final
		eff.completed = final
		if final == stateSucceeded && run.Repository != "" {
			eff.merge = &mergeJob{repo: run.Repository, base: run.BaseCommit}
		}
		eff.completedID = completedEventID(ctx, tx, run) // task.go
		eff.event(EventRunCompleted, eff.completedID, "run "+runName(run.ID)+" "+strings.ToLower(final),
			map[string]any{"run": runName(run.ID), "state": final})
		return nil
	}
	if run.State == statePaused {
		return nil
	}
	slots := int(run.MaxConcurrency) - dispatched
	if slots <= 0 {
		return nil
	}
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
	msgs, err := s.buildDispatches(ctx, tx, run, ready, attempts)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		eff.steps = append(eff.steps, step{dispatch: m})
	}
	return nil
}

// buildDispatches makes the task messages of nodes at the given attempts.
func (s *Service) buildDispatches(ctx context.Context, q querier, run *runRow, nodes []*schedNode, attempts map[string]int32) ([]*dispatchMsg, error) {
	specs, err := s.specsOf(ctx, q, run, nodes)
	if err != nil {
		return nil, err
	}
	var deps []string
	for _, n := range nodes {
		deps = append(deps, n.DependsOn...)
	}
	outputs := map[string]string{}
	if len(deps) > 0 && s.cfg.MaxUpstreamBytes > 0 {
		var err error
		if outputs, err = stdouts(ctx, q, run.TenantID, run.ID, deps); err != nil {
			return nil, fmt.Errorf("load upstream outputs: %w", err)
		}
	}
	// Retries are briefed on their prior attempts (spec B-38).
	var retried []string
	for _, n := range nodes {
		if attempts[n.ID] > 1 {
			retried = append(retried, n.ID)
		}
	}
	var prior map[string][]*orchestratorv1.AttemptSummary
	var handed map[string]handedState
	if len(retried) > 0 {
		var err error
		if prior, err = priorAttempts(ctx, q, run.TenantID, run.ID, retried); err != nil {
			return nil, fmt.Errorf("load prior attempts: %w", err)
		}
		// A pipeline carrying on from a handoff starts from its state
		// and its files (spec F-23).
		if handed, err = handedStates(ctx, q, run.TenantID, run.ID, retried); err != nil {
			return nil, fmt.Errorf("load handoffs: %w", err)
		}
	}
	msgs := make([]*dispatchMsg, 0, len(nodes))
	for _, n := range nodes {
		spec, ok := specs[n.ID]
		if !ok {
			return nil, fmt.Errorf("run %s: node %s is missing from the stored dag", run.ID, n.ID)
		}
		attempt := attempts[n.ID]
		encoded := n.Spec
		b := retryBriefing(spec, attempt, prior[n.ID])
		h, handedOff := handed[n.ID]
		if b != nil || handedOff {
			spec = proto.Clone(spec).(*orchestratorv1.Node)
			spec.RetryBriefing, spec.Handoff = b, h.handoff
			encoded = nil
		}
		task := &messagev1.TaskDispatch{
			RunId:            run.ID,
			NodeId:           n.ID,
			Attempt:          attempt,
			Role:             n.Role,
			Command:          spec.GetCommand(),
			Prompt:           spec.GetPrompt(),
			Timeout:          spec.GetTimeout(),
			OutputLimitBytes: int64(s.cfg.OutputLimitBytes),
			UpstreamOutputs:  s.upstream(n.DependsOn, outputs),
		}
		meta := map[string]string{}
		// The stored row holds the node's encoded form already (but for
		// a briefed retry).
		if encoded != nil {
			meta[worker.MetaNodeSpec] = base64.StdEncoding.EncodeToString(encoded)
		} else if b, err := proto.Marshal(spec); err == nil {
			meta[worker.MetaNodeSpec] = base64.StdEncoding.EncodeToString(b)
		}
		if run.Repository != "" {
			meta[worker.MetaRepository] = run.Repository
			meta[worker.MetaBaseCommit] = run.BaseCommit
			if h.patch != "" {
				meta[worker.MetaStartPatch] = h.patch
			}
		}
		msgs = append(msgs, &dispatchMsg{
			subject: topology.TaskSubject(s.bus, n.Role),
			msgID:   fmt.Sprintf("%s:%s:%d", run.ID, n.ID, attempt),
			node:    n.ID,
			attempt: attempt,
			env: &messagev1.Envelope{
				Id:            ids.New(),
				CorrelationId: run.ID,
				TenantId:      run.TenantID,
				SessionId:     run.SessionID,
				UserId:        run.UserID,
				Source:        topology.AgentOrchestrator,
				Target:        n.Role,
				Type:          messagev1.MessageType_MESSAGE_TYPE_TASK_DISPATCH,
				CreatedAt:     timestamppb.Now(),
				Attempt:       attempt,
				Priority:      messagev1.Priority_PRIORITY_PIPELINE,
				Metadata:      meta,
				Payload:       &messagev1.Envelope_TaskDispatch{TaskDispatch: task},
			},
		})
	}
	return msgs, nil
}

// specsOf returns the submitted form of nodes, from their rows (or from the
// run's DAG for rows stored without one).
func (s *Service) specsOf(ctx context.Context, q querier, run *runRow, nodes []*schedNode) (map[string]*orchestratorv1.Node, error) {
	raw := make(map[string][]byte, len(nodes))
	var missing []string
	for _, n := range nodes {
		if n.Spec != nil {
			raw[n.ID] = n.Spec
		} else {
			missing = append(missing, n.ID)
		}
	}
	if len(missing) > 0 {
		got, err := nodeSpecs(ctx, q, run.TenantID, run.ID, missing)
		if err != nil {
			return nil, fmt.Errorf("load node specs: %w", err)
		}
		maps.Copy(raw, got)
	}
	specs := make(map[string]*orchestratorv1.Node, len(nodes))
	for id, b := range raw {
		var n orchestratorv1.Node
		if err := proto.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("decode node %s of run %s: %w", id, run.ID, err)
		}
		specs[id] = &n
	}
	if len(specs) == len(nodes) {
		return specs, nil
	}
	full, err := getRun(ctx, q, run.TenantID, run.ID)
	if err != nil {
		return nil, fmt.Errorf("load dag of run %s: %w", run.ID, err)
	}
	var d orchestratorv1.Dag
	if err := proto.Unmarshal(full.DAG, &d); err != nil {
		return nil, fmt.Errorf("decode dag of run %s: %w", run.ID, err)
	}
	for _, n := range d.GetNodes() {
		if _, ok := specs[n.GetId()]; !ok {
			specs[n.GetId()] = n
		}
	}
	return specs, nil
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
	ptrs := make([]*schedNode, len(nodes))
	attempts := make(map[string]int32, len(nodes))
	for i := range nodes {
		ptrs[i] = &nodes[i]
		attempts[nodes[i].ID] = nodes[i].Attempt
	}
	msgs, err := s.buildDispatches(ctx, tx, run, ptrs, attempts)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		eff.steps = append(eff.steps, step{dispatch: m})
	}
	return nil
}

// upstream is the capped stdout of a node's dependencies.
func (s *Service) upstream(deps []string, outputs map[string]string) map[string]string {
	if len(deps) == 0 || s.cfg.MaxUpstreamBytes == 0 {
		return nil
	}
	each := min(s.cfg.UpstreamOutputBytes, s.cfg.MaxUpstreamBytes/len(deps))
	out := make(map[string]string, len(deps))
	for _, d := range deps {
		out[d] = truncateMiddle(outputs[d], each)
	}
	return out
}

// truncateMiddle keeps the head and the tail of s within limit bytes, with a
// marker saying how much was dropped.
func truncateMiddle(s string, limit int) string {
	out, _ := toolexec.ClipMiddle(s, limit, "\uFFFD")
	return out
}

// carryOut publishes a committed decision's dispatches and events. A
// dispatch that cannot be published is undone (the node goes back to
// PENDING), so that the next resync dispatches it again; events are best
// effort.
func (s *Service) carryOut(ctx context.Context, eff *effects) {
	if eff == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
	defer cancel()
	log := s.log.With(logx.KeyTenantID, eff.tenant, logx.KeyRunID, eff.runID)
	// Dispatches go out in decision order without waiting for each ack (the
	// task queues keep the priority and spawn order of the nodes); the acks
	// are awaited together.
	acks := make([]jetstream.PubAckFuture, len(eff.steps))
	sendErrs := make([]error, len(eff.steps))
	for i, st := range eff.steps {
		if st.dispatch != nil {
			acks[i], sendErrs[i] = s.bus.PublishAsync(ctx, st.dispatch.subject, st.dispatch.msgID, st.dispatch.env)
		}
	}
	for i, st := range eff.steps {
		if st.event != nil {
			s.publishEvent(ctx, log, *st.event)
			continue
		}
		m := st.dispatch
		err := sendErrs[i]
		if err == nil {
			_, err = natsx.AwaitAck(ctx, acks[i])
		}
		if err != nil {
			if m.republish {
				log.ErrorContext(ctx, "re-publish task", logx.KeyNodeID, m.node, logx.Err(err))
				continue
			}
			log.WarnContext(ctx, "publish task; the node goes back to pending", logx.KeyNodeID, m.node, logx.Err(err))
			eff.release = append(eff.release, slotMember(eff.tenant, eff.runID, m.node, m.attempt))
			if err := undoDispatch(ctx, s.db, eff.tenant, eff.runID, m.node, m.attempt); err != nil {
				log.ErrorContext(ctx, "undo dispatch", logx.KeyNodeID, m.node, logx.Err(err))
			}
			continue
		}
		if m.republish {
			continue
		}
		s.metrics.dispatched.Inc()
		if eff.session != "" {
			role := m.env.GetTaskDispatch().GetRole()
			s.publishEvent(ctx, log, topology.Event{
				Tenant: eff.tenant, Session: eff.session, ID: m.msgID + ":dispatched", Type: EventNodeDispatched,
				Source: topology.AgentOrchestrator, CorrelationID: runName(eff.runID),
				Text: fmt.Sprintf("node %s dispatched to %s (attempt %d)", m.node, role, m.attempt),
				Data: map[string]any{"run": runName(eff.runID), "node": m.node, "attempt": m.attempt, "role": role},
			})
		}
	}
	if eff.completed != "" {
		if rec, err := workflowCheckpoint(ctx, s.db, eff.tenant, eff.session, eff.user, eff.runID, eff.completed, eff.completedID); err != nil {
			log.WarnContext(ctx, "build the workflow checkpoint", logx.Err(err))
		} else {
			eff.archive = append(eff.archive, rec)
		}
	}
	s.archive(ctx, log, eff.archive)
	for _, c := range eff.cancels {
		s.signalCancel(ctx, log, eff.tenant, eff.runID, c)
		eff.release = append(eff.release, slotMember(eff.tenant, eff.runID, c.node, c.attempt))
	}
	s.settleSlots(ctx, log, eff)
	if eff.wakeAt != nil {
		s.wakeAt(eff.tenant, eff.runID, *eff.wakeAt)
	}
	for _, d := range eff.durations {
		s.metrics.nodeDuration.Observe(d.Seconds())
	}
	if eff.merge != nil {
		s.mergeRun(ctx, log, eff.tenant, eff.runID, eff.merge.repo, eff.merge.base)
		s.startSessionCheck(ctx, log, eff.tenant, eff.runID) // session.go (spec F-06)
	}
	if eff.completed != "" {
		s.metrics.runs.WithLabelValues(eff.completed).Inc()
		log.InfoContext(ctx, "run completed", slog.String("state", eff.completed))
	}
}

func (s *Service) publishEvent(ctx context.Context, log *slog.Logger, e topology.Event) {
	if _, err := topology.PublishEvent(ctx, s.bus, e); err != nil {
		log.WarnContext(ctx, "publish session event", slog.String("type", e.Type), logx.Err(err))
	}
}

// result is one decoded worker report.
type result struct {
	msg    jetstream.Msg
	env    *messagev1.Envelope
	r      *messagev1.TaskResult
	stored nodeResult
}

// decodeResult reads a worker report; a message that is not one is a
// permanent error.
// timeOf is t as a time, or nil when it is not set or not a valid time
// (outside years 1 to 9999), which the database could not store.
func timeOf(t *timestamppb.Timestamp) *time.Time {
	if !t.IsValid() {
		return nil
	}
	v := t.AsTime()
	return &v
}

func (s *Service) decodeResult(msg jetstream.Msg) (*result, error) {
	var env messagev1.Envelope
	if err := natsx.Unmarshal(msg, &env); err != nil {
		return nil, err
	}
	r := env.GetTaskResult()
	if r == nil || env.GetTenantId() == "" || !ids.Valid(r.GetRunId()) || r.GetNodeId() == "" {
		return nil, natsx.Permanent(fmt.Errorf("not a task result for a run: %s", msg.Subject()))
	}
	res := nodeResult{
		State:           stateSucceeded,
		ExitCode:        r.GetExitCode(),
		Stdout:          storable(r.GetStdout(), 2*s.cfg.OutputLimitBytes),
		Stderr:          storable(r.GetStderr(), 2*s.cfg.OutputLimitBytes),
		StdoutTruncated: r.GetStdoutTruncated(),
		StderrTruncated: r.GetStderrTruncated(),
		TimedOut:        r.GetTimedOut(),
		Duration:        r.GetDuration().AsDuration(),
		Error:           storable(r.GetError(), maxStoredErrorBytes),
		WorkerID:        storable(r.GetWorkerId(), 256),
		Patch:           storable(env.GetMetadata()[worker.MetaPatch], maxStoredPatchBytes),
		Report:          storable(env.GetMetadata()[worker.MetaReport], maxStoredErrorBytes*4),
		Pipeline:        storable(env.GetMetadata()[worker.MetaPipeline], maxStoredErrorBytes*16),
		ReceivedAt:      timeOf(r.GetReceivedAt()),
		ReportedAt:      timeOf(r.GetReportedAt()),
	}
	if res.TimedOut && res.Error == "" {
		res.Error = "timed out"
	}
	if res.ExitCode != 0 || res.Error != "" {
		res.State = stateFailed
	} else if h := env.GetMetadata()[worker.MetaHandoff]; h != "" {
		res.State, res.Handoff = stateHandedOff, storable(h, maxStoredHandoffBytes)
		if s.handoffOverLimit(h) {
			res.State, res.ExitCode = stateFailed, 1
			res.Error = fmt.Sprintf("the pipeline asked for handoff %d, beyond the limit of %d (-orchestrator.max-handoffs)",
				s.cfg.MaxHandoffs+1, s.cfg.MaxHandoffs)
		}
	}
	return &result{msg: msg, env: &env, r: r, stored: res}, nil
}

// applyResults records reports of one run's nodes in one transaction under
// the run's lock, then moves the run on once. Each report applies only to
// the attempt its node awaits, so a redelivered batch changes nothing twice.
// Without global slots the common case takes one round trip (applyDirect).
func (s *Service) applyResults(ctx context.Context, tenant, runID string, results []*result) error {
	log := s.log.With(logx.KeyTenantID, tenant, logx.KeyRunID, runID)
	type nodeAttempt struct {
		node    string
		attempt int32
	}
	// A report repeated within the batch (a redelivery) is sent once.
	reported := make([]reportedResult, 0, len(results))
	byKey := make(map[nodeAttempt]*result, len(results))
	for _, rs := range results {
		nodeID, attempt, res := rs.r.GetNodeId(), rs.r.GetAttempt(), rs.stored
		k := nodeAttempt{nodeID, attempt}
		if _, dup := byKey[k]; dup {
			continue
		}
		byKey[k] = rs
		section := ""
		if res.Report != "" || res.Patch != "" {
			section = decisionSection(nodeID, attempt, res.State, res, rs.env.GetMetadata()[worker.MetaGitAudit])
		}
		reported = append(reported, reportedResult{NodeID: nodeID, Attempt: attempt, Result: res, Section: section})
	}
	if s.slots == nil {
		return s.applyDirect(ctx, log, tenant, runID, reported, func(rec []recordedResult, eff *effects) bool {
			return s.noteRecorded(eff, rec, func(node string, attempt int32) nodeResult { return byKey[nodeAttempt{node, attempt}].stored })
		})
	}
	var limited *runRow
	found, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		recorded, err := recordResults(ctx, tx, tenant, runID, reported)
		if err != nil {
			return fmt.Errorf("record results: %w", err)
		}
		if len(recorded) > 0 {
			limited = run
		}
		if len(recorded) < len(reported) {
			log.DebugContext(ctx, "ignoring results for nodes not awaiting them", slog.Int("ignored", len(reported)-len(recorded)))
		}
		if s.noteRecorded(eff, recorded, func(node string, attempt int32) nodeResult { return byKey[nodeAttempt{node, attempt}].stored }) {
			return s.advanceAfterSuccess(ctx, tx, run, eff)
		}
		return s.advance(ctx, tx, run, eff)
	})
	if err != nil {
		return err
	}
	if !found {
		log.WarnContext(ctx, "dropping results for an unknown run", slog.Int("results", len(results)))
	}
	if limited != nil {
		s.wakeSessionPeers(limited)
	}
	return nil
}

// wakeSessionPeers moves on the other unfinished runs of a run's session
// when the run has session limits and just freed some of their room, so
// that a run held back by them need not wait for the resync.
func (s *Service) wakeSessionPeers(run *runRow) {
	if run.SessionID == "" || (run.SessionMaxTasks == 0 && run.SessionMaxEngineers == 0) {
		return
	}
	ctx := s.runCtx()
	go func() {
		peers, err := sessionRuns(ctx, s.db, run.TenantID, "", run.SessionID)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "list the session's runs", logx.KeyTenantID, run.TenantID, logx.Err(err))
			}
			return
		}
		for _, id := range peers {
			if id == run.ID || ctx.Err() != nil {
				continue
			}
			if _, err := s.withRun(ctx, run.TenantID, id, false, func(tx pgx.Tx, peer *runRow, eff *effects) error {
				return s.advance(ctx, tx, peer, eff)
			}); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "advance a run of the session", logx.KeyTenantID, run.TenantID, logx.KeyRunID, id, logx.Err(err))
			}
		}
	}()
}

// applyDirect is applyResults without global slots, in one round trip: a
// pipelined batch begins a transaction, locks the run, records every
// report, dispatches the nodes they made ready (only while the run is
// running and, under fail_fast, nothing failed), counts what is left and
// commits. Its effects are carried out asynchronously, in order (see
// carryOutOrdered). Whatever else the reports call for (a failure, a retry,
// the run's end, a paused run) is decided by advance in a second
// transaction, exactly as a resync would.
func (s *Service) applyDirect(ctx context.Context, log *slog.Logger, tenant, runID string, reported []reportedResult,
	note func([]recordedResult, *effects) bool) error {
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(lockRunSQL, tenant, runID)
	b.Queue(recordResultsSQL, recordResultsArgs(tenant, runID, reported)...)
	b.Queue(lockSessionSQL, tenant, runID)
	b.Queue(dispatchReadySQL, tenant, runID, math.MaxInt32)
	b.Queue(runCountsSQL, tenant, runID)
	b.Queue("COMMIT")
	var (
		run      *runRow
		recorded []recordedResult
		picked   []schedNode
		open     bool
	)
	// Should any statement fail, the server skips the rest (COMMIT too) and
	// the pool discards the connection with its aborted transaction.
	err := func() error {
		br := s.db.SendBatch(ctx, &b)
		defer func() { _ = br.Close() }()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var err error
		if run, err = scanRun(br.QueryRow()); err != nil && !errors.Is(err, errNotFound) {
			return fmt.Errorf("lock run: %w", err)
		}
		rows, err := br.Query()
		if err == nil {
			recorded, err = scanRecorded(rows)
		}
		if err != nil {
			return fmt.Errorf("record results: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("lock session: %w", err)
		}
		rows, err = br.Query()
		if err == nil {
			picked, err = scanDispatched(rows)
		}
		if err != nil {
			return fmt.Errorf("dispatch ready nodes: %w", err)
		}
		var dispatched int
		if err := br.QueryRow().Scan(&dispatched, &open); err != nil {
			return fmt.Errorf("count nodes: %w", err)
		}
		tag, err := br.Exec()
		if err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("transaction ended with %s", tag)
		}
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return br.Close()
	}()
	if err != nil {
		return err
	}
	if run == nil {
		log.WarnContext(ctx, "dropping results for an unknown run", slog.Int("results", len(reported)))
		return nil
	}
	if len(recorded) < len(reported) {
		log.DebugContext(ctx, "ignoring results for nodes not awaiting them", slog.Int("ignored", len(reported)-len(recorded)))
	}
	eff := &effects{tenant: tenant, runID: runID, session: run.SessionID, user: run.UserID}
	onlySuccesses := note(recorded, eff)
	var msgs []*dispatchMsg
	if len(picked) > 0 {
		ptrs := make([]*schedNode, len(picked))
		attempts := make(map[string]int32, len(picked))
		for i := range picked {
			ptrs[i] = &picked[i]
			attempts[picked[i].ID] = picked[i].Attempt
		}
		// The dispatches are committed: should their messages fail to
		// build, the nodes go back to PENDING for the next pass.
		if msgs, err = s.buildDispatches(ctx, s.db, run, ptrs, attempts); err != nil {
			log.ErrorContext(ctx, "build dispatches; the nodes go back to pending", logx.Err(err))
			for _, n := range picked {
				if err := undoDispatch(ctx, s.db, tenant, runID, n.ID, n.Attempt); err != nil {
					log.ErrorContext(ctx, "undo dispatch", logx.KeyNodeID, n.ID, logx.Err(err))
				}
			}
		}
	}
	for _, m := range msgs {
		eff.steps = append(eff.steps, step{dispatch: m})
	}
	s.carryOutOrdered(ctx, eff)
	if len(recorded) > 0 {
		s.wakeSessionPeers(run)
	}
	if onlySuccesses && open && run.State == stateRunning {
		return nil
	}
	_, err = s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		return s.advance(ctx, tx, run, eff)
	})
	return err
}

// noteRecorded adds the events, slot releases and metrics of applied
// reports to a decision's effects, and says whether every one succeeded.
func (s *Service) noteRecorded(eff *effects, recorded []recordedResult, stored func(node string, attempt int32) nodeResult) bool {
	tenant, runID := eff.tenant, eff.runID
	onlySuccesses := true
	for _, rec := range recorded {
		nodeID, attempt, state, retryAt := rec.NodeID, rec.Attempt, rec.State, rec.RetryAt
		res := stored(nodeID, attempt)
		s.metrics.completions.Inc()
		eff.durations = append(eff.durations, res.Duration)
		if s.slots != nil {
			eff.release = append(eff.release, slotMember(tenant, runID, nodeID, attempt))
		}
		if state != stateSucceeded {
			onlySuccesses = false
		}
		if res.State == stateHandedOff && state == statePending {
			s.noteHandoff(eff, nodeID, attempt, res)
			continue
		}
		if state == statePending && retryAt != nil {
			s.metrics.retries.Inc()
			eff.event(EventNodeRetrying, fmt.Sprintf("%s:%s:%d:retrying", runID, nodeID, attempt),
				fmt.Sprintf("node %s failed (exit %d); retry %d at %s", nodeID, res.ExitCode, attempt, retryAt.UTC().Format(time.RFC3339Nano)),
				map[string]any{"run": runName(runID), "node": nodeID, "attempt": attempt, "exit_code": res.ExitCode,
					"error": res.Error, "next_attempt_time": retryAt.UTC().Format(time.RFC3339Nano)})
		} else {
			eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:%d:completed", runID, nodeID, attempt),
				fmt.Sprintf("node %s %s (exit %d)", nodeID, strings.ToLower(res.State), res.ExitCode),
				map[string]any{"run": runName(runID), "node": nodeID, "state": res.State, "exit_code": res.ExitCode})
		}
	}
	return onlySuccesses
}

// carryOutOrdered carries out a decision's effects in the background, after
// those of the previous call, so that the next batch of results is applied
// while these dispatches are published; at most one such call is pending.
// Should this replica stop before they are published, the nodes are
// DISPATCHED in the database and the run's recovery re-sends them.
func (s *Service) carryOutOrdered(ctx context.Context, eff *effects) {
	s.carryMu.Lock()
	prev := s.carryDone
	done := make(chan struct{})
	s.carryDone = done
	s.carryMu.Unlock()
	if prev != nil {
		<-prev
	}
	go func() {
		defer close(done)
		s.carryOut(ctx, eff)
	}()
}

// waitCarriedOut waits for the effects carryOutOrdered started.
func (s *Service) waitCarriedOut() {
	s.carryMu.Lock()
	prev := s.carryDone
	s.carryMu.Unlock()
	if prev != nil {
		<-prev
	}
}

// consumeResults applies worker reports in batches: whatever arrived while
// the previous batch was applied (up to resultBatch) is grouped by run, and
// each run's group costs one transaction and one scheduling pass.
func (s *Service) consumeResults(ctx context.Context) error {
	cons, err := s.bus.EnsureConsumer(ctx, natsx.ConsumerSpec{
		Stream:         s.bus.Stream(topology.StreamTasks),
		Durable:        resultConsumerDurable,
		FilterSubjects: []string{topology.ResultSubject(s.bus)},
		// A result must not be lost to a database outage: retry until it
		// is applied (undecodable messages are terminated instead).
		MaxDeliver: unlimitedDeliveries,
	})
	if err != nil {
		return err
	}
	in := make(chan jetstream.Msg, resultBatch)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case in <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(resultBatch))
	if err != nil {
		return fmt.Errorf("consume results: %w", err)
	}
	defer cc.Stop()
	defer s.waitCarriedOut()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case m := <-in:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < resultBatch {
			select {
			case m := <-in:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		s.applyBatch(ctx, batch)
	}
}

// resultBatch bounds the reports applied together.
const resultBatch = 128

func (s *Service) applyBatch(ctx context.Context, batch []jetstream.Msg) {
	s.metrics.resultBatch.Observe(float64(len(batch)))
	type key struct{ tenant, run string }
	groups := map[key][]*result{}
	var order []key
	for _, m := range batch {
		res, err := s.decodeResult(m)
		if err != nil {
			s.log.ErrorContext(ctx, "result dropped", slog.String("subject", m.Subject()), logx.Err(err))
			_ = m.Term()
			continue
		}
		if s.handleSessionCheckResult(ctx, res) { // session.go (spec F-06)
			continue
		}
		if s.handleCancelledResult(ctx, res) {
			continue
		}
		k := key{res.env.GetTenantId(), res.r.GetRunId()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], res)
	}
	for _, k := range order {
		rs := groups[k]
		err := s.applyResults(ctx, k.tenant, k.run, rs)
		for _, r := range rs {
			if err != nil {
				_ = r.msg.NakWithDelay(resultRedeliveryDelay)
				continue
			}
			_ = r.msg.Ack()
		}
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "results will be redelivered", logx.KeyTenantID, k.tenant, logx.KeyRunID, k.run, logx.Err(err))
		}
	}
}

// handleCancelledResult keeps what a cancelled node's command printed
// before it was stopped (spec C-32): the node stays CANCELLED, its output
// marked partial. It reports whether res was such a result. Only the
// attempt that was cancelled takes it, and only once.
func (s *Service) handleCancelledResult(ctx context.Context, res *result) bool {
	if res.env.GetMetadata()[worker.MetaCancelled] == "" {
		return false
	}
	o := res.stored
	_, err := s.db.Exec(ctx, `UPDATE nodes SET stdout = $5, stderr = $6, stdout_truncated = $7, stderr_truncated = $8,
			exit_code = $9, duration_us = $10, worker_id = $11, output_partial = true
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3 AND attempt = $4 AND state = 'CANCELLED' AND NOT output_partial`,
		res.env.GetTenantId(), res.r.GetRunId(), res.r.GetNodeId(), res.r.GetAttempt(), o.Stdout, o.Stderr,
		o.StdoutTruncated, o.StderrTruncated, o.ExitCode, o.Duration.Microseconds(), o.WorkerID)
	if err != nil {
		s.log.WarnContext(ctx, "a cancelled node's partial output will be redelivered", logx.KeyTenantID, res.env.GetTenantId(),
			logx.KeyRunID, res.r.GetRunId(), logx.Err(err))
		_ = res.msg.NakWithDelay(resultRedeliveryDelay)
		return true
	}
	_ = res.msg.Ack()
	return true
}

// maxStoredPatchBytes bounds a node's stored patch (the worker caps it
// lower).
const maxStoredPatchBytes = 512 << 10

// decisionSection is a task's entry in the run's decision log (spec H-07).
// A report that does not parse still gives a partial entry (spec H-01,
// AC-21): the fields that can be read, and a note that it was malformed.
func decisionSection(nodeID string, attempt int32, state string, res nodeResult, gitAudit string) string {
	rep := &orchestratorv1.TaskReport{}
	malformed := ""
	if strings.TrimSpace(res.Report) != "" {
		if err := protojson.Unmarshal([]byte(res.Report), rep); err != nil {
			rep = partialReport(res.Report)
			malformed = truncateMiddle(err.Error(), 200)
		}
	}
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
	fmt.Fprintf(&b, "## Task %s (attempt %d): %s\n\n", nodeID, attempt, strings.ToLower(state))
	fmt.Fprintf(&b, "- Implemented: %s\n- Tested: %s\n- Files changed: %s\n- Decisions: %s\n- Deviations: %s\n- Concerns: %s\n",
		orNone(rep.GetImplemented()), orNone(rep.GetTested()), files, orNone(rep.GetDecisions()), orNone(rep.GetDeviations()), orNone(rep.GetConcerns()))
	if gitAudit != "" {
		fmt.Fprintf(&b, "- Git calls: %d\n", len(strings.Split(gitAudit, "\n")))
	}
	if rep.GetBriefing() != "" {
		fmt.Fprintf(&b, "- Briefing: %s\n", rep.GetBriefing())
	}
	if malformed != "" {
		fmt.Fprintf(&b, "- Report: malformed, partial entry (%s)\n", malformed)
	}
	return b.String() + "\n"
}

// partialReport reads what it can of a report that is not a valid
// TaskReport: the known fields of a JSON object, by either spelling.
func partialReport(raw string) *orchestratorv1.TaskReport {
	var m map[string]any
	_ = json.Unmarshal([]byte(raw), &m)
	text := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := m[k].(string); ok {
				return v
			}
		}
		return ""
	}
	rep := &orchestratorv1.TaskReport{Implemented: text("implemented"), Tested: text("tested"), Decisions: text("decisions"),
		Deviations: text("deviations"), Concerns: text("concerns")}
	for _, k := range []string{"filesChanged", "files_changed"} {
		if list, ok := m[k].([]any); ok {
			for _, f := range list {
				if s, ok := f.(string); ok {
					rep.FilesChanged = append(rep.FilesChanged, s)
				}
			}
		}
	}
	return rep
}

// storable makes worker text safe for a text column and bounded in size.
func storable(s string, limit int) string {
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "\uFFFD")
	}
	return s
}

// recoverRuns claims the runs whose lease expired (or that this replica
// held before a restart) and recovers each: the dispatches of its running
// nodes are re-published under their original message ids (a worker may
// never have received them; JetStream drops the copies it already has), and
// the run moves on. Results are applied only to the attempt a node awaits,
// so nothing completes twice.
func (s *Service) recoverRuns(ctx context.Context, atStart bool) error {
	for {
		keys, err := claimExpired(ctx, s.db, s.cfg.ReplicaID, s.cfg.LeaseTTL, resyncBatch, atStart)
		if err != nil {
			return fmt.Errorf("claim runs: %w", err)
		}
		if len(keys) > 0 {
			// Counted when claimed, before any run moves on.
			s.metrics.recovered.Add(float64(len(keys)))
			s.log.InfoContext(ctx, "took over unfinished runs", slog.Int("runs", len(keys)), slog.String("replica", s.cfg.ReplicaID))
		}
		for _, k := range keys {
			if err := s.recoverRun(ctx, k); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.ErrorContext(ctx, "recover run", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
			}
		}
		if len(keys) < resyncBatch {
			return nil
		}
	}
}

func (s *Service) recoverRun(ctx context.Context, k runKey) error {
	_, err := s.withRun(ctx, k.Tenant, k.ID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		if run.State == stateRunning || run.State == statePaused {
			nodes, err := listSchedNodes(ctx, tx, run.TenantID, run.ID)
			if err != nil {
				return err
			}
			var out []*schedNode
			attempts := map[string]int32{}
			for i := range nodes {
				if nodes[i].State == stateDispatched {
					out = append(out, &nodes[i])
					attempts[nodes[i].ID] = nodes[i].Attempt
				}
			}
			if len(out) > 0 {
				msgs, err := s.buildDispatches(ctx, tx, run, out, attempts)
				if err != nil {
					return err
				}
				for _, m := range msgs {
					m.republish = true
					eff.steps = append(eff.steps, step{dispatch: m})
				}
			}
		}
		return s.advance(ctx, tx, run, eff)
	})
	return err
}

// leases renews this replica's run leases and takes over the runs of
// replicas that stopped renewing theirs, every LeaseTTL/3.
func (s *Service) leases(ctx context.Context) {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := renewLeases(ctx, s.db, s.cfg.ReplicaID, s.cfg.LeaseTTL); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "renew run leases", logx.Err(err))
		}
		if err := s.recoverRuns(ctx, false); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "take over expired runs", logx.Err(err))
		}
		s.sweepSessionChecks(ctx) // session.go
		s.renewSlots(ctx)
	}
}

// settleSlots gives back a decision's global slots, wakes the runs that
// were waiting for them, and records this run when it is waiting itself.
func (s *Service) settleSlots(ctx context.Context, log *slog.Logger, eff *effects) {
	if s.slots == nil {
		return
	}
	if len(eff.release) > 0 {
		if err := s.slots.release(ctx, eff.tenant, eff.session, eff.release); err != nil {
			log.WarnContext(ctx, "release dispatch slots", logx.Err(err))
		}
		// Every waiting run gets a look, most urgent first: one that is over
		// its share gets nothing, so it cannot starve the others of the
		// freed slots.
		if keys, err := s.slots.next(ctx, maxWoken); err != nil {
			log.WarnContext(ctx, "read waiting runs", logx.Err(err))
		} else if len(keys) > 0 {
			go s.advanceRuns(keys)
		}
	}
	switch {
	case eff.waiting:
		if err := s.slots.wait(ctx, eff.tenant, eff.runID, eff.waitPrio, eff.created); err != nil {
			log.WarnContext(ctx, "record waiting run", logx.Err(err))
		}
	case eff.satisfied || eff.completed != "":
		if err := s.slots.satisfied(ctx, eff.tenant, eff.runID); err != nil {
			log.WarnContext(ctx, "clear waiting run", logx.Err(err))
		}
	}
}

// advanceRuns moves on runs that were waiting for global slots.
func (s *Service) advanceRuns(keys []runKey) {
	ctx := s.runCtx()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		if _, err := s.withRun(ctx, k.Tenant, k.ID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
			return s.advance(ctx, tx, run, eff)
		}); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "advance a waiting run", logx.KeyRunID, k.ID, logx.Err(err))
		}
	}
}

// renewSlots keeps the global slots of this replica's running attempts.
func (s *Service) renewSlots(ctx context.Context) {
	if s.slots == nil {
		return
	}
	running, err := ownedRunning(ctx, s.db, s.cfg.ReplicaID)
	if err != nil {
		s.log.WarnContext(ctx, "list running attempts", logx.Err(err))
		return
	}
	type sess struct{ tenant, session string }
	by := map[sess][]string{}
	for _, a := range running {
		k := sess{a.Tenant, a.Session}
		by[k] = append(by[k], slotMember(a.Tenant, a.RunID, a.Node, a.Attempt))
	}
	for k, ms := range by {
		if err := s.slots.renew(ctx, k.tenant, k.session, ms); err != nil {
			s.log.WarnContext(ctx, "renew dispatch slots", logx.Err(err))
		}
	}
}

// wakeAt advances a run when a node's retry delay is over. Should this
// replica stop first, the resync loop of any replica picks the run up.
func (s *Service) wakeAt(tenant, runID string, at time.Time) {
	d := max(time.Until(at), 0) + 5*time.Millisecond
	time.AfterFunc(d, func() {
		ctx := s.runCtx()
		if ctx.Err() != nil {
			return
		}
		if _, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
			return s.advance(ctx, tx, run, eff)
		}); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "advance run after a retry delay", logx.KeyRunID, runID, logx.Err(err))
		}
	})
}

// resync moves on every unfinished run no other transaction is handling.
func (s *Service) resync(ctx context.Context) {
	keys, err := activeRuns(ctx, s.db, resyncBatch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "resync: list unfinished runs", logx.Err(err))
		}
		return
	}
	for _, k := range keys {
		_, err := s.withRun(ctx, k.Tenant, k.ID, true, func(tx pgx.Tx, run *runRow, eff *effects) error {
			return s.advance(ctx, tx, run, eff)
		})
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "resync run", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
		}
	}
}

package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Event types published on the run's session stream.
const (
	EventRunStarted     = "run.started"
	EventNodeDispatched = "run.node_dispatched"
	EventNodeCompleted  = "run.node_completed"
	EventRunCompleted   = "run.completed"
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
	unlimitedDeliveries   = -1
)

// effects are what a committed scheduling decision still has to tell the
// outside world, in order: task dispatches and session events. They are
// carried out after the commit, so nothing is announced that did not happen.
type effects struct {
	tenant, runID, session string
	steps                  []step
	// completed is the run's terminal state when this decision ended it.
	completed string
	durations []time.Duration
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
		eff = &effects{tenant: tenant, runID: runID, session: run.SessionID}
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
// the nodes a failure made unreachable, ends the run when no node is left to
// run, and dispatches ready nodes while fewer than max_concurrency are out.
func (s *Service) advance(ctx context.Context, tx pgx.Tx, run *runRow, eff *effects) error {
	if run.State == statePending {
		if err := startRun(ctx, tx, run.TenantID, run.ID); err != nil {
			return fmt.Errorf("start run: %w", err)
		}
		run.State = stateRunning
		eff.event(EventRunStarted, run.ID+":started", "run "+runName(run.ID)+" started",
			map[string]any{"run": runName(run.ID)})
	}
	if run.State != stateRunning {
		return nil
	}
	nodes, err := listSchedNodes(ctx, tx, run.TenantID, run.ID)
	if err != nil {
		return fmt.Errorf("load nodes: %w", err)
	}
	state := make(map[string]string, len(nodes))
	var skipped []string
	// Nodes come in topological order, so one pass carries a failure to
	// every transitive dependent.
	for i := range nodes {
		n := &nodes[i]
		if n.State == statePending && anyDep(n.DependsOn, state, stateFailed, stateSkipped, stateCancelled) {
			n.State = stateSkipped
			skipped = append(skipped, n.ID)
			eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:skipped", run.ID, n.ID), "node "+n.ID+" skipped: a dependency did not succeed",
				map[string]any{"run": runName(run.ID), "node": n.ID, "state": stateSkipped, "exit_code": 0})
		}
		state[n.ID] = n.State
	}
	if len(skipped) > 0 {
		if err := setNodesState(ctx, tx, run.TenantID, run.ID, skipped, statePending, stateSkipped); err != nil {
			return fmt.Errorf("skip nodes: %w", err)
		}
	}
	pending, dispatched, succeeded := 0, 0, 0
	for _, n := range nodes {
		switch n.State {
		case statePending:
			pending++
		case stateDispatched:
			dispatched++
		case stateSucceeded:
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
		eff.event(EventRunCompleted, run.ID+":completed", "run "+runName(run.ID)+" "+strings.ToLower(final),
			map[string]any{"run": runName(run.ID), "state": final})
		return nil
	}
	slots := int(run.MaxConcurrency) - dispatched
	var ready []*schedNode
	for i := range nodes {
		if len(ready) >= slots {
			break
		}
		n := &nodes[i]
		if n.State == statePending && allDeps(n.DependsOn, state, stateSucceeded) {
			ready = append(ready, n)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	return s.dispatch(ctx, tx, run, ready, eff)
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

// dispatch marks ready nodes DISPATCHED and queues their task messages.
func (s *Service) dispatch(ctx context.Context, tx pgx.Tx, run *runRow, ready []*schedNode, eff *effects) error {
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
	var d orchestratorv1.Dag
	if err := proto.Unmarshal(run.DAG, &d); err != nil {
		return nil, fmt.Errorf("decode dag of run %s: %w", run.ID, err)
	}
	specs := make(map[string]*orchestratorv1.Node, len(d.GetNodes()))
	for _, n := range d.GetNodes() {
		specs[n.GetId()] = n
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
	msgs := make([]*dispatchMsg, 0, len(nodes))
	for _, n := range nodes {
		spec, ok := specs[n.ID]
		if !ok {
			return nil, fmt.Errorf("run %s: node %s is missing from the stored dag", run.ID, n.ID)
		}
		attempt := attempts[n.ID]
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
				Payload:       &messagev1.Envelope_TaskDispatch{TaskDispatch: task},
			},
		})
	}
	return msgs, nil
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
	if len(s) <= limit {
		return s
	}
	h := limit / 2
	t := limit - h
	return strings.ToValidUTF8(s[:h]+fmt.Sprintf("\n... [%d bytes truncated] ...\n", len(s)-limit)+s[len(s)-t:], "\uFFFD")
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
	for _, st := range eff.steps {
		if st.event != nil {
			s.publishEvent(ctx, log, *st.event)
			continue
		}
		m := st.dispatch
		if _, err := s.bus.Publish(ctx, m.subject, m.msgID, m.env); err != nil {
			if m.republish {
				log.ErrorContext(ctx, "re-publish task", logx.KeyNodeID, m.node, logx.Err(err))
				continue
			}
			log.WarnContext(ctx, "publish task; the node goes back to pending", logx.KeyNodeID, m.node, logx.Err(err))
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
	for _, d := range eff.durations {
		s.metrics.nodeDuration.Observe(d.Seconds())
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

// handleResult applies one worker report.
func (s *Service) handleResult(ctx context.Context, msg jetstream.Msg) error {
	var env messagev1.Envelope
	if err := natsx.Unmarshal(msg, &env); err != nil {
		return err
	}
	r := env.GetTaskResult()
	if r == nil || env.GetTenantId() == "" || !ids.Valid(r.GetRunId()) || r.GetNodeId() == "" {
		return natsx.Permanent(fmt.Errorf("not a task result for a run: %s", msg.Subject()))
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
	}
	if res.TimedOut && res.Error == "" {
		res.Error = "timed out"
	}
	if res.ExitCode != 0 || res.Error != "" {
		res.State = stateFailed
	}
	tenant, runID, nodeID := env.GetTenantId(), r.GetRunId(), r.GetNodeId()
	log := s.log.With(logx.KeyTenantID, tenant, logx.KeyRunID, runID, logx.KeyNodeID, nodeID)
	found, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		applied, err := recordResult(ctx, tx, tenant, runID, nodeID, r.GetAttempt(), res)
		if err != nil {
			return fmt.Errorf("record result: %w", err)
		}
		if !applied {
			log.DebugContext(ctx, "ignoring a result for a node not awaiting it", slog.Int("attempt", int(r.GetAttempt())))
			return nil
		}
		eff.durations = append(eff.durations, res.Duration)
		eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:%d:completed", runID, nodeID, r.GetAttempt()),
			fmt.Sprintf("node %s %s (exit %d)", nodeID, strings.ToLower(res.State), res.ExitCode),
			map[string]any{"run": runName(runID), "node": nodeID, "state": res.State, "exit_code": res.ExitCode})
		return s.advance(ctx, tx, run, eff)
	})
	if err != nil {
		return err
	}
	if !found {
		log.WarnContext(ctx, "dropping a result for an unknown run")
	}
	return nil
}

// storable makes worker text safe for a text column and bounded in size.
func storable(s string, limit int) string {
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "\uFFFD")
	}
	return s
}

// recoverRuns re-publishes the dispatches of running runs (a worker may
// never have received them) under their original message ids, and moves
// every unfinished run on.
func (s *Service) recoverRuns(ctx context.Context) error {
	keys, err := activeRuns(ctx, s.db, 1<<30)
	if err != nil {
		return fmt.Errorf("list unfinished runs: %w", err)
	}
	for _, k := range keys {
		_, err := s.withRun(ctx, k.Tenant, k.ID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
			if run.State == stateRunning {
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
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.ErrorContext(ctx, "recover run", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
		}
	}
	if len(keys) > 0 {
		s.log.InfoContext(ctx, "recovered unfinished runs", slog.Int("runs", len(keys)))
	}
	return nil
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

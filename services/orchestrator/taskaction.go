package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/worker"
)

// User actions on a node (spec F-13) and the options of a pipeline that
// ran out of loops (spec F-11).

// Events of task actions.
const (
	EventNodeAction    = "run.node_action"
	EventNodeReopened  = "run.node_reopened"
	EventNodeEscalated = "run.node_escalated"
)

// Limits of task actions.
const (
	// taskControlTimeout bounds the wait for the worker running a node.
	taskControlTimeout = 5 * time.Second
	maxActionMessage   = 2000
	maxLoopsLimit      = 20
)

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// taskNode is what a task action reads of a node.
type taskNode struct {
	runID    string
	state    string
	attempt  int32
	pipeline string
	spec     []byte
}

// TaskAction applies a user's action to one node of a run.
func (s *Service) TaskAction(ctx context.Context, req *orchestratorv1.TaskActionRequest) (*orchestratorv1.TaskActionResponse, error) {
	act := req.GetAction()
	var who identity.Identity
	var err error
	if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY {
		who, err = identity.Require(ctx)
	} else {
		who, err = s.writer(ctx)
	}
	if err != nil {
		return nil, err
	}
	if _, ok := orchestratorv1.TaskActionType_name[int32(act)]; !ok || act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "action: want query, prompt, interrupt, ignore_inspector, ignore_tester, retry, skip, escalate or handoff")
	}
	if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT && strings.TrimSpace(req.GetMessage()) == "" {
		return nil, status.Error(codes.InvalidArgument, "message: prompt needs the guidance to give the Engineer")
	}
	if !nodeIDPattern.MatchString(req.GetNodeId()) {
		return nil, status.Error(codes.InvalidArgument, "node_id: want 1-64 characters of [A-Za-z0-9_.-]")
	}
	if len(req.GetMessage()) > maxActionMessage {
		return nil, status.Errorf(codes.InvalidArgument, "message: at most %d bytes", maxActionMessage)
	}
	if req.GetMaxLoops() < 0 || req.GetMaxLoops() > maxLoopsLimit {
		return nil, status.Errorf(codes.InvalidArgument, "max_loops: must be between 0 and %d", maxLoopsLimit)
	}
	runID, err := s.actionRun(ctx, who, req)
	if err != nil {
		return nil, err
	}
	n, err := s.taskNode(ctx, who.TenantID, runID, req.GetNodeId())
	if err != nil {
		return nil, err
	}
	resp := &orchestratorv1.TaskActionResponse{Run: runName(runID), NodeId: req.GetNodeId(), Action: act}
	log := s.log.With(logx.KeyTenantID, who.TenantID, logx.KeyRunID, runID, logx.KeyNodeID, req.GetNodeId(), slog.String("action", act.String()))
	switch act {
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY:
		resp.Detail = "node " + strings.ToLower(n.state)
		if n.state == stateDispatched {
			if reply, err := s.askWorker(ctx, who.TenantID, runID, req.GetNodeId(), n.attempt, act, ""); err == nil {
				resp.Pipeline, resp.Detail = reply.GetPipeline(), reply.GetDetail()
			} else {
				resp.Detail = "node dispatched; no worker has started it yet"
			}
		}
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_INTERRUPT, orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF:
		if n.state != stateDispatched {
			what := "nothing to interrupt"
			if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF {
				what = "no pipeline to hand off"
			}
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is not running (%s): %s", req.GetNodeId(), strings.ToLower(n.state), what)
		}
		reply, err := s.askWorker(ctx, who.TenantID, runID, req.GetNodeId(), n.attempt, act, req.GetMessage())
		if err != nil {
			return nil, err
		}
		resp.Pipeline, resp.Detail = reply.GetPipeline(), reply.GetDetail()
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_INSPECTOR, orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_TESTER:
		set := func(spec *orchestratorv1.Node) {
			if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_INSPECTOR {
				spec.IgnoreInspector = true
			} else {
				spec.IgnoreTester = true
			}
		}
		if err := s.changeSpec(ctx, who.TenantID, runID, req.GetNodeId(), n, act, "", set, resp, specChangeWords{
			recorded: "the override is recorded and applies from the node's next stage or attempt",
			pending:  "the stage will be skipped when the node runs",
			reopened: "the node runs again without that stage",
			tooLate:  "the override no longer applies",
		}); err != nil {
			return nil, err
		}
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT:
		guidance := strings.TrimSpace(req.GetMessage())
		add := func(spec *orchestratorv1.Node) { spec.Guidance = append(spec.Guidance, guidance) }
		if err := s.changeSpec(ctx, who.TenantID, runID, req.GetNodeId(), n, act, guidance, add, resp, specChangeWords{
			recorded: "the guidance is recorded; the Engineer reads it from the node's next attempt",
			pending:  "the Engineer starts with the guidance when the node runs",
			reopened: "the node runs again with the guidance",
			tooLate:  "guidance no longer applies",
		}); err != nil {
			return nil, err
		}
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_SKIP:
		if n.state != stateFailed && n.state != statePending {
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s: only a failed or pending node can be skipped", req.GetNodeId(), strings.ToLower(n.state))
		}
		if err := s.skipNode(ctx, who, runID, req.GetNodeId(), req.GetMessage()); err != nil {
			return nil, err
		}
		resp.Detail = "the run goes on without the node; the nodes that depend on it run as if it had succeeded"
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY:
		if n.state != stateFailed {
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s: only a failed node can be retried", req.GetNodeId(), strings.ToLower(n.state))
		}
		loops := req.GetMaxLoops()
		if err := s.reopenNode(ctx, who.TenantID, runID, req.GetNodeId(), act, func(spec *orchestratorv1.Node) {
			if loops > 0 {
				spec.MaxLoops = loops
			}
		}); err != nil {
			return nil, err
		}
		resp.Detail = "the node runs again"
		if loops > 0 {
			resp.Detail += fmt.Sprintf(" with max_loops %d", loops)
		}
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_ESCALATE:
		if err := s.escalate(ctx, who, runID, req.GetNodeId(), n, req.GetMessage()); err != nil {
			return nil, err
		}
		resp.Detail = "the node is cancelled and the Architect is asked for a corrective plan"
	}
	log.InfoContext(ctx, "task action", slog.String("detail", resp.Detail))
	// The node's state after the action.
	if after, err := s.taskNode(ctx, who.TenantID, runID, req.GetNodeId()); err == nil {
		resp.NodeState = orchestratorv1.NodeState(orchestratorv1.NodeState_value["NODE_STATE_"+after.state])
		if resp.Pipeline == nil && after.pipeline != "" {
			resp.Pipeline = &orchestratorv1.PipelineStatus{}
			_ = protojson.Unmarshal([]byte(after.pipeline), resp.Pipeline)
		}
	}
	if fb := resp.GetPipeline().GetFeedback(); len(fb) > 0 {
		resp.LastFeedback = fb[len(fb)-1]
	}
	if sess := s.runSession(ctx, who.TenantID, runID); sess != "" && act != orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY {
		s.publishEvent(ctx, log, topology.Event{Tenant: who.TenantID, Session: sess, ID: ids.New(), Type: EventNodeAction,
			Source: topology.AgentOrchestrator, CorrelationID: runName(runID),
			Text: fmt.Sprintf("node %s: %s (%s)", req.GetNodeId(), actionWord(act), resp.Detail),
			Data: map[string]any{"run": runName(runID), "node": req.GetNodeId(), "action": actionWord(act), "user": who.UserID}})
	}
	return resp, nil
}

// specChangeWords is what an action that changes a node's spec says in
// each of the node's states.
type specChangeWords struct{ recorded, pending, reopened, tooLate string }

// changeSpec applies mutate to a node's spec: a running node's spec keeps
// it (so that a redelivery or a later attempt has it) and its worker is told
// at once; a pending node starts with it; a failed node runs again with it.
func (s *Service) changeSpec(ctx context.Context, tenant, runID, nodeID string, n *taskNode, act orchestratorv1.TaskActionType,
	message string, mutate func(*orchestratorv1.Node), resp *orchestratorv1.TaskActionResponse, words specChangeWords) error {
	switch n.state {
	case stateDispatched:
		if err := s.updateSpec(ctx, tenant, runID, nodeID, mutate); err != nil {
			return err
		}
		reply, err := s.askWorker(ctx, tenant, runID, nodeID, n.attempt, act, message)
		if err != nil {
			resp.Detail = words.recorded
		} else {
			resp.Pipeline, resp.Detail = reply.GetPipeline(), reply.GetDetail()
		}
	case statePending:
		if err := s.updateSpec(ctx, tenant, runID, nodeID, mutate); err != nil {
			return err
		}
		resp.Detail = words.pending
	case stateFailed:
		if err := s.reopenNode(ctx, tenant, runID, nodeID, act, mutate); err != nil {
			return err
		}
		resp.Detail = words.reopened
	default:
		return status.Errorf(codes.FailedPrecondition, "node %s is %s: %s", nodeID, strings.ToLower(n.state), words.tooLate)
	}
	return nil
}

// actionWord is the /task spelling of an action.
func actionWord(a orchestratorv1.TaskActionType) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "TASK_ACTION_TYPE_"))
}

// ParseTaskAction reads the /task spelling of an action.
func ParseTaskAction(s string) (orchestratorv1.TaskActionType, bool) {
	v, ok := orchestratorv1.TaskActionType_value["TASK_ACTION_TYPE_"+strings.ToUpper(strings.TrimSpace(s))]
	if !ok || v == 0 {
		return 0, false
	}
	return orchestratorv1.TaskActionType(v), true
}

// actionRun resolves the run of a task action: the named one, or the
// session's newest run holding the node.
func (s *Service) actionRun(ctx context.Context, who identity.Identity, req *orchestratorv1.TaskActionRequest) (string, error) {
	if req.GetName() != "" {
		id, err := parseRunName(req.GetName())
		if err != nil {
			return "", err
		}
		return id, s.checkRun(ctx, who, id)
	}
	if req.GetSession() == "" {
		return "", status.Error(codes.InvalidArgument, "name or session: one is required")
	}
	session, err := parseSessionID("session", req.GetSession())
	if err != nil {
		return "", err
	}
	var id string
	err = s.db.QueryRow(ctx, `SELECT r.id FROM runs r JOIN nodes n ON n.tenant_id = r.tenant_id AND n.run_id = r.id
		WHERE r.tenant_id = $1 AND r.session_id = $2 AND n.node_id = $3 AND ($4 = '' OR r.user_id = $4)
		ORDER BY r.create_time DESC, r.id DESC LIMIT 1`, who.TenantID, session, req.GetNodeId(), runOwner(who)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", status.Errorf(codes.NotFound, "no run of session %s has a node %q", session, req.GetNodeId())
	}
	if err != nil {
		return "", s.internal(ctx, "find the node's run", err)
	}
	return id, nil
}

func (s *Service) taskNode(ctx context.Context, tenant, runID, nodeID string) (*taskNode, error) {
	n := &taskNode{runID: runID}
	err := s.db.QueryRow(ctx, `SELECT state, attempt, pipeline, spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
		tenant, runID, nodeID).Scan(&n.state, &n.attempt, &n.pipeline, &n.spec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, status.Errorf(codes.NotFound, "run %s has no node %q", runName(runID), nodeID)
	}
	if err != nil {
		return nil, s.internal(ctx, "load node", err)
	}
	return n, nil
}

func (s *Service) runSession(ctx context.Context, tenant, runID string) string {
	var sess string
	_ = s.db.QueryRow(ctx, `SELECT session_id FROM runs WHERE tenant_id = $1 AND id = $2`, tenant, runID).Scan(&sess)
	return sess
}

// askWorker sends a TaskControl to the worker running the node and waits
// for its answer.
func (s *Service) askWorker(ctx context.Context, tenant, runID, nodeID string, attempt int32, act orchestratorv1.TaskActionType, message string) (*orchestratorv1.TaskControlReply, error) {
	b, err := proto.Marshal(&orchestratorv1.TaskControl{TenantId: tenant, RunId: runID, NodeId: nodeID, Attempt: attempt, Action: act, Message: message})
	if err != nil {
		return nil, s.internal(ctx, "encode task control", err)
	}
	rctx, cancel := context.WithTimeout(ctx, taskControlTimeout)
	defer cancel()
	msg, err := s.bus.Conn.RequestWithContext(rctx, worker.ControlSubject(s.bus), b)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return nil, status.Errorf(codes.Unavailable, "no worker answered for node %s (attempt %d): it may be waiting in the queue; try again", nodeID, attempt)
	}
	if err != nil {
		return nil, s.internal(ctx, "ask the worker", err)
	}
	var reply orchestratorv1.TaskControlReply
	if err := proto.Unmarshal(msg.Data, &reply); err != nil {
		return nil, s.internal(ctx, "decode the worker's answer", err)
	}
	return &reply, nil
}

// loadSpec decodes a node's stored spec, or finds it in the run's DAG.
func loadSpec(ctx context.Context, q querier, tenant, runID, nodeID string, raw []byte) (*orchestratorv1.Node, error) {
	if len(raw) > 0 {
		var n orchestratorv1.Node
		if err := proto.Unmarshal(raw, &n); err != nil {
			return nil, fmt.Errorf("decode node %s: %w", nodeID, err)
		}
		return &n, nil
	}
	run, err := getRun(ctx, q, tenant, runID)
	if err != nil {
		return nil, err
	}
	var d orchestratorv1.Dag
	if err := proto.Unmarshal(run.DAG, &d); err != nil {
		return nil, fmt.Errorf("decode dag: %w", err)
	}
	for _, n := range d.GetNodes() {
		if n.GetId() == nodeID {
			return n, nil
		}
	}
	return nil, fmt.Errorf("node %s is missing from the dag", nodeID)
}

// updateSpec changes a node's stored spec under the run's lock.
func (s *Service) updateSpec(ctx context.Context, tenant, runID, nodeID string, mutate func(*orchestratorv1.Node)) error {
	_, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, tenant, runID, nodeID).Scan(&raw); err != nil {
			return err
		}
		spec, err := loadSpec(ctx, tx, tenant, runID, nodeID, raw)
		if err != nil {
			return err
		}
		mutate(spec)
		b, err := proto.Marshal(spec)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE nodes SET spec = $4 WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, tenant, runID, nodeID, b)
		return err
	})
	if err != nil {
		return s.internal(ctx, "update node", err)
	}
	return nil
}

// failFastReason is the error of a node fail_fast cancelled; it tells those
// nodes from the ones a user cancelled.
const failFastReason = "cancelled by fail_fast: another node failed"

// cancelForFailFast cancels pending nodes under fail_fast.
func cancelForFailFast(ctx context.Context, tx pgx.Tx, tenant, runID string, nodeIDs []string) error {
	_, err := tx.Exec(ctx, `UPDATE nodes SET state = 'CANCELLED', end_time = now(), error = $4
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = ANY($3) AND state = 'PENDING'`, tenant, runID, nodeIDs, failFastReason)
	return err
}

// reopenNode runs a failed node again (spec F-11's options): the node goes
// back to PENDING with its spec changed, the dependents its failure skipped
// and the nodes fail_fast cancelled become pending again (fail_fast cancels
// them anew while another node stays failed, except the node itself and
// those downstream of it), and a run that had ended runs again (owned by
// this replica). Nodes a user cancelled stay cancelled.
func (s *Service) reopenNode(ctx context.Context, tenant, runID, nodeID string, act orchestratorv1.TaskActionType, mutate func(*orchestratorv1.Node)) error {
	_, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		var st string
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT state, spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
			tenant, runID, nodeID).Scan(&st, &raw); err != nil {
			return err
		}
		if st != stateFailed {
			return &errState{fmt.Sprintf("node %s is %s, not failed", nodeID, strings.ToLower(st))}
		}
		if run.State == stateCancelled {
			return &errState{fmt.Sprintf("run %s was cancelled", runName(runID))}
		}
		spec, err := loadSpec(ctx, tx, tenant, runID, nodeID, raw)
		if err != nil {
			return err
		}
		mutate(spec)
		b, err := proto.Marshal(spec)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET state = 'PENDING', spec = $4, not_before = NULL, paused = false, end_time = NULL
			WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, tenant, runID, nodeID, b); err != nil {
			return err
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
		eff.event(EventNodeReopened, fmt.Sprintf("%s:%s:reopened:%s", runID, nodeID, ids.New()),
			fmt.Sprintf("node %s runs again (%s)", nodeID, actionWord(act)),
			map[string]any{"run": runName(runID), "node": nodeID, "action": actionWord(act)})
		return s.advance(ctx, tx, run, eff)
	})
	return s.actionStatus(ctx, "reopen node", err)
}

// actionStatus is the gRPC status of a task action's decision: a refused
// state change is FailedPrecondition, anything else internal.
func (s *Service) actionStatus(ctx context.Context, what string, err error) error {
	var es *errState
	if errors.As(err, &es) {
		return status.Error(codes.FailedPrecondition, es.msg)
	}
	if err != nil {
		return s.internal(ctx, what, err)
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
			reopened = reopened + 1
		WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID, s.cfg.ReplicaID, s.cfg.LeaseTTL.Microseconds()); err != nil {
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
			return &errState{fmt.Sprintf("run %s was cancelled", runName(runID))}
		}
		tag, err := tx.Exec(ctx, `UPDATE nodes SET state = 'SKIPPED', user_skipped = true, error = $4, end_time = now(), not_before = NULL
			WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3 AND state IN ('FAILED', 'PENDING')`, tenant, runID, nodeID, reason)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return &errState{fmt.Sprintf("node %s is no longer failed or pending", nodeID)}
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
		eff.event(EventNodeCompleted, fmt.Sprintf("%s:%s:user-skipped:%s", runID, nodeID, ids.New()), "node "+nodeID+" skipped by "+who.UserID,
			map[string]any{"run": runName(runID), "node": nodeID, "state": stateSkipped, "exit_code": 0, "user": who.UserID})
		return s.advance(ctx, tx, run, eff)
	})
	return s.actionStatus(ctx, "skip node", err)
}

// escalate cancels a node that has not ended and asks the Architect for a
// corrective plan (spec F-11 option 4). A run without a session is refused
// before anything changes: there is no Architect conversation to ask.
func (s *Service) escalate(ctx context.Context, who identity.Identity, runID, nodeID string, n *taskNode, message string) error {
	run, err := getRun(ctx, s.db, who.TenantID, runID)
	if err != nil {
		return s.internal(ctx, "load run", err)
	}
	if run.SessionID == "" {
		return status.Errorf(codes.FailedPrecondition, "run %s has no session: there is no Architect conversation to escalate to", runName(runID))
	}
	if n.state == statePending || n.state == stateDispatched {
		if _, err := s.control(ctx, who.TenantID, runID, nodeID, actCancel); err != nil {
			var es *errState
			if !errors.As(err, &es) {
				return s.internal(ctx, "cancel node", err)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Corrective plan needed: task %s of %s could not be completed", nodeID, runName(runID))
	if n.pipeline != "" {
		var p orchestratorv1.PipelineStatus
		if protojson.Unmarshal([]byte(n.pipeline), &p) == nil && len(p.GetFeedback()) > 0 {
			fmt.Fprintf(&b, " after %d loop(s). Last feedback:\n%s", p.GetLoops(), truncateMiddle(p.GetFeedback()[len(p.GetFeedback())-1], 2000))
		}
	}
	if message != "" {
		b.WriteString("\nThe user says: " + message)
	}
	if err := s.askArchitect(ctx, who.TenantID, run, "escalate:"+nodeID+":"+ids.New(), b.String(), map[string]string{"sylk.escalated_node": nodeID}); err != nil {
		return err
	}
	log := s.log.With(logx.KeyTenantID, who.TenantID, logx.KeyRunID, runID)
	s.publishEvent(ctx, log, topology.Event{Tenant: who.TenantID, Session: run.SessionID, ID: ids.New(), Type: EventNodeEscalated,
		Source: topology.AgentOrchestrator, CorrelationID: runName(runID),
		Text: fmt.Sprintf("node %s escalated to the Architect", nodeID),
		Data: map[string]any{"run": runName(runID), "node": nodeID}})
	return nil
}

// MetaRun names the run a message to the Architect is about.
const MetaRun = "sylk.run"

// askArchitect sends a request to the Architect's inbox as the run's user
// (a USER_INPUT envelope, the Architect's plan request), so that it drafts a
// plan awaiting approval in the run's session.
func (s *Service) askArchitect(ctx context.Context, tenant string, run *runRow, key, text string, meta map[string]string) error {
	if meta == nil {
		meta = map[string]string{}
	}
	meta[MetaRun] = runName(run.ID)
	env := &messagev1.Envelope{
		Id: ids.New(), CorrelationId: runName(run.ID), TenantId: tenant, SessionId: run.SessionID, UserId: run.UserID,
		Source: topology.AgentOrchestrator, Target: topology.AgentArchitect, Type: messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt: timestamppb.Now(), Priority: messagev1.Priority_PRIORITY_PIPELINE, Metadata: meta,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
	defer cancel()
	if err := topology.EnsureAgents(pctx, s.bus); err != nil {
		return s.internal(ctx, "provision the agents' inboxes", err)
	}
	if _, err := s.bus.Publish(pctx, topology.InboxSubject(s.bus, topology.AgentArchitect), run.ID+":"+key, env); err != nil {
		return s.internal(ctx, "send to the Architect", err)
	}
	return nil
}

// completedEventID is the id of a run's completion event: a reopened run
// completes again under a new id, which the event stream does not drop as a
// duplicate.
func completedEventID(ctx context.Context, q querier, run *runRow) string {
	var n int32
	if err := q.QueryRow(ctx, `SELECT reopened FROM runs WHERE tenant_id = $1 AND id = $2`, run.TenantID, run.ID).Scan(&n); err != nil || n == 0 {
		return run.ID + ":completed"
	}
	return fmt.Sprintf("%s:completed:%d", run.ID, n)
}

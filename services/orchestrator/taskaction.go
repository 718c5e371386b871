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
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// User actions on a node (spec F-13) and the options of a pipeline that
// ran out of loops (spec F-11).

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
func (s *Service) TaskAction(ctx context.Context, req *orchestratorv1.TaskActionRequest) (_ *orchestratorv1.TaskActionResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "task action", err) }()
	act := req.GetAction()
	var who identity.Identity
	if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY {
		who, err = identity.Require(ctx)
	} else {
		who, err = s.writer(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := validateTaskAction(req); err != nil {
		return nil, err
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
	if err := s.applyAction(ctx, who, runID, n, req, resp); err != nil {
		return nil, err
	}
	log.InfoContext(ctx, "task action", slog.String("detail", resp.Detail))
	// The node's state after the action.
	if after, err := s.taskNode(ctx, who.TenantID, runID, req.GetNodeId()); err == nil {
		resp.NodeState = nodeStateOf(after.state)
		if resp.Pipeline == nil && after.pipeline != "" {
			resp.Pipeline = &orchestratorv1.PipelineStatus{}
			_ = protojson.Unmarshal([]byte(after.pipeline), resp.Pipeline)
		}
	}
	if fb := resp.GetPipeline().GetFeedback(); len(fb) > 0 {
		resp.LastFeedback = fb[len(fb)-1]
	}
	if act != orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY {
		s.publishEvent(ctx, log, who.TenantID, s.runSession(ctx, who.TenantID, runID), ids.New(),
			nodeEvent(eventv1.EventType_EVENT_TYPE_NODE_ACTION, runID, fmt.Sprintf("node %s: %s (%s)", req.GetNodeId(), actionWord(act), resp.Detail),
				&eventv1.NodeEvent{Node: req.GetNodeId(), Action: actionWord(act), User: who.UserID, State: resp.GetNodeState()}))
	}
	return resp, nil
}

// validateTaskAction checks a task action's fields.
func validateTaskAction(req *orchestratorv1.TaskActionRequest) error {
	act := req.GetAction()
	switch {
	case act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_UNSPECIFIED || orchestratorv1.TaskActionType_name[int32(act)] == "":
		return apierr.Invalid("action", "want query, prompt, interrupt, ignore_inspector, ignore_tester, retry, skip, escalate or handoff")
	case act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT && strings.TrimSpace(req.GetMessage()) == "":
		return apierr.Invalid("message", "prompt needs the guidance to give the Engineer")
	case !nodeIDPattern.MatchString(req.GetNodeId()):
		return apierr.Invalid("node_id", "want 1-64 characters of [A-Za-z0-9_.-]")
	case len(req.GetMessage()) > maxActionMessage:
		return apierr.Invalid("message", "at most %d bytes", maxActionMessage)
	case req.GetMaxLoops() < 0 || req.GetMaxLoops() > maxLoopsLimit:
		return apierr.Invalid("max_loops", "must be between 0 and %d", maxLoopsLimit)
	}
	return nil
}

// Words of the actions that change a node's spec.
var (
	ignoreWords = specChangeWords{
		recorded: "the override is recorded and applies from the node's next stage or attempt",
		pending:  "the stage will be skipped when the node runs",
		reopened: "the node runs again without that stage",
		tooLate:  "the override no longer applies",
	}
	guidanceWords = specChangeWords{
		recorded: "the guidance is recorded; the Engineer reads it from the node's next attempt",
		pending:  "the Engineer starts with the guidance when the node runs",
		reopened: "the node runs again with the guidance",
		tooLate:  "guidance no longer applies",
	}
)

// applyAction carries out a task action on node n and fills resp with
// what it did.
func (s *Service) applyAction(ctx context.Context, who identity.Identity, runID string, n *taskNode, req *orchestratorv1.TaskActionRequest,
	resp *orchestratorv1.TaskActionResponse) error {
	act, nodeID := req.GetAction(), req.GetNodeId()
	switch act {
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY:
		resp.Detail = "node " + strings.ToLower(n.state)
		if n.state == stateDispatched {
			if reply, err := s.askWorker(ctx, who.TenantID, runID, nodeID, n.attempt, act, ""); err == nil {
				resp.Pipeline, resp.Detail = reply.GetPipeline(), reply.GetDetail()
			} else {
				resp.Detail = "node dispatched; no worker has started it yet"
			}
		}
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_INTERRUPT, orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF:
		return s.tellWorker(ctx, who.TenantID, runID, n, req, resp)
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_INSPECTOR, orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_TESTER:
		set := func(spec *orchestratorv1.Node) {
			if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_INSPECTOR {
				spec.IgnoreInspector = true
			} else {
				spec.IgnoreTester = true
			}
		}
		return s.changeSpec(ctx, who.TenantID, runID, nodeID, n, act, "", set, resp, ignoreWords)
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT:
		guidance := strings.TrimSpace(req.GetMessage())
		add := func(spec *orchestratorv1.Node) { spec.Guidance = append(spec.Guidance, guidance) }
		return s.changeSpec(ctx, who.TenantID, runID, nodeID, n, act, guidance, add, resp, guidanceWords)
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_SKIP:
		if n.state != stateFailed && n.state != statePending {
			return errNodeNotFailed.Withf("node %s is %s: only a failed or pending node can be skipped", nodeID, strings.ToLower(n.state))
		}
		if err := s.skipNode(ctx, who, runID, nodeID, req.GetMessage()); err != nil {
			return err
		}
		resp.Detail = "the run goes on without the node; the nodes that depend on it run as if it had succeeded"
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY:
		return s.retryNode(ctx, who.TenantID, runID, n, req, resp)
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_ESCALATE:
		if err := s.escalate(ctx, who, runID, nodeID, n, req.GetMessage()); err != nil {
			return err
		}
		resp.Detail = "the node is cancelled and the Architect is asked for a corrective plan"
	}
	return nil
}

// tellWorker passes an interrupt or a handoff to the worker running the
// node.
func (s *Service) tellWorker(ctx context.Context, tenant, runID string, n *taskNode, req *orchestratorv1.TaskActionRequest,
	resp *orchestratorv1.TaskActionResponse) error {
	act := req.GetAction()
	if n.state != stateDispatched {
		what := "nothing to interrupt"
		if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF {
			what = "no pipeline to hand off"
		}
		return errNodeNotRunning.Withf("node %s is not running (%s): %s", req.GetNodeId(), strings.ToLower(n.state), what)
	}
	reply, err := s.askWorker(ctx, tenant, runID, req.GetNodeId(), n.attempt, act, req.GetMessage())
	if err != nil {
		return err
	}
	resp.Pipeline, resp.Detail = reply.GetPipeline(), reply.GetDetail()
	return nil
}

// retryNode runs a failed node (or one that changed nothing) again, with
// max_loops raised when asked.
func (s *Service) retryNode(ctx context.Context, tenant, runID string, n *taskNode, req *orchestratorv1.TaskActionRequest,
	resp *orchestratorv1.TaskActionResponse) error {
	if n.state != stateFailed && n.state != stateNoChanges {
		return errNodeNotFailed.Withf("node %s is %s: only a failed node or one that changed nothing can be retried", req.GetNodeId(),
			strings.ToLower(n.state))
	}
	loops := req.GetMaxLoops()
	if err := s.reopenNode(ctx, tenant, runID, req.GetNodeId(), req.GetAction(), func(spec *orchestratorv1.Node) {
		if loops > 0 {
			spec.MaxLoops = loops
		}
	}); err != nil {
		return err
	}
	resp.Detail = "the node runs again"
	if loops > 0 {
		resp.Detail += fmt.Sprintf(" with max_loops %d", loops)
	}
	return nil
}

// specChangeWords is what an action that changes a node's spec says in
// each of the node's states.
type specChangeWords struct{ recorded, pending, reopened, tooLate string }

// changeSpec applies mutate to a node's spec: a running node's spec keeps
// it (so that a redelivery or a later attempt has it) and its worker is told
// at once; a pending node starts with it; a failed node, or one that
// changed nothing, runs again with it.
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
	case stateFailed, stateNoChanges:
		if err := s.reopenNode(ctx, tenant, runID, nodeID, act, mutate); err != nil {
			return err
		}
		resp.Detail = words.reopened
	default:
		return errNodeEnded.Withf("node %s is %s: %s", nodeID, strings.ToLower(n.state), words.tooLate)
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
		return "", apierr.Invalid("name or session", "one is required")
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
		return "", apierr.NotFound("node", req.GetNodeId()).Withf("no run of session %s has a node %q", session, req.GetNodeId())
	}
	if err != nil {
		return "", fmt.Errorf("find the node's run: %w", err)
	}
	return id, nil
}

func (s *Service) taskNode(ctx context.Context, tenant, runID, nodeID string) (*taskNode, error) {
	n := &taskNode{runID: runID}
	err := s.db.QueryRow(ctx, `SELECT state, attempt, pipeline, spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`,
		tenant, runID, nodeID).Scan(&n.state, &n.attempt, &n.pipeline, &n.spec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nodeNotFound(runName(runID), nodeID)
	}
	if err != nil {
		return nil, fmt.Errorf("load node: %w", err)
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
		return nil, fmt.Errorf("encode task control: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, taskControlTimeout)
	defer cancel()
	msg, err := s.bus.Conn.RequestWithContext(rctx, topology.TaskControlSubject(s.bus), b)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return nil, errWorkerUnavailable.Withf("no worker answered for node %s (attempt %d): it may be waiting in the queue; try again", nodeID, attempt)
	}
	if err != nil {
		return nil, fmt.Errorf("ask the worker: %w", err)
	}
	var reply orchestratorv1.TaskControlReply
	if err := proto.Unmarshal(msg.Data, &reply); err != nil {
		return nil, fmt.Errorf("decode the worker's answer: %w", err)
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

// changedSpec is a node's spec (stored as raw, or in the run's DAG) with
// mutate applied, encoded to be stored.
func changedSpec(ctx context.Context, q querier, tenant, runID, nodeID string, raw []byte, mutate func(*orchestratorv1.Node)) ([]byte, error) {
	spec, err := loadSpec(ctx, q, tenant, runID, nodeID, raw)
	if err != nil {
		return nil, err
	}
	mutate(spec)
	return proto.Marshal(spec)
}

// updateSpec changes a node's stored spec under the run's lock.
func (s *Service) updateSpec(ctx context.Context, tenant, runID, nodeID string, mutate func(*orchestratorv1.Node)) error {
	_, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT spec FROM nodes WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, tenant, runID, nodeID).Scan(&raw); err != nil {
			return err
		}
		b, err := changedSpec(ctx, tx, tenant, runID, nodeID, raw, mutate)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE nodes SET spec = $4 WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3`, tenant, runID, nodeID, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("update node: %w", err)
	}
	return nil
}

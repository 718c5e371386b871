package architect

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc/status"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// A plan's todos (spec E-12): one per task, in the plan's order, each
// where its node of the plan's run stands. A node that changed nothing
// (NO_CHANGES) is done with nothing done, and its todo says so.

// todoStates maps a node's state to its todo's.
var todoStates = map[orchestratorv1.NodeState]architectv1.PlanTodoState{
	orchestratorv1.NodeState_NODE_STATE_PENDING:    architectv1.PlanTodoState_PLAN_TODO_STATE_PENDING,
	orchestratorv1.NodeState_NODE_STATE_PAUSED:     architectv1.PlanTodoState_PLAN_TODO_STATE_PENDING,
	orchestratorv1.NodeState_NODE_STATE_DISPATCHED: architectv1.PlanTodoState_PLAN_TODO_STATE_IN_PROGRESS,
	orchestratorv1.NodeState_NODE_STATE_SUCCEEDED:  architectv1.PlanTodoState_PLAN_TODO_STATE_COMPLETED,
	orchestratorv1.NodeState_NODE_STATE_NO_CHANGES: architectv1.PlanTodoState_PLAN_TODO_STATE_COMPLETED,
	orchestratorv1.NodeState_NODE_STATE_FAILED:     architectv1.PlanTodoState_PLAN_TODO_STATE_FAILED,
	orchestratorv1.NodeState_NODE_STATE_SKIPPED:    architectv1.PlanTodoState_PLAN_TODO_STATE_SKIPPED,
	orchestratorv1.NodeState_NODE_STATE_CANCELLED:  architectv1.PlanTodoState_PLAN_TODO_STATE_SKIPPED,
}

// todosOf are the todos of d's tasks, their states from run (all pending
// without one).
func todosOf(d *orchestratorv1.Dag, run *orchestratorv1.Run) []*architectv1.PlanTodo {
	nodes := map[string]*orchestratorv1.NodeStatus{}
	for _, n := range run.GetNodes() {
		nodes[n.GetNodeId()] = n
	}
	out := make([]*architectv1.PlanTodo, 0, len(d.GetNodes()))
	for _, n := range d.GetNodes() {
		t := &architectv1.PlanTodo{NodeId: n.GetId(), Content: n.GetName(), State: architectv1.PlanTodoState_PLAN_TODO_STATE_PENDING}
		if t.Content == "" {
			t.Content = n.GetId()
		}
		if st, ok := nodes[n.GetId()]; ok {
			if state, known := todoStates[st.GetState()]; known {
				t.State = state
			}
			switch st.GetState() {
			case orchestratorv1.NodeState_NODE_STATE_NO_CHANGES:
				t.Content += " (done with no change made"
				if why := strings.Join(strings.Fields(st.GetError()), " "); why != "" {
					t.Content += ": " + clip(why, maxConsultLine)
				}
				t.Content += ")"
			case orchestratorv1.NodeState_NODE_STATE_CANCELLED:
				t.Content += " (cancelled)"
			}
		}
		out = append(out, t)
	}
	return out
}

// runOf reads p's run from the orchestrator, as who, for its todos. When
// it cannot be read the todos stay pending and note says why ("" when the
// plan has no run, or it was read).
func (s *Service) runOf(ctx context.Context, who identity.Identity, p plan) (run *orchestratorv1.Run, note string) {
	if p.Run == "" {
		return nil, ""
	}
	if s.orchestrator == nil {
		return nil, "the run's progress is not shown: no orchestrator is configured"
	}
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(ctx, who), s.cfg.OrchestratorTimeout)
	defer cancel()
	resp, err := s.orchestrator.GetRun(cctx, &orchestratorv1.GetRunRequest{Name: p.Run})
	if err != nil {
		s.log.WarnContext(ctx, "read the plan's run", slog.String("plan", p.name()), logx.Err(err))
		return nil, "the run's progress could not be read: " + clip(status.Convert(err).Message(), maxConsultLine)
	}
	return resp.GetRun(), ""
}

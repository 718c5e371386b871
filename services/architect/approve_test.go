package architect

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// Approving a plan on a repository starts its run on the repository's path
// (resolved through the Librarian), delivered as a branch, with the
// session's pushing, review persona and limits; the run is the latest
// version's.
func TestApproveRunsOnTheRepository(t *testing.T) {
	t.Parallel()
	f, p := newFlow(t, Config{})
	ctx := as("t1", "u1")
	session := p.guide.session("repositories/r1", &guidev1.SessionConfig{AllowPush: true, ReviewPersona: "security", MaxEngineers: 2})
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: session, Request: "add a --version flag to cmd/foo"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	revised, err := f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: name, Feedback: "remove step 1"})
	require.NoError(t, err)

	approved, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, int32(2), approved.GetPlan().GetVersion())
	require.False(t, approved.GetPlan().GetAutoApproved())
	calls, _ := f.orch.recorded()
	require.Len(t, calls, 1)
	run := calls[0]
	require.Equal(t, "repositories/r1", run.GetRepository(), "the name: the orchestrator resolves it as the caller")
	require.True(t, run.GetDeliver())
	require.True(t, run.GetAllowPush())
	require.Equal(t, "security", run.GetReviewPersona())
	require.Equal(t, int32(2), run.GetSessionLimits().GetMaxEngineers())
	require.True(t, proto.Equal(revised.GetPlan().GetDag(), run.GetDag()), "the latest version runs")
	require.Len(t, run.GetDag().GetNodes(), 2)

	// A plan without a repository runs without one, and delivers nothing.
	plain, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("", nil), Request: "add a --version flag"})
	require.NoError(t, err)
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: plain.GetPlan().GetName()})
	require.NoError(t, err)
	calls, _ = f.orch.recorded()
	require.Empty(t, calls[1].GetRepository())
	require.False(t, calls[1].GetDeliver())
	require.False(t, calls[1].GetAllowPush())
}

// A plan's repository that is gone, or a Librarian that does not answer,
// fails the approval with a reason, and the plan keeps waiting.
func TestApproveWhenTheRepositoryCannotBeResolved(t *testing.T) {
	t.Parallel()
	f, p := newFlow(t, Config{ConsultTimeout: 200 * time.Millisecond})
	ctx := as("t1", "u1")
	gone, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("repositories/gone", nil), Request: "add a flag"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(gone.GetPlan().GetConsultation().GetCodebaseHealth(), "unavailable: the librarian: repository"))
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: gone.GetPlan().GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonRepositoryGone, "repositories/gone is not registered any more")

	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("repositories/r1", nil), Request: "add a flag"})
	require.NoError(t, err)
	p.librarian.setHang(true)
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: created.GetPlan().GetName()})
	testenv.RequireCode(t, err, codes.Unavailable, "librarian unavailable; retry the approval")
	calls, _ := f.orch.recorded()
	require.Empty(t, calls)
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: created.GetPlan().GetName()})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, got.GetPlan().GetState())
}

// A plan's todos follow its run's nodes: a node that changed nothing is
// completed with nothing done, and says so. A run that cannot be read
// leaves the todos pending with a note.
func TestTodosFollowTheRun(t *testing.T) {
	t.Parallel()
	f, p := newFlow(t, Config{})
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("repositories/r1", nil), Request: "fix the crash in pkg/x"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	approved, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
	require.NoError(t, err)
	for _, td := range approved.GetPlan().GetTodos() {
		require.Equal(t, architectv1.PlanTodoState_PLAN_TODO_STATE_PENDING, td.GetState())
	}
	run := approved.GetRun().GetName()
	f.orch.setNodes(run,
		&orchestratorv1.NodeStatus{NodeId: "reproduce", State: orchestratorv1.NodeState_NODE_STATE_SUCCEEDED},
		&orchestratorv1.NodeStatus{NodeId: "fix", State: orchestratorv1.NodeState_NODE_STATE_NO_CHANGES, Error: "no model is configured"},
		&orchestratorv1.NodeStatus{NodeId: "verify", State: orchestratorv1.NodeState_NODE_STATE_DISPATCHED})
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
	require.NoError(t, err)
	type todo struct {
		node, content string
		state         architectv1.PlanTodoState
	}
	var todos []todo
	for _, td := range got.GetPlan().GetTodos() {
		todos = append(todos, todo{td.GetNodeId(), td.GetContent(), td.GetState()})
	}
	require.Equal(t, []todo{
		{"reproduce", "Reproduce: Fix the crash in pkg/x", architectv1.PlanTodoState_PLAN_TODO_STATE_COMPLETED},
		{"fix", "Fix: Fix the crash in pkg/x (done with no change made: no model is configured)", architectv1.PlanTodoState_PLAN_TODO_STATE_COMPLETED},
		{"verify", "Verify: Fix the crash in pkg/x", architectv1.PlanTodoState_PLAN_TODO_STATE_IN_PROGRESS},
	}, todos)

	f.orch.setNodes(run,
		&orchestratorv1.NodeStatus{NodeId: "reproduce", State: orchestratorv1.NodeState_NODE_STATE_FAILED},
		&orchestratorv1.NodeStatus{NodeId: "fix", State: orchestratorv1.NodeState_NODE_STATE_SKIPPED})
	got, err = f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
	require.NoError(t, err)
	states := []architectv1.PlanTodoState{}
	for _, td := range got.GetPlan().GetTodos() {
		states = append(states, td.GetState())
	}
	require.Equal(t, []architectv1.PlanTodoState{architectv1.PlanTodoState_PLAN_TODO_STATE_FAILED,
		architectv1.PlanTodoState_PLAN_TODO_STATE_SKIPPED, architectv1.PlanTodoState_PLAN_TODO_STATE_PENDING}, states)

	f.orch.mu.Lock()
	f.orch.getFail = status.Error(codes.Unavailable, "orchestrator restarting")
	f.orch.mu.Unlock()
	got, err = f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
	require.NoError(t, err)
	require.Contains(t, got.GetPlan().GetNotes(), "the run's progress could not be read: orchestrator restarting")
}

// A request the intent gate calls TRIVIAL becomes a one-task plan; a
// session with auto_approve_trivial approves it at once and its run
// starts, any other waits for approval.
func TestTrivialRequests(t *testing.T) {
	t.Parallel()
	f, p := newFlow(t, Config{})
	testenv.Start(t, f.svc.Run)
	ctx := as("t1", "u1")
	inbox := topology.InboxSubject(f.bus, topology.AgentArchitect)
	send := func(session string) *architectv1.Plan {
		t.Helper()
		env := inboxEnvelope(strings.TrimPrefix(session, "sessions/"), "fix typo in README")
		env.StructuredIntent.IntentType = "TRIVIAL"
		_, err := f.bus.Publish(ctx, inbox, env.GetId(), env)
		require.NoError(t, err)
		var plans []*architectv1.Plan
		require.Eventually(t, func() bool {
			resp, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: session})
			require.NoError(t, err)
			plans = resp.GetPlans()
			return len(plans) == 1 && (plans[0].GetAutoApproved() || len(events(t, f.bus, "t1", plans[0].GetSessionId())) > 0)
		}, 10*time.Second, 20*time.Millisecond)
		return plans[0]
	}

	auto := send(p.guide.session("repositories/r1", &guidev1.SessionConfig{AutoApproveTrivial: true}))
	require.True(t, auto.GetTrivial())
	require.True(t, auto.GetAutoApproved())
	require.Equal(t, architectv1.PlanState_PLAN_STATE_APPROVED, auto.GetState())
	require.Len(t, auto.GetDag().GetNodes(), 1)
	node := auto.GetDag().GetNodes()[0]
	require.Equal(t, "engineer", node.GetRole())
	require.True(t, node.GetPipeline())
	require.Contains(t, node.GetPrompt(), "fix typo in README")
	require.Equal(t, []string{"pkg/x/x.go", "pkg/x/x_test.go"}, node.GetFiles())
	calls, _ := f.orch.recorded()
	require.Len(t, calls, 1)
	require.Equal(t, "repositories/r1", calls[0].GetRepository())
	require.Equal(t, auto.GetName(), calls[0].GetPlan())
	evs := events(t, f.bus, "t1", auto.GetSessionId())
	require.Len(t, evs, 1, "no approval is asked for")
	require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_APPROVED, evs[0].GetType())
	require.Contains(t, evs[0].GetText(), "approved without asking")

	asked := send(p.guide.session("repositories/r1", nil))
	require.True(t, asked.GetTrivial())
	require.False(t, asked.GetAutoApproved())
	require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, asked.GetState())
	require.Len(t, asked.GetDag().GetNodes(), 1)
	calls, _ = f.orch.recorded()
	require.Len(t, calls, 1, "no run without approval")
	evs = events(t, f.bus, "t1", asked.GetSessionId())
	require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL, evs[0].GetType())
}

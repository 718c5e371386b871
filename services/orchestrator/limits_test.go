package orchestrator_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/ids"
)

func withRole(n *orchestratorv1.Node, role string) *orchestratorv1.Node {
	n.Role = role
	return n
}

func nodeIDs(envs []*taskv1.TaskDispatch) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.GetNodeId()
	}
	return out
}

// A session's limits hold across its runs: at most 3 nodes at once, at most
// 1 of them an engineer; a freed slot goes to the next node that fits.
func TestSessionLimitsBoundTasksAcrossRuns(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	session := ids.New()
	limits := &orchestratorv1.SessionLimits{MaxConcurrentTasks: 3, MaxEngineers: 1}
	a := h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		SessionId: session, MaxConcurrency: 4, SessionLimits: limits,
		Dag: dagOf(withRole(cmd("a1", "true"), "engineer"), withRole(cmd("a2", "true"), "engineer"), withRole(cmd("a3", "true"), "tester")),
	})
	require.Equal(t, []string{"a1"}, nodeIDs(h.tasks(t, "engineer", 1)))
	require.Equal(t, []string{"a3"}, nodeIDs(h.tasks(t, "tester", 1)))
	b := h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		SessionId: session, MaxConcurrency: 4, SessionLimits: limits,
		Dag: dagOf(withRole(cmd("b1", "true"), "tester"), withRole(cmd("b2", "true"), "tester")),
	})
	require.Equal(t, []string{"b1"}, nodeIDs(h.tasks(t, "tester", 1)))
	h.noMoreTasks(t, "engineer")
	h.noMoreTasks(t, "tester")

	// Another session is not held back by this one's limits.
	other := h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		SessionId: ids.New(), MaxConcurrency: 4, SessionLimits: limits,
		Dag: dagOf(withRole(cmd("o1", "true"), "tester"), withRole(cmd("o2", "true"), "tester")),
	})
	require.ElementsMatch(t, []string{"o1", "o2"}, nodeIDs(h.tasks(t, "tester", 2)))
	require.NotEmpty(t, other.GetId())

	// The engineer finishes: the other engineer takes its place.
	h.sendResult(t, "t1", a.GetId(), "a1", 1, 0, "", "r-a1")
	require.Equal(t, []string{"a2"}, nodeIDs(h.tasks(t, "engineer", 1)))
	h.resultsDrained(t, 1)
	h.noMoreTasks(t, "tester")
	// A tester of the first run finishes: the second run's next node runs.
	h.sendResult(t, "t1", a.GetId(), "a3", 1, 0, "", "r-a3")
	require.Equal(t, []string{"b2"}, nodeIDs(h.tasks(t, "tester", 1)))
	h.resultsDrained(t, 2)
	h.noMoreTasks(t, "engineer")
	h.noMoreTasks(t, "tester")
	require.NotEmpty(t, b.GetId())
}

func TestSessionLimitsAreValidated(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	for _, req := range []*orchestratorv1.CreateRunRequest{
		{Dag: dagOf(cmd("a", "true")), SessionLimits: &orchestratorv1.SessionLimits{MaxConcurrentTasks: 2}},
		{SessionId: ids.New(), Dag: dagOf(cmd("a", "true")), SessionLimits: &orchestratorv1.SessionLimits{MaxEngineers: -1}},
	} {
		_, err := h.svc.CreateRun(ctx, req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "session_limits")
	}
}

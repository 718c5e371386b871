package architect

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/testenv"
)

// nodeIDs lists a DAG's node ids in order.
func nodeIDs(d *orchestratorv1.Dag) []string {
	var out []string
	for _, n := range d.GetNodes() {
		out = append(out, n.GetId())
	}
	return out
}

// Without a model, the local planner applies the revisions it knows; any
// other feedback makes a version with the same tasks that says why. Each
// version is kept with its feedback and its diff, and announced.
func TestReviseOffline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		feedback string
		ids      []string
		diff     string
		check    func(t *testing.T, d *orchestratorv1.Dag, notes []string)
	}{
		{"Change step 2 to Implement the flag in cmd/foo/main.go.", []string{"survey", "implement", "verify"},
			`changed step 2 "implement": name "Implement the flag in cmd/foo/main.go", prompt`,
			func(t *testing.T, d *orchestratorv1.Dag, _ []string) {
				require.Equal(t, "Implement the flag in cmd/foo/main.go", d.GetNodes()[1].GetPrompt())
			}},
		{"remove step survey", []string{"implement", "verify"},
			`changed step 1 "implement": depends on (-survey); removed step 1 "survey" (Survey: Add a --version flag to cmd/foo)`,
			func(t *testing.T, d *orchestratorv1.Dag, _ []string) {
				require.Empty(t, d.GetNodes()[0].GetDependsOn())
			}},
		{"add a step: document the flag in the README", []string{"survey", "implement", "verify", "step-4"},
			`added step 4 "step-4" (engineer): Document the flag in the README`,
			func(t *testing.T, d *orchestratorv1.Dag, _ []string) {
				require.Equal(t, []string{"verify"}, d.GetNodes()[3].GetDependsOn())
				require.Equal(t, "document the flag in the README", d.GetNodes()[3].GetPrompt())
				require.True(t, d.GetNodes()[3].GetPipeline())
			}},
		{"make it faster", []string{"survey", "implement", "verify"}, "no change to the tasks",
			func(t *testing.T, _ *orchestratorv1.Dag, notes []string) {
				require.Contains(t, notes, `No model is configured, so this feedback was recorded but not applied `+
					`(it is none of the revisions the local planner knows): the tasks are unchanged; `+offlineHow+".")
			}},
		{"change step 7 to nothing", []string{"survey", "implement", "verify"}, "no change to the tasks",
			func(t *testing.T, _ *orchestratorv1.Dag, notes []string) {
				require.Contains(t, strings.Join(notes, " "), "(there is no step 7: the plan has 3)")
			}},
	}
	f := newFixture(t, false)
	ctx := as("t1", "u1")
	for _, tt := range tests {
		t.Run(tt.feedback, func(t *testing.T) {
			t.Parallel()
			created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a --version flag to cmd/foo"})
			require.NoError(t, err)
			name := created.GetPlan().GetName()
			resp, err := f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: name, Feedback: tt.feedback})
			require.NoError(t, err)
			p := resp.GetPlan()
			require.Equal(t, int32(2), p.GetVersion())
			require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, p.GetState())
			require.Equal(t, tt.ids, nodeIDs(p.GetDag()))
			_, err = dag.Validate(p.GetDag())
			require.NoError(t, err)
			tt.check(t, p.GetDag(), p.GetNotes())
			require.Contains(t, p.GetNotes(), noteOffline)

			vs := p.GetVersions()
			require.Len(t, vs, 2)
			require.Equal(t, []string{"survey", "implement", "verify"}, nodeIDs(vs[0].GetDag()), "the first version is kept")
			require.Empty(t, vs[0].GetFeedback())
			require.Equal(t, strings.TrimSpace(tt.feedback), vs[1].GetFeedback())
			require.Equal(t, tt.diff, vs[1].GetDiff())
			require.Equal(t, "local", vs[1].GetPlanner())

			got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
			require.NoError(t, err)
			require.Equal(t, tt.ids, nodeIDs(got.GetPlan().GetDag()))
			require.Len(t, got.GetPlan().GetTodos(), len(tt.ids))

			evs := events(t, f.bus, "t1", p.GetSessionId())
			require.Len(t, evs, 3)
			require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_REVISED, evs[1].GetType())
			require.Equal(t, &eventv1.PlanRevisedEvent{Plan: name, Version: 2, Feedback: vs[1].GetFeedback(), Diff: tt.diff},
				evs[1].GetPlanRevised())
			require.Equal(t, "Plan revised to version 2: "+tt.diff, evs[1].GetText())
			require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL, evs[2].GetType())
			require.EqualValues(t, 2, evs[2].GetPlan().GetVersion())
		})
	}
}

// Only a plan awaiting approval can be revised, up to its version limit;
// feedback is required.
func TestReviseRefused(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, Config{MaxPlanVersions: 2}, app.Peers{}, true)
	ctx := as("t1", "u1")
	plan := func() string {
		created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a --version flag"})
		require.NoError(t, err)
		return created.GetPlan().GetName()
	}
	approved, rejected, limited := plan(), plan(), plan()
	_, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: approved})
	require.NoError(t, err)
	_, err = f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: approved, Feedback: "remove step 1"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonPlanDecided, "plan is approved; cannot revise")
	_, err = f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: rejected})
	require.NoError(t, err)
	_, err = f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: rejected, Feedback: "remove step 1"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonPlanDecided, "plan is rejected; cannot revise")

	_, err = f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: limited, Feedback: "remove step 1"})
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.revised.WithLabelValues("local", "true")))
	_, err = f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: limited, Feedback: "remove step 1"})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonVersionLimit, "plan has 2 versions")

	_, err = f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: limited, Feedback: "  "})
	testenv.RequireCode(t, err, codes.InvalidArgument, "feedback: required")
	_, err = f.svc.RevisePlan(as("t1", "u2"), &architectv1.RevisePlanRequest{Name: limited, Feedback: "remove step 1"})
	testenv.RequireCode(t, err, codes.NotFound, "not found")
}

// The diff of two versions names what changed in each task.
func TestDiffDAGs(t *testing.T) {
	t.Parallel()
	a := &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{
		{Id: "fix", Name: "Fix", Prompt: "fix it", Files: []string{"a.go"}},
		{Id: "old", Name: "Old", Role: "tester", Command: "go test"},
	}}
	b := &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{
		{Id: "fix", Name: "Fix", Prompt: "fix it well", Files: []string{"b.go"}, DoneWhen: "tests pass", Pipeline: true},
		{Id: "test", Name: "Test", Role: "tester", Prompt: "test it", DependsOn: []string{"fix"}},
	}}
	require.Equal(t, `title "A" became "B"; changed step 1 "fix": prompt, done when, pipeline true, files (+b.go -a.go); `+
		`added step 2 "test" (tester): Test; removed step 2 "old" (Old)`, diffDAGs("A", a, "B", b))
	require.Equal(t, "no change to the tasks", diffDAGs("A", a, "A", a))
}

package architect

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
)

func TestLocalPlanner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		request string
		title   string
		ids     []string
		roles   []string
	}{
		{"add a /version endpoint to the gateway", "Add a /version endpoint to the gateway",
			[]string{"survey", "implement", "verify"}, []string{"engineer", "engineer", "tester"}},
		{"Fix the crash when the config file is empty. It started yesterday.", "Fix the crash when the config file is empty",
			[]string{"reproduce", "fix", "verify"}, []string{"tester", "engineer", "tester"}},
		{"refactor the scheduler into smaller functions\nkeep the API", "Refactor the scheduler into smaller functions",
			[]string{"survey", "refactor", "verify"}, []string{"engineer", "engineer", "tester"}},
		{strings.Repeat("long ", 40), "Long long long long long long long long long long long long long long long long…", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.title, func(t *testing.T) {
			t.Parallel()
			d, err := localPlanner{}.Draft(context.Background(), Brief{Request: strings.TrimSpace(tt.request)})
			require.NoError(t, err)
			require.Equal(t, tt.title, d.Title)
			require.Equal(t, "local", d.Planner)
			layers, err := dag.Validate(d.DAG)
			require.NoError(t, err)
			require.Len(t, layers, len(d.DAG.GetNodes()), "a chain: one node per layer")
			for i, n := range d.DAG.GetNodes() {
				require.Regexp(t, nodeID, n.GetId())
				require.Contains(t, n.GetPrompt(), strings.TrimSpace(tt.request))
				if tt.ids != nil {
					require.Equal(t, tt.ids[i], n.GetId())
					require.Equal(t, tt.roles[i], n.GetRole())
				}
			}
		})
	}
}

func TestCreatePlanDrafts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "u1")
	parent := newSession()
	resp, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: parent, Request: "  add a /version endpoint to the gateway "})
	require.NoError(t, err)
	p := resp.GetPlan()
	require.True(t, strings.HasPrefix(p.GetName(), parent+"/plans/"), p.GetName())
	require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, p.GetState())
	require.Equal(t, int32(1), p.GetVersion())
	require.Equal(t, "local", p.GetPlanner())
	require.Equal(t, "add a /version endpoint to the gateway", p.GetRequest())
	require.Equal(t, "Add a /version endpoint to the gateway", p.GetTitle())
	require.Len(t, p.GetDag().GetNodes(), 3)
	_, err = dag.Validate(p.GetDag())
	require.NoError(t, err)
	require.Empty(t, p.GetRun())

	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: p.GetName()})
	require.NoError(t, err)
	require.True(t, proto.Equal(p, got.GetPlan()), "got %v want %v", got.GetPlan(), p)

	evs := events(t, f.bus, "t1", strings.TrimPrefix(parent, "sessions/"))
	require.Len(t, evs, 1)
	require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL, evs[0].GetType())
	require.Equal(t, "architect", evs[0].GetSource())
	require.Equal(t, p.GetName(), evs[0].GetPlan().GetPlan())
	require.EqualValues(t, 3, evs[0].GetPlan().GetNodes())
	require.EqualValues(t, 1, evs[0].GetPlan().GetVersion())
	require.Equal(t, "local", evs[0].GetPlan().GetPlanner())
	require.Equal(t, "Plan ready for approval: Add a /version endpoint to the gateway (3 tasks). Approve with POST /v1/"+p.GetName()+":approve, "+
		"or ask for changes with POST /v1/"+p.GetName()+":revise. Note: "+noteNoRepository+"; "+noteOffline, evs[0].GetText())
}

func TestCreatePlanExplicitDAG(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "u1")
	explicit := &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{
		{Id: "a", Command: "echo alpha"},
		{Id: "b", DependsOn: []string{"a"}, Role: "tester", Command: "echo beta"},
	}}
	resp, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "run a then b", Dag: explicit})
	require.NoError(t, err)
	require.Equal(t, "user", resp.GetPlan().GetPlanner())
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: resp.GetPlan().GetName()})
	require.NoError(t, err)
	require.True(t, proto.Equal(explicit, got.GetPlan().GetDag()), "stored DAG differs: %v", got.GetPlan().GetDag())
	require.Contains(t, events(t, f.bus, "t1", resp.GetPlan().GetSessionId())[0].GetText(), "(2 tasks)")

	tests := []struct {
		name    string
		dag     *orchestratorv1.Dag
		message string
	}{
		{"cycle", &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{
			{Id: "a", DependsOn: []string{"b"}, Command: "true"},
			{Id: "b", DependsOn: []string{"a"}, Command: "true"},
		}}, "cycle"},
		{"unknown dependency", &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{
			{Id: "a", DependsOn: []string{"ghost"}, Command: "true"},
		}}, `unknown node "ghost"`},
		{"no work", &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{{Id: "a"}}}, "a command or a prompt is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parent := newSession()
			_, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: parent, Request: "x", Dag: tt.dag})
			testenv.RequireCode(t, err, codes.InvalidArgument, tt.message)
			list, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: parent})
			require.NoError(t, err)
			require.Empty(t, list.GetPlans(), "nothing stored for an invalid DAG")
		})
	}

	// An empty DAG counts as absent: the planner drafts one.
	drafted, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "build it", Dag: &orchestratorv1.Dag{}})
	require.NoError(t, err)
	require.Equal(t, "local", drafted.GetPlan().GetPlanner())
}

func TestPlanValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a feature"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	tests := []struct {
		name    string
		call    func() error
		code    codes.Code
		message string
	}{
		{"missing parent", func() error {
			_, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Request: "x"})
			return err
		}, codes.InvalidArgument, "parent: required"},
		{"bad parent", func() error {
			_, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: "sessions/123", Request: "x"})
			return err
		}, codes.InvalidArgument, "parent: want sessions/{uuid}"},
		{"empty request", func() error {
			_, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: " \t"})
			return err
		}, codes.InvalidArgument, "request: required"},
		{"request too large", func() error {
			_, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: strings.Repeat("x", 16<<10+1)})
			return err
		}, codes.InvalidArgument, "request: 16385 bytes exceeds the limit of 16384 bytes"},
		{"bad plan name", func() error {
			_, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: "plans/x"})
			return err
		}, codes.InvalidArgument, "name: want sessions/{uuid}/plans/{uuid}"},
		{"unknown plan", func() error {
			_, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: newSession() + "/plans/" + ids.New()})
			return err
		}, codes.NotFound, "not found"},
		{"negative concurrency", func() error {
			_, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name, MaxConcurrency: -1})
			return err
		}, codes.InvalidArgument, "max_concurrency"},
		{"no orchestrator", func() error {
			_, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
			return err
		}, codes.Unavailable, "orchestrator not configured"},
		{"reason too long", func() error {
			_, err := f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: name, Reason: strings.Repeat("x", 5000)})
			return err
		}, codes.InvalidArgument, "reason"},
		{"bad page token", func() error {
			_, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: newSession(), PageToken: "zz"})
			return err
		}, codes.InvalidArgument, "page_token"},
		{"no identity", func() error {
			_, err := f.svc.GetPlan(context.Background(), &architectv1.GetPlanRequest{Name: name})
			return err
		}, codes.Unauthenticated, "identity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testenv.RequireCode(t, tt.call(), tt.code, tt.message)
		})
	}
}

func TestPlanIsolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	parent := newSession()
	created, err := f.svc.CreatePlan(as("t1", "u1"), &architectv1.CreatePlanRequest{Parent: parent, Request: "add a feature"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	for _, ctx := range []context.Context{as("t1", "u2"), as("t2", "u1")} {
		_, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
		testenv.RequireReason(t, err, codes.NotFound, "PLAN_NOT_FOUND", "plan "+name+" not found")
		_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
		testenv.RequireCode(t, err, codes.NotFound, "not found")
		_, err = f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: name})
		testenv.RequireCode(t, err, codes.NotFound, "not found")
		list, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: parent})
		require.NoError(t, err)
		require.Empty(t, list.GetPlans())
	}
	calls, _ := f.orch.recorded()
	require.Empty(t, calls)
}

// An approval whose decision fails to store cancels the run it started;
// approving again starts a new run rather than answering with the
// cancelled one.
func TestApprovalAfterAFailedStoreStartsANewRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	require.NoError(t, err)
	p := created.GetPlan()

	// The decision fails to store while the flag row exists.
	for _, q := range []string{
		`CREATE TABLE fail_approvals (x int)`,
		`INSERT INTO fail_approvals VALUES (1)`,
		`CREATE FUNCTION fail_approval() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.state = 'approved' AND EXISTS (SELECT 1 FROM fail_approvals) THEN
				RAISE EXCEPTION 'the disk is full';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER fail_approval BEFORE UPDATE ON plans FOR EACH ROW EXECUTE FUNCTION fail_approval()`,
	} {
		_, err := f.svc.db.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName()})
	require.Error(t, err)
	calls, _ := f.orch.recorded()
	require.Len(t, calls, 1)
	first := f.orch.runs[p.GetId()]
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_CANCELLED, first.GetState(), "the run of the failed approval is cancelled")

	_, err = f.svc.db.Exec(context.Background(), `DELETE FROM fail_approvals`)
	require.NoError(t, err)
	approved, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName()})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_APPROVED, approved.GetPlan().GetState())
	require.NotEqual(t, first.GetName(), approved.GetRun().GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_PENDING, approved.GetRun().GetState())
	require.Equal(t, approved.GetRun().GetName(), approved.GetPlan().GetRun())
	calls, _ = f.orch.recorded()
	require.Len(t, calls, 3, "the first request id answers the cancelled run; a second one starts the new run")
	require.Equal(t, p.GetId()+"/after/"+first.GetId(), calls[2].GetRequestId())
}

func TestApprovePlan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := as("t1", "u1")
	parent := newSession()
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: parent, Request: "add a /version endpoint"})
	require.NoError(t, err)
	p := created.GetPlan()

	// The orchestrator's status code reaches the caller unchanged, and the
	// plan keeps waiting.
	f.orch.setFail(status.Error(codes.ResourceExhausted, "too many runs"))
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName()})
	testenv.RequireCode(t, err, codes.ResourceExhausted, "orchestrator: too many runs")
	f.orch.setFail(status.Error(codes.InvalidArgument, "dag: cycle in depends_on: a -> b -> a"))
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName()})
	testenv.RequireCode(t, err, codes.InvalidArgument, "cycle")
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: p.GetName()})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, got.GetPlan().GetState())
	f.orch.setFail(nil)

	approved, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName(), MaxConcurrency: 2})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_APPROVED, approved.GetPlan().GetState())
	require.True(t, strings.HasPrefix(approved.GetRun().GetName(), "runs/"))
	require.Equal(t, approved.GetRun().GetName(), approved.GetPlan().GetRun())

	calls, who := f.orch.recorded()
	require.Len(t, calls, 3)
	last := calls[2]
	require.Equal(t, p.GetSessionId(), last.GetSessionId())
	require.Equal(t, p.GetName(), last.GetPlan())
	require.Equal(t, p.GetId(), last.GetRequestId())
	require.Equal(t, int32(2), last.GetMaxConcurrency())
	require.True(t, proto.Equal(p.GetDag(), last.GetDag()))
	require.Equal(t, "t1", who[2].TenantID)
	require.Equal(t, "u1", who[2].UserID)

	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName()})
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonPlanDecided, "plan is approved; cannot approve")
	_, err = f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: p.GetName()})
	testenv.RequireCode(t, err, codes.FailedPrecondition, "plan is approved; cannot reject")
	calls, _ = f.orch.recorded()
	require.Len(t, calls, 3, "a decided plan is not submitted again")

	stored, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: p.GetName()})
	require.NoError(t, err)
	require.Equal(t, approved.GetRun().GetName(), stored.GetPlan().GetRun())

	evs := events(t, f.bus, "t1", p.GetSessionId())
	require.Len(t, evs, 2)
	require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_APPROVED, evs[1].GetType())
	require.Equal(t, p.GetName(), evs[1].GetPlan().GetPlan())
	require.Equal(t, approved.GetRun().GetName(), evs[1].GetPlan().GetRun())
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.decided.WithLabelValues("approved")))
}

func TestRejectPlan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "rename the package"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	rejected, err := f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: name, Reason: " too broad "})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_REJECTED, rejected.GetPlan().GetState())
	require.Equal(t, "too broad", rejected.GetPlan().GetRejectReason())

	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
	testenv.RequireCode(t, err, codes.FailedPrecondition, "plan is rejected; cannot approve")
	_, err = f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: name})
	testenv.RequireCode(t, err, codes.FailedPrecondition, "plan is rejected; cannot reject")
	calls, _ := f.orch.recorded()
	require.Empty(t, calls)

	evs := events(t, f.bus, "t1", created.GetPlan().GetSessionId())
	require.Equal(t, eventv1.EventType_EVENT_TYPE_PLAN_REJECTED, evs[len(evs)-1].GetType())
	require.Equal(t, "too broad", evs[len(evs)-1].GetPlan().GetReason())
}

func TestListPlans(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "u1")
	parent := newSession()
	var want []string
	for _, r := range []string{"add a", "add b", "add c", "add d", "add e"} {
		resp, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: parent, Request: r})
		require.NoError(t, err)
		want = append([]string{resp.GetPlan().GetName()}, want...)
	}
	_, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "elsewhere"})
	require.NoError(t, err)

	var got []string
	token := ""
	for range 5 {
		resp, err := f.svc.ListPlans(ctx, &architectv1.ListPlansRequest{Parent: parent, PageSize: 2, PageToken: token})
		require.NoError(t, err)
		for _, p := range resp.GetPlans() {
			got = append(got, p.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Empty(t, token)
	require.Equal(t, want, got, "newest first, each plan once")
}

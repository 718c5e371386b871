package architect

import (
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/services/academic"
)

// startAcademic serves a real academic over gRPC and returns its address.
func startAcademic(t *testing.T) string {
	t.Helper()
	db, schema := testenv.Postgres(t, "academic", migrations.FS("academic"))
	var cfg academic.Config
	fs := flag.NewFlagSet("academic", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.NoError(t, fs.Parse(nil))
	svc, err := academic.New(cfg, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	return serve(t, svc.Register)
}

// architectWithAcademic is an architect whose academic peer is at addr,
// with a fake orchestrator.
func architectWithAcademic(t *testing.T, addr string) (*Service, *fakeOrchestrator) {
	t.Helper()
	db, schema := testenv.Postgres(t, "architect", migrations.FS("architect"))
	conn, err := grpcclient.Dial(addr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	deps := app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: testenv.NATS(t), Registerer: prometheus.NewRegistry()}
	deps.Peers.Academic = conn
	orch, orchAddr := startOrchestrator(t)
	oconn, err := grpcclient.Dial(orchAddr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = oconn.Close() })
	deps.Peers.Orchestrator = oconn
	svc, err := New(Config{AcademicTimeout: 2 * time.Second}, deps)
	require.NoError(t, err)
	return svc, orch
}

type criterionRow struct {
	text     string
	source   messagev1.CriterionSource
	priority messagev1.ExpectationPriority
}

func criteriaOf(p *architectv1.Plan) []criterionRow {
	var out []criterionRow
	for _, c := range p.GetIntent().GetSuccessCriteria() {
		out = append(out, criterionRow{c.GetCriterion(), c.GetSource(), c.GetPriority()})
	}
	return out
}

const (
	explicit    = messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT
	inferred    = messagev1.CriterionSource_CRITERION_SOURCE_INFERRED
	required    = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_REQUIRED
	recommended = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_RECOMMENDED
	optional    = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_OPTIONAL
)

// The architect asks the academic what the feature domain implies and
// merges it into the user's criteria (spec; acceptance
// behaviours 7 and 8).
func TestPlanIntentIsEnrichedByTheAcademic(t *testing.T) {
	t.Parallel()
	svc, orch := architectWithAcademic(t, startAcademic(t))
	ctx := as("t1", "u1")

	resp, err := svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "Add a logout button to the header",
		KeyConstraints: []string{"skip confirmation"}, SuccessCriteria: []string{"the session is terminated on the server", "  "}})
	require.NoError(t, err)
	p := resp.GetPlan()
	require.Equal(t, "authentication/logout", p.GetIntent().GetFeatureDomain())
	require.Equal(t, "enriched", p.GetIntent().GetInference())
	require.Equal(t, []string{"skip confirmation"}, p.GetIntent().GetKeyConstraints())
	require.Equal(t, []criterionRow{
		{"the session is terminated on the server", explicit, 0},
		{"redirect to login", inferred, required},
		{"log out of all devices", inferred, optional},
	}, criteriaOf(p), "no confirmation (ruled out), no second session criterion (already stated)")
	require.Equal(t, "academic:authentication/logout", p.GetIntent().GetSuccessCriteria()[1].GetInferredFrom())

	got, err := svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: p.GetName()})
	require.NoError(t, err)
	require.Equal(t, criteriaOf(p), criteriaOf(got.GetPlan()), "the intent is stored with the plan")

	// The approved plan's run carries the intent to its tasks (spec A-12).
	_, err = svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: p.GetName()})
	require.NoError(t, err)
	calls, _ := orch.recorded()
	require.Len(t, calls, 1)
	require.Equal(t, []string{"skip confirmation"}, calls[0].GetContext().GetKeyConstraints())
	require.Len(t, calls[0].GetContext().GetSuccessCriteria(), 3)

	resp, err = svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "let users log out"})
	require.NoError(t, err)
	require.Contains(t, criteriaOf(resp.GetPlan()), criterionRow{"session termination", inferred, required})
	require.Contains(t, criteriaOf(resp.GetPlan()), criterionRow{"confirmation if unsaved", inferred, recommended})

	resp, err = svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "fix the typo in the README",
		SuccessCriteria: []string{"README reads correctly"}})
	require.NoError(t, err)
	require.Equal(t, "domain_unknown", resp.GetPlan().GetIntent().GetInference())
	require.Equal(t, []criterionRow{{"README reads correctly", explicit, 0}}, criteriaOf(resp.GetPlan()))
}

// Without an academic answering, the plan is still drafted, with the
// user's own criteria and the reason.
func TestPlanIntentWithoutTheAcademic(t *testing.T) {
	t.Parallel()
	svc, _ := architectWithAcademic(t, "127.0.0.1:1")
	resp, err := svc.CreatePlan(as("t1", "u1"), &architectv1.CreatePlanRequest{Parent: newSession(), Request: "cache the search results",
		SuccessCriteria: []string{"search p99 under 50 ms"}})
	require.NoError(t, err)
	pi := resp.GetPlan().GetIntent()
	require.Equal(t, "performance/caching", pi.GetFeatureDomain())
	require.Contains(t, pi.GetInference(), "unavailable: the academic did not answer")
	require.Equal(t, []criterionRow{{"search p99 under 50 ms", explicit, 0}}, criteriaOf(resp.GetPlan()))
}

func TestCreatePlanChecksStatedIntent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "u1")
	long := make([]byte, maxStatementBytes+1)
	for i := range long {
		long[i] = 'x'
	}
	for _, tt := range []struct {
		req  *architectv1.CreatePlanRequest
		want string
	}{
		{&architectv1.CreatePlanRequest{KeyConstraints: make([]string, maxStatements+1)}, "key_constraints: 51 entries"},
		{&architectv1.CreatePlanRequest{SuccessCriteria: []string{"ok", string(long)}}, "success_criteria: entry 1"},
		{&architectv1.CreatePlanRequest{SuccessCriteria: []string{"\xff"}}, "UTF-8"},
	} {
		tt.req.Parent, tt.req.Request = newSession(), "add a logout button"
		_, err := f.svc.CreatePlan(ctx, tt.req)
		requireCode(t, err, 3, tt.want)
	}
}

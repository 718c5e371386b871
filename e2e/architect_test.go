package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/services/academic"
	"sylk.dev/sylk/services/architect"
	"sylk.dev/sylk/services/guide"
)

// The Architect with its real peers, in-process over gRPC: the Academic it
// asks what a feature domain implies, and the Guide it reads a session's
// limits from. The orchestrator is a recorder, so that what an approval
// submits can be checked.

// runRecorder is an orchestrator that records the runs it is asked for.
type runRecorder struct {
	orchestratorv1.UnimplementedWorkflowServiceServer
	mu    sync.Mutex
	calls []*orchestratorv1.CreateRunRequest
}

func (r *runRecorder) CreateRun(_ context.Context, req *orchestratorv1.CreateRunRequest) (*orchestratorv1.CreateRunResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, proto.Clone(req).(*orchestratorv1.CreateRunRequest))
	id := ids.New()
	return &orchestratorv1.CreateRunResponse{Run: &orchestratorv1.Run{Name: "runs/" + id, Id: id, SessionId: req.GetSessionId(),
		Plan: req.GetPlan(), State: orchestratorv1.RunState_RUN_STATE_PENDING}}, nil
}

func (r *runRecorder) recorded() []*orchestratorv1.CreateRunRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*orchestratorv1.CreateRunRequest(nil), r.calls...)
}

// newArchitect is an Architect with peers and a recording orchestrator.
func newArchitect(t *testing.T, cfg architect.Config, peers app.Peers) (*architect.Service, *runRecorder) {
	t.Helper()
	db, schema := testenv.Postgres(t, "architect", migrations.FS("architect"))
	runs := &runRecorder{}
	peers.Orchestrator = testenv.ServeGRPC(t, func(g *grpc.Server) { orchestratorv1.RegisterWorkflowServiceServer(g, runs) })
	svc, err := architect.New(cfg, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: testenv.NATS(t),
		Registerer: prometheus.NewRegistry(), Peers: peers})
	require.NoError(t, err)
	return svc, runs
}

// member is a member of tenant acting as user.
func member(tenant, user string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: identity.RoleMember})
}

type criterion struct {
	text     string
	source   messagev1.CriterionSource
	priority messagev1.ExpectationPriority
}

func criteriaOf(p *architectv1.Plan) []criterion {
	var out []criterion
	for _, c := range p.GetIntent().GetSuccessCriteria() {
		out = append(out, criterion{c.GetCriterion(), c.GetSource(), c.GetPriority()})
	}
	return out
}

// The Architect asks the Academic what the feature domain implies and
// merges it into the user's criteria (spec; acceptance
// behaviours 7 and 8).
func TestArchitectIntentIsEnrichedByTheAcademic(t *testing.T) {
	t.Parallel()
	db, schema := testenv.Postgres(t, "academic", migrations.FS("academic"))
	acad, err := academic.New(testenv.FromFlags[academic.Config](t), app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	svc, runs := newArchitect(t, architect.Config{AcademicTimeout: 2 * time.Second}, app.Peers{Academic: testenv.ServeGRPC(t, acad.Register)})
	ctx := member("t1", "u1")
	const (
		explicit    = messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT
		inferred    = messagev1.CriterionSource_CRITERION_SOURCE_INFERRED
		required    = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_REQUIRED
		recommended = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_RECOMMENDED
		optional    = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_OPTIONAL
	)

	resp, err := svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: "sessions/" + ids.New(), Request: "Add a logout button to the header",
		KeyConstraints: []string{"skip confirmation"}, SuccessCriteria: []string{"the session is terminated on the server", "  "}})
	require.NoError(t, err)
	p := resp.GetPlan()
	require.Equal(t, "authentication/logout", p.GetIntent().GetFeatureDomain())
	require.Equal(t, "enriched", p.GetIntent().GetInference())
	require.Equal(t, []string{"skip confirmation"}, p.GetIntent().GetKeyConstraints())
	require.Equal(t, []criterion{
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
	calls := runs.recorded()
	require.Len(t, calls, 1)
	require.Equal(t, []string{"skip confirmation"}, calls[0].GetContext().GetKeyConstraints())
	require.Len(t, calls[0].GetContext().GetSuccessCriteria(), 3)

	resp, err = svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: "sessions/" + ids.New(), Request: "let users log out"})
	require.NoError(t, err)
	require.Contains(t, criteriaOf(resp.GetPlan()), criterion{"session termination", inferred, required})
	require.Contains(t, criteriaOf(resp.GetPlan()), criterion{"confirmation if unsaved", inferred, recommended})

	resp, err = svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: "sessions/" + ids.New(), Request: "fix the typo in the README",
		SuccessCriteria: []string{"README reads correctly"}})
	require.NoError(t, err)
	require.Equal(t, "domain_unknown", resp.GetPlan().GetIntent().GetInference())
	require.Equal(t, []criterion{{"README reads correctly", explicit, 0}}, criteriaOf(resp.GetPlan()))
}

// An approval passes the session's limits, read from the Guide as the
// caller, to the orchestrator; a session of another tenant, one that does
// not exist and one that is over take no plan.
func TestArchitectApprovalPassesSessionLimits(t *testing.T) {
	t.Parallel()
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	g, err := guide.New(guide.Config{}, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: testenv.NATS(t),
		Redis: testenv.Redis(t), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	guideConn := testenv.ServeGRPC(t, g.Register)
	sessions := guidev1.NewSessionServiceClient(guideConn)
	svc, runs := newArchitect(t, architect.Config{}, app.Peers{Guide: guideConn})
	ctx := member("t1", "u1")
	outgoing := func(ctx context.Context) context.Context {
		who, err := identity.Require(ctx)
		require.NoError(t, err)
		return identity.AppendOutgoing(ctx, who)
	}

	limited, err := sessions.CreateSession(outgoing(ctx), &guidev1.CreateSessionRequest{Session: &guidev1.Session{
		DisplayName: "limited", Config: &guidev1.SessionConfig{MaxConcurrentTasks: 1, MaxEngineers: 1}}})
	require.NoError(t, err)
	plain, err := sessions.CreateSession(outgoing(ctx), &guidev1.CreateSessionRequest{Session: &guidev1.Session{DisplayName: "plain"}})
	require.NoError(t, err)

	approve := func(ctx context.Context, parent string) {
		t.Helper()
		created, err := svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: parent, Request: "add a /version endpoint"})
		require.NoError(t, err)
		_, err = svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: created.GetPlan().GetName()})
		require.NoError(t, err)
	}

	// The session's own limits reach the orchestrator.
	approve(ctx, limited.GetSession().GetName())
	// A session created without a config has the Guide's defaults.
	approve(ctx, plain.GetSession().GetName())
	calls := runs.recorded()
	require.Len(t, calls, 2)
	require.Equal(t, limited.GetSession().GetId(), calls[0].GetSessionId())
	require.Equal(t, int32(1), calls[0].GetSessionLimits().GetMaxConcurrentTasks())
	require.Equal(t, int32(1), calls[0].GetSessionLimits().GetMaxEngineers())
	require.Equal(t, int32(guide.DefaultSessionMaxConcurrentTasks), calls[1].GetSessionLimits().GetMaxConcurrentTasks())
	require.Equal(t, int32(guide.DefaultSessionMaxEngineers), calls[1].GetSessionLimits().GetMaxEngineers())

	// The session is read as the caller: in another tenant's session, or
	// one that does not exist, no plan is made, and none is listed.
	for _, tc := range []struct {
		ctx    context.Context
		parent string
	}{{member("t2", "u1"), limited.GetSession().GetName()}, {ctx, "sessions/" + ids.New()}} {
		_, err = svc.CreatePlan(tc.ctx, &architectv1.CreatePlanRequest{Parent: tc.parent, Request: "add a /version endpoint"})
		testenv.RequireCode(t, err, codes.NotFound, "not found")
		_, err = svc.ListPlans(tc.ctx, &architectv1.ListPlansRequest{Parent: tc.parent})
		testenv.RequireCode(t, err, codes.NotFound, "not found")
	}
	// Nor in a session that is over.
	_, err = sessions.CompleteSession(outgoing(ctx), &guidev1.CompleteSessionRequest{Name: plain.GetSession().GetName()})
	require.NoError(t, err)
	_, err = svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: plain.GetSession().GetName(), Request: "add a /version endpoint"})
	testenv.RequireCode(t, err, codes.FailedPrecondition, "is completed; cannot plan in it")
	require.Len(t, runs.recorded(), 2)
}

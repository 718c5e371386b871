package architect

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// fakeOrchestrator records CreateRun calls. It answers a retried request id
// with the same run, like the real one, and fails with fail when set.
type fakeOrchestrator struct {
	orchestratorv1.UnimplementedWorkflowServiceServer
	mu    sync.Mutex
	calls []*orchestratorv1.CreateRunRequest
	who   []identity.Identity
	runs  map[string]*orchestratorv1.Run
	fail  error
	// nodes are what GetRun says of a run's nodes, by run name; getFail
	// fails GetRun.
	nodes   map[string][]*orchestratorv1.NodeStatus
	getFail error
	// entered, when set, is closed as CreateRun is entered, which then waits
	// for release.
	entered, release chan struct{}
}

func (f *fakeOrchestrator) CreateRun(ctx context.Context, req *orchestratorv1.CreateRunRequest) (*orchestratorv1.CreateRunResponse, error) {
	f.mu.Lock()
	entered, release := f.entered, f.release
	f.entered = nil
	f.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, proto.Clone(req).(*orchestratorv1.CreateRunRequest))
	who, _ := identity.FromContext(ctx)
	f.who = append(f.who, who)
	if f.fail != nil {
		return nil, f.fail
	}
	if run, ok := f.runs[req.GetRequestId()]; ok {
		return &orchestratorv1.CreateRunResponse{Run: run}, nil
	}
	id := ids.New()
	run := &orchestratorv1.Run{
		Name: "runs/" + id, Id: id, SessionId: req.GetSessionId(), Plan: req.GetPlan(),
		State: orchestratorv1.RunState_RUN_STATE_PENDING, MaxConcurrency: req.GetMaxConcurrency(),
		Dag: req.GetDag(), CreateTime: timestamppb.Now(),
	}
	f.runs[req.GetRequestId()] = run
	return &orchestratorv1.CreateRunResponse{Run: run}, nil
}

// CancelRun cancels a run it created, as the real one does.
func (f *fakeOrchestrator) CancelRun(_ context.Context, req *orchestratorv1.CancelRunRequest) (*orchestratorv1.CancelRunResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, run := range f.runs {
		if run.GetName() == req.GetName() {
			run.State = orchestratorv1.RunState_RUN_STATE_CANCELLED
			return &orchestratorv1.CancelRunResponse{Run: proto.Clone(run).(*orchestratorv1.Run)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "run %s not found", req.GetName())
}

// GetRun answers with a run it created and the node states set for it.
func (f *fakeOrchestrator) GetRun(_ context.Context, req *orchestratorv1.GetRunRequest) (*orchestratorv1.GetRunResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.getFail != nil {
		return nil, f.getFail
	}
	for _, run := range f.runs {
		if run.GetName() == req.GetName() {
			out := proto.Clone(run).(*orchestratorv1.Run)
			out.Nodes = f.nodes[run.GetName()]
			return &orchestratorv1.GetRunResponse{Run: out}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "run %s not found", req.GetName())
}

// setNodes sets what GetRun says of run's nodes.
func (f *fakeOrchestrator) setNodes(run string, nodes ...*orchestratorv1.NodeStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[run] = nodes
}

// hold makes the next CreateRun wait for release once it closed entered.
func (f *fakeOrchestrator) hold(entered, release chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entered, f.release = entered, release
}

func (f *fakeOrchestrator) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeOrchestrator) recorded() ([]*orchestratorv1.CreateRunRequest, []identity.Identity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*orchestratorv1.CreateRunRequest(nil), f.calls...), append([]identity.Identity(nil), f.who...)
}

// startOrchestrator serves a fake WorkflowService on a real listener, with
// the mesh's interceptors (so a missing caller identity is refused).
func startOrchestrator(t *testing.T) (*fakeOrchestrator, *grpc.ClientConn) {
	t.Helper()
	fake := &fakeOrchestrator{runs: map[string]*orchestratorv1.Run{}, nodes: map[string][]*orchestratorv1.NodeStatus{}}
	return fake, testenv.ServeGRPC(t, func(g *grpc.Server) { orchestratorv1.RegisterWorkflowServiceServer(g, fake) })
}

type fixture struct {
	svc  *Service
	bus  *natsx.Bus
	orch *fakeOrchestrator
}

func newFixture(t *testing.T, withOrchestrator bool) fixture {
	t.Helper()
	return newFixtureWith(t, Config{}, app.Peers{}, withOrchestrator)
}

// newFixtureWith is an Architect with cfg and peers and, when asked, a
// fake orchestrator.
func newFixtureWith(t *testing.T, cfg Config, peers app.Peers, withOrchestrator bool) fixture {
	t.Helper()
	db, schema := testenv.Postgres(t, "architect", migrations.FS("architect"))
	bus := testenv.NATS(t)
	var f fixture
	if withOrchestrator {
		var conn *grpc.ClientConn
		f.orch, conn = startOrchestrator(t)
		peers.Orchestrator = conn
	}
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Registerer: prometheus.NewRegistry(), Peers: peers})
	require.NoError(t, err)
	f.svc, f.bus = svc, bus
	return f
}

func as(tenant, user string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: identity.RoleMember})
}

func newSession() string { return "sessions/" + ids.New() }

// events reads every event of a session from the EVENTS stream.
func events(t *testing.T, bus *natsx.Bus, tenant, sessionID string) []*eventv1.Event {
	t.Helper()
	ctx := context.Background()
	cons, err := bus.JS.OrderedConsumer(ctx, bus.Stream(topology.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{topology.SessionEvents(bus, tenant, sessionID)},
	})
	require.NoError(t, err)
	pending := cons.CachedInfo().NumPending
	var out []*eventv1.Event
	if pending == 0 {
		return out
	}
	batch, err := cons.Fetch(int(pending), jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for msg := range batch.Messages() {
		ev := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(msg.Data(), ev))
		out = append(out, ev)
	}
	require.NoError(t, batch.Error())
	return out
}

var nodeID = regexp.MustCompile(`^[a-z0-9-]+$`)

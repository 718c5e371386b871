package architect

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// serveGRPC serves what register adds on a real localhost listener, with the
// mesh's interceptors, and returns a client connection to it.
func serveGRPC(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	srv, err := grpcserver.New(grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: time.Second, MaxRecvBytes: 1 << 20},
		logx.Discard(), prometheus.NewRegistry(), prometheus.NewRegistry())
	require.NoError(t, err)
	register(srv.GRPC())
	require.NoError(t, srv.Listen())
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpcclient.Dial(srv.GRPCAddr(), nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		stop()
		require.NoError(t, <-done)
	})
	return conn
}

// newLimitsFixture is an Architect with a fake orchestrator and, as its
// Guide peer, whatever guideConn serves.
func newLimitsFixture(t *testing.T, cfg Config, guideConn grpc.ClientConnInterface) fixture {
	t.Helper()
	db, schema := testenv.Postgres(t, "architect", migrations.FS("architect"))
	bus := testenv.NATS(t)
	orch, addr := startOrchestrator(t)
	orchConn, err := grpcclient.Dial(addr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = orchConn.Close() })
	deps := app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Registerer: prometheus.NewRegistry()}
	deps.Peers.Orchestrator = orchConn
	deps.Peers.Guide = guideConn
	svc, err := New(cfg, deps)
	require.NoError(t, err)
	return fixture{svc: svc, bus: bus, orch: orch}
}

// silentGuide is a Guide that, once silent, never answers GetSession
// before the caller gives up; before, every session exists and is active.
type silentGuide struct {
	guidev1.UnimplementedSessionServiceServer
	silent *atomic.Bool
}

func (g silentGuide) GetSession(ctx context.Context, req *guidev1.GetSessionRequest) (*guidev1.GetSessionResponse, error) {
	if !g.silent.Load() {
		return &guidev1.GetSessionResponse{Session: &guidev1.Session{Name: req.GetName(), State: guidev1.SessionState_SESSION_STATE_ACTIVE}}, nil
	}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// An approval passing the limits of a session of the real Guide is tested
// in e2e/architect_test.go.

func TestApproveFailsWhenGuideSilent(t *testing.T) {
	t.Parallel()
	var silent atomic.Bool
	conn := serveGRPC(t, func(g *grpc.Server) { guidev1.RegisterSessionServiceServer(g, silentGuide{silent: &silent}) })
	f := newLimitsFixture(t, Config{GuideTimeout: 100 * time.Millisecond}, conn)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	silent.Store(true)
	_, err = f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	requireCode(t, err, codes.Unavailable, "could not read the session; retry")

	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
	requireCode(t, err, codes.Unavailable, "could not read the session's limits; retry")
	calls, _ := f.orch.recorded()
	require.Empty(t, calls, "no run starts without the session's limits")
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL, got.GetPlan().GetState())
}

func TestApproveWithoutGuideHasNoLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	require.NoError(t, err)
	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: created.GetPlan().GetName()})
	require.NoError(t, err)
	calls, _ := f.orch.recorded()
	require.Len(t, calls, 1)
	require.Nil(t, calls[0].GetSessionLimits())
}

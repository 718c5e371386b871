package architect

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/testenv"
)

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
	conn := testenv.ServeGRPC(t, func(g *grpc.Server) { guidev1.RegisterSessionServiceServer(g, silentGuide{silent: &silent}) })
	f := newFixtureWith(t, Config{GuideTimeout: 100 * time.Millisecond}, app.Peers{Guide: conn}, true)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()
	silent.Store(true)
	_, err = f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	testenv.RequireCode(t, err, codes.Unavailable, "could not read the session; retry")

	_, err = f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
	testenv.RequireCode(t, err, codes.Unavailable, "could not read the session's limits; retry")
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

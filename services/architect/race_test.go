package architect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	"sylk.dev/sylk/pkg/testenv"
)

// A rejection that arrives while an approval is starting the plan's run
// waits for the approval and then finds the plan approved: a plan never
// ends rejected with a run started for it.
func TestRejectWaitsForApproval(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a /version endpoint"})
	require.NoError(t, err)
	name := created.GetPlan().GetName()

	entered, release := make(chan struct{}), make(chan struct{})
	f.orch.hold(entered, release)
	approved := make(chan error, 1)
	go func() {
		_, err := f.svc.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: name})
		approved <- err
	}()
	<-entered // the approval is creating the run
	rejected := make(chan error, 1)
	go func() {
		_, err := f.svc.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: name, Reason: "changed my mind"})
		rejected <- err
	}()
	// The rejection waits for the plan's row (or, were it not locked, has
	// already answered).
	var early error
	answered := false
	require.Eventually(t, func() bool {
		select {
		case early = <-rejected:
			answered = true
			return true
		default:
		}
		var waiting int
		require.NoError(t, f.svc.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE plans SET state%'`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.NoError(t, <-approved)
	if !answered {
		early = <-rejected
	}
	testenv.RequireCode(t, early, codes.FailedPrecondition, "plan is approved")
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, architectv1.PlanState_PLAN_STATE_APPROVED, got.GetPlan().GetState())
	require.NotEmpty(t, got.GetPlan().GetRun())
	calls, _ := f.orch.recorded()
	require.Len(t, calls, 1)
}

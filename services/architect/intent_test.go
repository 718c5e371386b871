package architect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/testenv"
)

// architectWithAcademic is an architect whose academic peer is at addr,
// with a fake orchestrator. (The Architect with a real Academic is tested
// in e2e/architect_test.go.)
func architectWithAcademic(t *testing.T, addr string) (*Service, *fakeOrchestrator) {
	t.Helper()
	conn, err := grpcclient.Dial(addr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	f := newFixtureWith(t, Config{AcademicTimeout: 2 * time.Second}, app.Peers{Academic: conn}, true)
	return f.svc, f.orch
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
	require.Len(t, pi.GetSuccessCriteria(), 1)
	c := pi.GetSuccessCriteria()[0]
	require.Equal(t, "search p99 under 50 ms", c.GetCriterion())
	require.Equal(t, messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT, c.GetSource())
	require.Zero(t, c.GetPriority())
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
		testenv.RequireCode(t, err, 3, tt.want)
	}
}

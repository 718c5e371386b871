package architect

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	"sylk.dev/sylk/pkg/dag"
)

// newFlow is an Architect with cfg, a fake orchestrator and the fake
// Guide, Librarian and Archivalist.
func newFlow(t *testing.T, cfg Config) (fixture, peers) {
	t.Helper()
	p, conns := newPeers(t)
	return newFixtureWith(t, cfg, conns, true), p
}

// Before drafting, the Architect asks the Librarian (in the session's
// repository) and the Archivalist (failures and decisions of any session);
// what they said is the plan's consultation, and an offline plan shows it
// in its tasks.
func TestPlanConsultsBeforePlanning(t *testing.T) {
	t.Parallel()
	f, p := newFlow(t, Config{})
	ctx := as("t1", "u1")
	session := p.guide.session("repositories/r1", nil)
	resp, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: session, Request: "fix the failing test in pkg/x"})
	require.NoError(t, err)
	plan := resp.GetPlan()
	require.Equal(t, "repositories/r1", plan.GetRepository())
	c := plan.GetConsultation()
	require.Equal(t, []string{"pkg/x/x.go:3-9 Add", "pkg/x/x_test.go:5-12 TestAdd", "pkg/x/x.go:11-14 Sub"}, c.GetCode())
	require.Equal(t, []string{"pkg/x/x.go", "pkg/x/x_test.go"}, c.GetFiles())
	require.Equal(t, "repositories/r1 (calc): index ready, 12 files, 40 chunks at commit 0123456789ab; "+
		"the request touches 3 places in 2 files (go)", c.GetCodebaseHealth())
	require.Equal(t, []string{"go test ./pkg/x timed out on a 2s deadline"}, c.GetFailures())
	require.Equal(t, []string{"keep pkg/x free of dependencies"}, c.GetDecisions())

	searches, callers := p.librarian.asked()
	require.Len(t, searches, 1)
	require.Equal(t, []string{"repositories/r1"}, searches[0].GetRepositories())
	require.Equal(t, "fix the failing test in pkg/x", searches[0].GetQuery())
	require.Equal(t, []string{"architect"}, callers, "a consultation names the architect")
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.consulted.WithLabelValues("librarian", "answered")))
	require.Equal(t, 2.0, testutil.ToFloat64(f.svc.metrics.consulted.WithLabelValues("archivalist", "answered")))
	p.archivalist.mu.Lock()
	for _, q := range p.archivalist.asked {
		require.True(t, q.GetCrossSession())
	}
	require.Len(t, p.archivalist.asked, 2)
	p.archivalist.mu.Unlock()

	// Offline, the engineer task works on the files found, and its prompt
	// carries the consultation.
	for _, n := range plan.GetDag().GetNodes() {
		if dag.Role(n) != dag.RoleEngineer {
			require.Empty(t, n.GetFiles())
			continue
		}
		require.Equal(t, []string{"pkg/x/x.go", "pkg/x/x_test.go"}, n.GetFiles())
		require.Contains(t, n.GetPrompt(), "## What was found before planning")
		require.Contains(t, n.GetPrompt(), "- pkg/x/x.go:3-9 Add")
		require.Contains(t, n.GetPrompt(), "- go test ./pkg/x timed out on a 2s deadline")
		require.NotEmpty(t, n.GetDoneWhen())
	}
	require.Equal(t, []string{noteOffline}, plan.GetNotes(), "the session has a repository")
	require.Len(t, plan.GetVersions(), 1)
	require.Len(t, plan.GetTodos(), 3)
	for _, td := range plan.GetTodos() {
		require.Equal(t, architectv1.PlanTodoState_PLAN_TODO_STATE_PENDING, td.GetState())
	}
}

// A Librarian that does not answer in time and an Archivalist that fails
// are recorded as unavailable, and the plan is drafted all the same; a
// session without a repository searches no code and says so.
func TestPlanConsultationUnavailable(t *testing.T) {
	t.Parallel()
	f, p := newFlow(t, Config{ConsultTimeout: 200 * time.Millisecond})
	ctx := as("t1", "u1")
	p.librarian.setHang(true)
	p.archivalist.setFail(status.Error(codes.Unavailable, "the archive is down"))
	start := time.Now()
	resp, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("repositories/r1", nil), Request: "add a --version flag"})
	require.NoError(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	c := resp.GetPlan().GetConsultation()
	require.Empty(t, c.GetCode())
	require.Equal(t, "unavailable: the librarian: no answer in time", c.GetCodebaseHealth())
	require.Equal(t, []string{"unavailable: the archivalist: the archive is down"}, c.GetFailures())
	require.Equal(t, []string{"unavailable: the archivalist: the archive is down"}, c.GetDecisions())
	require.Len(t, resp.GetPlan().GetDag().GetNodes(), 3)
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.consulted.WithLabelValues("librarian", "unavailable")))
	require.Equal(t, 2.0, testutil.ToFloat64(f.svc.metrics.consulted.WithLabelValues("archivalist", "unavailable")))

	p.archivalist.setFail(nil)
	resp, err = f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("", nil), Request: "add a --version flag"})
	require.NoError(t, err)
	plan := resp.GetPlan()
	require.Empty(t, plan.GetRepository())
	require.Equal(t, "not searched: the session has no repository", plan.GetConsultation().GetCodebaseHealth())
	require.Equal(t, []string{noteNoRepository, noteOffline}, plan.GetNotes())
	require.Contains(t, plan.GetDag().GetNodes()[0].GetPrompt(), "Repository: none is set; the run will have no repository to change.")
}

// Without peers, a plan is drafted as before, and its consultation says
// that no one could be asked.
func TestPlanWithoutKnowledgePeers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	resp, err := f.svc.CreatePlan(as("t1", "u1"), &architectv1.CreatePlanRequest{Parent: newSession(), Request: "add a --version flag"})
	require.NoError(t, err)
	c := resp.GetPlan().GetConsultation()
	require.Equal(t, "not searched: the session has no repository", c.GetCodebaseHealth())
	require.Equal(t, []string{"unavailable: no archivalist configured"}, c.GetFailures())
}

// The consultation as a planner reads it.
func TestConsultationText(t *testing.T) {
	t.Parallel()
	got := consultationText("repositories/r1", &architectv1.PlanConsultation{Code: []string{"a.go:1-2 A"},
		CodebaseHealth: "fine", Decisions: []string{"use tabs"}})
	require.Equal(t, strings.Join([]string{
		"## What was found before planning", "",
		"Repository: repositories/r1", "",
		"Code the request touches (the Librarian):", "- a.go:1-2 A", "",
		"Codebase health: fine", "",
		"Similar past failures (the Archivalist):", "- none recorded", "",
		"Past decisions (the Archivalist):", "- use tabs", ""}, "\n"), got)
}

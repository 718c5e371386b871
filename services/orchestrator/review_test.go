package orchestrator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// calcRepoPath is the directory of tenant acme's repository calc.
const calcRepoPath = "/srv/repos/calc"

// reviewHarness is an Orchestrator whose fake Librarian knows one
// repository of tenant "acme", calc at calcRepoPath; another tenant sees
// none. It returns the repository's name.
func reviewHarness(t *testing.T, configure func(*orchestrator.Config)) (*harness, string) {
	t.Helper()
	h, _ := newOrchestratorWith(t, nil, nil, configure)
	return h, h.lib.add("acme", "calc", calcRepoPath, "")
}

func memberCtx(tenant, user string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: identity.RoleMember})
}

// answerReview is an inspector worker's result for a review dispatch.
func (h *harness) answerReview(t *testing.T, d *taskv1.TaskDispatch, rv *orchestratorv1.Review, errText string) {
	t.Helper()
	h.publishResult(t, fmt.Sprintf("%s:%s:%d:result", d.GetRunId(), d.GetNodeId(), d.GetAttempt()), &taskv1.TaskResult{TenantId: d.GetTenantId(),
		RunId: d.GetRunId(), NodeId: d.GetNodeId(), Attempt: d.GetAttempt(), Fence: d.GetFence(), WorkerId: "w1", Review: rv, Error: errText,
		ExitCode: map[bool]int32{true: 1}[errText != ""]})
}

const reviewPatch = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"

// A review of a registered repository's branch: the request is stored, a
// review task goes to the inspector queue with the repository's directory
// and the refs, and the worker's Review completes it; with wait_seconds the
// answer comes once it is done, and the session hears of it.
func TestCreateReviewOfARegisteredRepository(t *testing.T) {
	t.Parallel()
	h, calc := reviewHarness(t, nil)
	ctx := memberCtx("acme", "u1")
	session := "5c0ffee0-8b7a-4c39-9a8e-5d2b1f0c7e60"
	type answer struct {
		resp *orchestratorv1.CreateReviewResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{WaitSeconds: 60, Review: &orchestratorv1.ReviewRequest{
			Repository: calc, BaseRef: "main", HeadRef: "feature", Persona: "security", SessionId: session}})
		done <- answer{resp, err}
	}()
	d := h.tasks(t, "inspector", 1)[0]
	require.Equal(t, "inspector", d.GetRole())
	require.Equal(t, orchestrator.ReviewNode, d.GetNodeId())
	require.Equal(t, calcRepoPath, d.GetRepository())
	require.Equal(t, "acme", d.GetTenantId())
	require.Equal(t, "u1", d.GetUserId())
	require.Equal(t, session, d.GetSessionId())
	rt := d.GetReview()
	require.Equal(t, "reviews/"+d.GetRunId(), rt.GetReview())
	require.Equal(t, "main", rt.GetBaseRef())
	require.Equal(t, "feature", rt.GetHeadRef())
	require.Equal(t, "security", rt.GetPersona())

	h.answerReview(t, d, &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, Persona: "security",
		Blocking: true, Summary: "1 finding", Findings: []*orchestratorv1.Finding{{Severity: orchestratorv1.Severity_SEVERITY_HIGH,
			File: "calc.py", Line: 2, Message: "wrong sign", Blocking: true}}}, "")
	got := <-done
	require.NoError(t, got.err)
	r := got.resp.GetReview()
	require.Equal(t, orchestratorv1.ReviewState_REVIEW_STATE_DONE, r.GetState())
	require.Equal(t, "reviews/"+d.GetRunId(), r.GetName())
	require.Equal(t, calc, r.GetRepository())
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, r.GetReview().GetOutcome())
	require.Len(t, r.GetReview().GetFindings(), 1)
	require.NotNil(t, r.GetEndTime())

	ev := h.event(t, "acme", session, eventv1.EventType_EVENT_TYPE_REVIEW_COMPLETED)
	require.Equal(t, r.GetName(), ev.GetReview().GetReview())
	require.True(t, ev.GetReview().GetResult().GetBlocking())

	// The same repository named by its display name; its path, or any
	// other the tenant did not register, is not found.
	resp, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{
		Repository: "calc", BaseRef: "main"}})
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.ReviewState_REVIEW_STATE_RUNNING, resp.GetReview().GetState(), "no wait: answered at once")
	require.Equal(t, calc, resp.GetReview().GetRepository())
	require.Equal(t, calcRepoPath, h.tasks(t, "inspector", 1)[0].GetRepository())
	for _, repo := range []string{calcRepoPath, "/etc", "repositories/" + ids.New()} {
		_, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Repository: repo, BaseRef: "main"}})
		require.Equal(t, orchestrator.ReasonRepositoryNotFound, apierr.Reason(err), repo)
	}
	_, err = h.svc.Reviews().CreateReview(memberCtx("other", "u1"), &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{
		Repository: calc, BaseRef: "main"}})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant's repository")
}

// A patch alone needs no repository; a review task that fails, fails the
// review; reviews are their user's own.
func TestReviewOfAPatchAndWhoSeesIt(t *testing.T) {
	t.Parallel()
	h, _ := reviewHarness(t, nil)
	ctx := memberCtx("acme", "u1")
	resp, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch}})
	require.NoError(t, err)
	name := resp.GetReview().GetName()
	d := h.tasks(t, "inspector", 1)[0]
	require.Empty(t, d.GetRepository())
	require.Equal(t, reviewPatch, d.GetReview().GetPatch())
	h.answerReview(t, d, &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_MODEL, Summary: "no model reviewed it"}, "")
	require.Eventually(t, func() bool {
		got, err := h.svc.Reviews().GetReview(ctx, &orchestratorv1.GetReviewRequest{Name: name})
		require.NoError(t, err)
		return got.GetReview().GetState() == orchestratorv1.ReviewState_REVIEW_STATE_DONE
	}, waitFor, 20*time.Millisecond)

	resp, err = h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch}})
	require.NoError(t, err)
	h.answerReview(t, h.tasks(t, "inspector", 1)[0], &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED,
		Summary: "the review failed: the model call failed"}, "the review failed: the model call failed")
	require.Eventually(t, func() bool {
		got, err := h.svc.Reviews().GetReview(ctx, &orchestratorv1.GetReviewRequest{Name: resp.GetReview().GetName()})
		require.NoError(t, err)
		return got.GetReview().GetState() == orchestratorv1.ReviewState_REVIEW_STATE_FAILED && got.GetReview().GetError() != ""
	}, waitFor, 20*time.Millisecond)

	_, err = h.svc.Reviews().GetReview(memberCtx("acme", "u2"), &orchestratorv1.GetReviewRequest{Name: name})
	require.Equal(t, "REVIEW_NOT_FOUND", apierr.Reason(err), "another user's review")
	_, err = h.svc.Reviews().GetReview(memberCtx("other", "u1"), &orchestratorv1.GetReviewRequest{Name: name})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant's review")

	list, err := h.svc.Reviews().ListReviews(ctx, &orchestratorv1.ListReviewsRequest{PageSize: 1})
	require.NoError(t, err)
	require.Len(t, list.GetReviews(), 1)
	require.Empty(t, list.GetReviews()[0].GetPatch(), "listed without their patch")
	require.NotEmpty(t, list.GetNextPageToken())
	next, err := h.svc.Reviews().ListReviews(ctx, &orchestratorv1.ListReviewsRequest{PageSize: 1, PageToken: list.GetNextPageToken()})
	require.NoError(t, err)
	require.Equal(t, name, next.GetReviews()[0].GetName())
	require.Empty(t, next.GetNextPageToken())
	none, err := h.svc.Reviews().ListReviews(memberCtx("acme", "u2"), &orchestratorv1.ListReviewsRequest{})
	require.NoError(t, err)
	require.Empty(t, none.GetReviews())
}

func TestCreateReviewIsValidated(t *testing.T) {
	t.Parallel()
	h, calc := reviewHarness(t, nil)
	ctx := memberCtx("acme", "u1")
	for name, tt := range map[string]struct {
		req    *orchestratorv1.CreateReviewRequest
		field  string
		reason string
	}{
		"nothing to review":   {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{}}, field: "review.repository"},
		"no base":             {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Repository: calc}}, field: "review.base_ref"},
		"an option for a ref": {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Repository: calc, BaseRef: "--output=x"}}, field: "review.base_ref"},
		"a patch and a head":  {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch, HeadRef: "x"}}, field: "review.head_ref"},
		"not a diff":          {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: "hello"}}, field: "review.patch"},
		"an unknown persona":  {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch, Persona: "pedantic"}}, field: "review.persona"},
		"too long a wait":     {req: &orchestratorv1.CreateReviewRequest{WaitSeconds: 301, Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch}}, field: "wait_seconds"},
		"no review":           {req: &orchestratorv1.CreateReviewRequest{}, field: "review"},
		"a session not an id": {req: &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch, SessionId: "s1"}}, field: "review.session_id"},
	} {
		_, err := h.svc.Reviews().CreateReview(ctx, tt.req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), name)
		st, _ := status.FromError(err)
		require.Equal(t, tt.field, apierr.Info(st).GetMetadata()["field"], "%s: %v", name, err)
	}
	_, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch, Persona: "pedantic"}})
	require.ErrorContains(t, err, "available default, security, dx, architecture, quick")
	viewer := identity.NewContext(context.Background(), identity.Identity{TenantID: "acme", UserID: "v", Role: identity.RoleViewer})
	_, err = h.svc.Reviews().CreateReview(viewer, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch}})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	_, err = h.bus.EnsureConsumer(ctx, topology.TaskConsumer(h.bus, "inspector", natsx.ConsumerSpec{}))
	require.NoError(t, err)
	h.noMoreTasks(t, "inspector")
}

// Without a Librarian only patches are reviewed; a review no worker takes
// is given up after the review timeout.
func TestReviewWithoutLibrarianAndTimeout(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestratorPeers(t, nil, nil, func(c *orchestrator.Config) { c.ReviewTimeout = time.Second }, app.Peers{})
	ctx := memberCtx("acme", "u1")
	_, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{
		Repository: "repositories/" + ids.New(), BaseRef: "main"}})
	require.Equal(t, orchestrator.ReasonLibrarianNotConfigured, apierr.Reason(err))

	resp, err := h.svc.Reviews().CreateReview(ctx, &orchestratorv1.CreateReviewRequest{Review: &orchestratorv1.ReviewRequest{Patch: reviewPatch}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := h.svc.Reviews().GetReview(ctx, &orchestratorv1.GetReviewRequest{Name: resp.GetReview().GetName()})
		require.NoError(t, err)
		return got.GetReview().GetState() == orchestratorv1.ReviewState_REVIEW_STATE_FAILED
	}, waitFor, 50*time.Millisecond)
	got, err := h.svc.Reviews().GetReview(ctx, &orchestratorv1.GetReviewRequest{Name: resp.GetReview().GetName()})
	require.NoError(t, err)
	require.Contains(t, got.GetReview().GetError(), "timed out: no inspector worker reported the review")

	// A result after that changes nothing.
	d := h.tasks(t, "inspector", 1)[0]
	h.answerReview(t, d, &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED}, "")
	h.resultsDrained(t, 1)
	got, err = h.svc.Reviews().GetReview(ctx, &orchestratorv1.GetReviewRequest{Name: resp.GetReview().GetName()})
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.ReviewState_REVIEW_STATE_FAILED, got.GetReview().GetState())
}

// A run's review persona reaches its nodes, the node's own winning; an
// unknown one is refused.
func TestRunReviewPersona(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("acme")
	h.create(t, ctx, &orchestratorv1.CreateRunRequest{ReviewPersona: "dx", Dag: dagOf(
		&orchestratorv1.Node{Id: "a", Command: "true"}, &orchestratorv1.Node{Id: "b", Command: "true", ReviewPersona: "quick"})})
	personas := map[string]string{}
	for _, d := range h.tasks(t, "engineer", 2) {
		personas[d.GetNodeId()] = d.GetNode().GetReviewPersona()
	}
	require.Equal(t, map[string]string{"a": "dx", "b": "quick"}, personas)
	_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{ReviewPersona: "pedantic", Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "available default, security")
}

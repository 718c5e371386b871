package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/topology"
)

// reviewsOf are the review requests the script server saw.
func reviewsOf(srv *scriptmodel.Server) []scriptmodel.Request {
	var out []scriptmodel.Request
	for _, r := range srv.Requests() {
		if len(r.Messages) > 0 && strings.HasPrefix(r.Messages[0].Content, review.Marker) {
			out = append(out, r)
		}
	}
	return out
}

// The Inspector reviews the Engineer's change once the linters pass: the
// review's blocking finding goes back to the Engineer, which fixes it; the
// second review finds nothing and the Tester passes. The node's persona
// reviews, and each review is an event on the session.
func TestReviewFindingIsFixedByTheEngineer(t *testing.T) {
	g, srv := scriptGate(t,
		scriptmodel.Script{Match: "Make Add return the sum", Turns: []scriptmodel.Turn{
			call("edit_file", map[string]any{"path": "calc.go", "old_string": "func Add(a, b int) int { return a - b }",
				"new_string": "func Add(a, b int) int { return a + b }\n\n// Div divides.\nfunc Div(a, b int) int { return a / b }"}),
			call("finish", map[string]any{"summary": "fixed Add, added Div"}).Then("edited calc.go"),
			call("edit_file", map[string]any{"path": "calc.go", "old_string": "func Div(a, b int) int { return a / b }",
				"new_string": "func Div(a, b int) int {\n\tif b == 0 {\n\t\treturn 0\n\t}\n\treturn a / b\n}"}).
				Then("calc.go:7 high: Div panics when b is 0 (check b before dividing)"),
			call("finish", map[string]any{"summary": "Div checks b"}).Then("edited calc.go"),
		}},
		review.Script(review.Marker+": fix-add (loop 2)"),
		review.Script(review.Marker+": fix-add (loop 1)", map[string]any{"severity": "high", "file": "calc.go", "line": 7,
			"message": "Div panics when b is 0", "suggestion": "check b before dividing", "category": "correctness"},
			map[string]any{"severity": "low", "file": "calc.go", "line": 6, "message": "say what Div does with a remainder"}),
	)
	repo, base := brokenRepo(t)
	s := busService(t)
	s.SetModel(g)
	require.NoError(t, topology.EnsureEvents(t.Context(), s.bus))
	node := &orchestratorv1.Node{Id: "fix-add", Pipeline: true, Prompt: "Make Add return the sum of its arguments.", ReviewPersona: "security"}
	d := repoTask(t, repo, base, node)
	d.TenantId, d.UserId, d.SessionId = "t1", "u1", "3f6d3c1e-8b7a-4c39-9a8e-5d2b1f0c7e65"

	out, cancelled := s.runTask(context.Background(), "engineer", d)
	require.False(t, cancelled)
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError()+"\n"+out.msg.GetStdout())
	p, r := pipelineOf(t, out)
	require.Equal(t, pipeCompleted, p.GetState())
	require.Equal(t, int32(2), p.GetLoops(), "the review's finding took a second loop")
	require.Contains(t, p.GetFeedback()[0], "calc.go:7 high: Div panics when b is 0 (check b before dividing)")
	require.NotContains(t, p.GetFeedback()[0], "remainder", "a finding that does not block is not the Engineer's")
	require.Contains(t, out.msg.GetPatch(), "if b == 0")

	rv := r.GetReview()
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, rv.GetOutcome())
	require.Equal(t, "security", rv.GetPersona())
	require.Empty(t, rv.GetFindings(), "the report holds the last review")
	require.Equal(t, []string{"calc.go"}, rv.GetReviewedFiles())

	reviews := reviewsOf(srv)
	require.Len(t, reviews, 2)
	require.Contains(t, reviews[0].Messages[0].Content, "+func Div(a, b int) int { return a / b }")
	require.Contains(t, reviews[1].Messages[0].Content, "+\tif b == 0 {")
	require.Contains(t, reviews[0].System, "# Reviewer: security")
	require.Equal(t, []string{review.ToolName}, reviews[0].Tools)

	var got []*eventv1.ReviewEvent
	for _, e := range sessionEvents(t, s, d) {
		if e.GetType() == eventv1.EventType_EVENT_TYPE_REVIEW_COMPLETED {
			got = append(got, e.GetReview())
		}
	}
	require.Len(t, got, 2)
	require.Equal(t, "runs/r1", got[0].GetRun())
	require.Equal(t, "fix-add", got[0].GetNode())
	require.True(t, got[0].GetResult().GetBlocking())
	require.False(t, got[1].GetResult().GetBlocking())
}

// Without a model the linters judge the change alone, and the review says
// that no model reviewed it.
func TestNoModelReviewedIt(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	node := &orchestratorv1.Node{Id: "mul", Pipeline: true, Edits: []*orchestratorv1.FileEdit{{
		Path: "mul.go", Content: "package calc\n\n// Mul multiplies.\nfunc Mul(a, b int) int { return a * b }\n"}}}
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	p, r := pipelineOf(t, out)
	require.True(t, p.GetInspectorPassed())
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_MODEL, r.GetReview().GetOutcome())
	require.True(t, strings.HasPrefix(r.GetReview().GetSummary(), "no model reviewed it"), r.GetReview().GetSummary())
	require.Contains(t, out.msg.GetStdout(), "review no_model")

	s.cfg.Review = false
	out, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	_, r = pipelineOf(t, out)
	require.Nil(t, r.GetReview(), "reviews turned off")
}

// branchRepo is gitRepo with a branch "feature" that adds Sub.
func branchRepo(t *testing.T) string {
	t.Helper()
	repo, _ := gitRepo(t)
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	git("branch", "-M", "main")
	git("checkout", "--quiet", "-b", "feature")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "sub.go"), []byte("package calc\n\n// Sub subtracts.\nfunc Sub(a, b int) int { return a - b }\n"), 0o644))
	git("add", "-A")
	git("commit", "--quiet", "-m", "sub")
	git("checkout", "--quiet", "main")
	return repo
}

func reviewDispatch(repo string, rt *taskv1.ReviewTask) *taskv1.TaskDispatch {
	return &taskv1.TaskDispatch{TenantId: "t1", UserId: "u1", RunId: "0b7c1f7e-59f4-4a55-9d1b-1f6c0d2a3b4c", NodeId: "~review", Attempt: 1,
		Role: roleInspector, Repository: repo, Review: rt}
}

// A review task reviews base...head of a repository, or a patch checked
// against base, with the persona asked, and reports the Review.
func TestReviewTask(t *testing.T) {
	g, srv := scriptGate(t, review.Script(review.Marker+": reviews/r1: main...feature",
		map[string]any{"severity": "medium", "file": "sub.go", "line": 4, "message": "Sub has no test"}))
	repo := branchRepo(t)
	s := pipelineService(t)
	s.SetModel(g)

	out, cancelled := s.runTask(context.Background(), roleInspector, reviewDispatch(repo,
		&taskv1.ReviewTask{Review: "reviews/r1", BaseRef: "main", HeadRef: "feature", Persona: "quick"}))
	require.False(t, cancelled)
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	rv := out.msg.GetReview()
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, rv.GetOutcome(), rv.GetSummary())
	require.Equal(t, "quick", rv.GetPersona())
	require.Len(t, rv.GetFindings(), 1)
	require.False(t, rv.GetBlocking())
	reviews := reviewsOf(srv)
	require.Len(t, reviews, 1)
	require.Contains(t, reviews[0].Messages[0].Content, "+func Sub(a, b int) int { return a - b }")
	require.Contains(t, reviews[0].System, "# Reviewer: quick")
	require.NotEmpty(t, out.msg.GetGitAudit())

	patch := "--- a/calc.go\n+++ b/calc.go\n@@ -4 +4 @@\n-func Add(a, b int) int { return a + b }\n+func Add(a, b int) int { return b + a }\n"
	out, _ = s.runTask(context.Background(), roleInspector, reviewDispatch(repo, &taskv1.ReviewTask{Review: "reviews/r2", BaseRef: "main", Patch: patch}))
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, out.msg.GetReview().GetOutcome(), out.msg.GetReview().GetSummary())
	require.True(t, strings.HasPrefix(reviewsOf(srv)[1].Messages[0].Content, review.Marker+": reviews/r2\n"))

	out, _ = s.runTask(context.Background(), roleInspector, reviewDispatch("", &taskv1.ReviewTask{Review: "reviews/r3", Patch: patch}))
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, out.msg.GetReview().GetOutcome(), "a patch alone")

	for name, rt := range map[string]*taskv1.ReviewTask{
		"a patch that does not apply": {Review: "reviews/r4", BaseRef: "main", Patch: strings.ReplaceAll(patch, "a + b", "a * b")},
		"an unknown ref":              {Review: "reviews/r5", BaseRef: "main", HeadRef: "nowhere"},
		"an option for a ref":         {Review: "reviews/r6", BaseRef: "--output=/tmp/x"},
	} {
		out, _ = s.runTask(context.Background(), roleInspector, reviewDispatch(repo, rt))
		require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED, out.msg.GetReview().GetOutcome(), name)
		require.NotEmpty(t, out.msg.GetError(), name)
	}
	require.Len(t, reviewsOf(srv), 3, "failed reviews ask no model")

	// Without a model: NO_MODEL, and the change's files.
	s.SetModel(nil)
	out, _ = s.runTask(context.Background(), roleInspector, reviewDispatch(repo, &taskv1.ReviewTask{Review: "reviews/r7", BaseRef: "main", HeadRef: "feature"}))
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_MODEL, out.msg.GetReview().GetOutcome())
	require.Equal(t, []string{"sub.go"}, out.msg.GetReview().GetReviewedFiles())
	require.Equal(t, int32(0), out.msg.GetExitCode())
}

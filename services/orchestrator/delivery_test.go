package orchestrator_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/services/orchestrator"
)

// gitOut runs git in dir and returns what it printed, trimmed.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), stderr)
	return strings.TrimSpace(string(out))
}

// waitDelivery waits for a run's delivery to be recorded.
func (h *harness) waitDelivery(t *testing.T, ctx context.Context, name string) *orchestratorv1.Run {
	t.Helper()
	var run *orchestratorv1.Run
	require.Eventually(t, func() bool {
		run = h.get(t, ctx, name)
		return run.GetDelivery() != nil
	}, waitFor, 20*time.Millisecond, "run %s was never delivered", name)
	return run
}

// fetchBundle fetches the run's bundle into a new clone of from and
// returns the clone and the branch's commit there.
func fetchBundle(t *testing.T, h *harness, ctx context.Context, from string, run *orchestratorv1.Run) (string, *orchestratorv1.GetRunBundleResponse) {
	t.Helper()
	resp, err := h.svc.GetRunBundle(ctx, &orchestratorv1.GetRunBundleRequest{Name: run.GetName()})
	require.NoError(t, err)
	require.Equal(t, "sylk/"+run.GetId(), resp.GetBranch())
	require.NotEmpty(t, resp.GetBundle())
	dir := t.TempDir()
	file := filepath.Join(dir, "run.bundle")
	require.NoError(t, os.WriteFile(file, resp.GetBundle(), 0o600))
	gitOut(t, dir, "clone", "--quiet", from, "c")
	clone := filepath.Join(dir, "c")
	gitOut(t, clone, "fetch", "--quiet", file, resp.GetBranch()+":"+resp.GetBranch())
	return clone, resp
}

// agentReport is what the fake worker's agent reports: its model and
// tokens, its Tester's results, and, for node a, a review with findings.
func agentReport(d *taskv1.TaskDispatch, r *taskv1.TaskResult) {
	r.Report.Activity = &orchestratorv1.AgentActivity{Model: "anthropic/claude-sonnet-4-5", InputTokens: 1000, OutputTokens: 200}
	r.Pipeline = &orchestratorv1.PipelineStatus{State: "completed", LastTestResult: &orchestratorv1.TestResult{Passed: 3}}
	if d.GetNodeId() == "a" {
		r.Report.Review = &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, Findings: []*orchestratorv1.Finding{
			{Severity: orchestratorv1.Severity_SEVERITY_HIGH, File: "a.txt", Message: "m"},
			{Severity: orchestratorv1.Severity_SEVERITY_LOW, File: "a.txt", Message: "n"},
		}}
	}
}

// A delivered run's change becomes the branch sylk/<run> of its repository
// (git diff base..branch shows it) while the repository's working tree,
// index, current branch and hooks are left alone; the run and its event say
// what was delivered, tested, found and spent, and the bundle fetches.
func TestDeliveredRunMakesABranchInTheRepository(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorkerWith(t, 2, agentReport)
	ctx := userCtx("t1")
	repo := newRepo(t)
	marker := filepath.Join(t.TempDir(), "hook-ran")
	for _, hook := range []string{"pre-receive", "reference-transaction", "post-update"} {
		require.NoError(t, os.WriteFile(filepath.Join(repo, ".git", "hooks", hook), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755))
	}
	// The user is in the middle of something: a changed file, a staged one.
	require.NoError(t, os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("line one\nwork in progress\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "staged.txt"), []byte("staged\n"), 0o644))
	gitOut(t, repo, "add", "staged.txt")
	head, branch, porcelain := gitOut(t, repo, "rev-parse", "HEAD"), gitOut(t, repo, "symbolic-ref", "HEAD"), gitOut(t, repo, "status", "--porcelain")

	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, repo), Deliver: true, Dag: dagOf(
		edit("a", "a.txt", "from a\n"),
		edit("b", "notes.txt", "line one\nline two, by b\n", "a"),
	)})
	got := h.waitDelivery(t, ctx, run.GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_SUCCEEDED, got.GetState())
	d := got.GetDelivery()
	want := "sylk/" + run.GetId()
	require.Equal(t, want, d.GetBranch())
	require.Empty(t, d.GetDetail())
	require.Equal(t, head, d.GetBaseCommit())
	require.Equal(t, gitOut(t, repo, "rev-parse", want), d.GetCommit())
	require.False(t, d.GetPushed())
	require.True(t, d.GetBundleAvailable())
	require.Equal(t, []string{"a.txt", "notes.txt"}, d.GetFilesChanged())
	require.Equal(t, "6 passed, 0 failed, 0 skipped (the tests of 2 tasks)", d.GetTests())
	require.Equal(t, "high: 1, low: 1", d.GetFindings())
	require.Equal(t, int64(2000), d.GetInputTokens())
	require.Equal(t, int64(400), d.GetOutputTokens())
	require.InDelta(t, 2*(1000*3+200*15)/1e6, d.GetCostUsd(), 1e-9)

	diff := gitOut(t, repo, "diff", head+".."+want)
	require.Contains(t, diff, "+from a")
	require.Contains(t, diff, "+line two, by b")
	require.Equal(t, head, gitOut(t, repo, "rev-parse", want+"^"), "the branch is one commit on the base")
	require.Equal(t, "Sylk <sylk@sylk.invalid>|feat: update a.txt (+1 tasks)", gitOut(t, repo, "log", "-1", "--format=%an <%ae>|%s", want))
	msg := gitOut(t, repo, "log", "-1", "--format=%B", want)
	require.Contains(t, msg, "- a: update a.txt\n- b: update notes.txt")
	require.Contains(t, msg, "runs/"+run.GetId())

	require.Equal(t, head, gitOut(t, repo, "rev-parse", "HEAD"), "HEAD stays")
	require.Equal(t, branch, gitOut(t, repo, "symbolic-ref", "HEAD"), "the current branch stays")
	require.Equal(t, porcelain, gitOut(t, repo, "status", "--porcelain"), "the working tree and index stay")
	require.NoFileExists(t, marker, "no hook of the repository ran")

	ev := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_RUN_DELIVERED)
	require.Equal(t, want, ev.GetRun().GetDelivery().GetBranch())
	require.Equal(t, int32(2), ev.GetRun().GetFilesChanged())
	for _, s := range []string{want, "git -C " + repo + " log " + want, "files changed: 2", "tests: 6 passed", "findings: high: 1, low: 1",
		"tokens: 2000 in, 400 out", "cost: $0.0120"} {
		require.Contains(t, ev.GetText(), s)
	}

	// The bundle fetches into any clone of the repository; a viewer may
	// read it, another user may not see the run.
	viewer := identity.NewContext(context.Background(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleViewer})
	clone, resp := fetchBundle(t, h, viewer, repo, run)
	require.Equal(t, d.GetCommit(), gitOut(t, clone, "rev-parse", want))
	require.Equal(t, got.GetResultPatch(), resp.GetPatch())
	require.Equal(t, head, resp.GetBaseCommit())
	other := identity.NewContext(context.Background(), identity.Identity{TenantID: "t1", UserID: "u2", Role: identity.RoleMember})
	_, err := h.svc.GetRunBundle(other, &orchestratorv1.GetRunBundleRequest{Name: run.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err))
}

// A repository cloned from a git URL (in the Librarian's clone directory)
// never gets the branch as a ref in the clone: without allow_push the branch
// is kept for download, with it the branch is pushed to the clone's remote.
func TestURLCloneIsPushedOrOfferedAsABundle(t *testing.T) {
	t.Parallel()
	clones := t.TempDir()
	h, _ := newOrchestratorWith(t, nil, nil, func(c *orchestrator.Config) { c.CloneDir = clones })
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	upstream := newRepo(t)
	clone := filepath.Join(clones, "tenant", "repo")
	gitOut(t, clones, "clone", "--quiet", "file://"+upstream, clone)
	session := ids.New()

	kept := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, clone), Deliver: true,
		Dag: dagOf(edit("a", "a.txt", "from a\n"))})
	d := h.waitDelivery(t, ctx, kept.GetName()).GetDelivery()
	want := "sylk/" + kept.GetId()
	require.Equal(t, want, d.GetBranch())
	require.False(t, d.GetPushed())
	require.True(t, d.GetBundleAvailable())
	require.Empty(t, gitOut(t, clone, "branch", "--list", "sylk/*"), "the Librarian's clone gets no branch")
	require.Empty(t, gitOut(t, upstream, "branch", "--list", "sylk/*"), "nothing is pushed without allow_push")
	ev := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_RUN_DELIVERED)
	require.Contains(t, ev.GetText(), "kept for download: GET /v1/"+kept.GetName()+"/bundle")
	fetched, _ := fetchBundle(t, h, ctx, "file://"+upstream, kept)
	require.Equal(t, d.GetCommit(), gitOut(t, fetched, "rev-parse", want))
	require.Contains(t, gitOut(t, fetched, "diff", d.GetBaseCommit()+".."+want), "+from a")

	pushed := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, clone), Deliver: true, AllowPush: true,
		Dag: dagOf(edit("a", "b.txt", "from b\n"))})
	d = h.waitDelivery(t, ctx, pushed.GetName()).GetDelivery()
	require.True(t, d.GetPushed(), "detail: %s", d.GetDetail())
	require.Equal(t, "file://"+upstream, d.GetRemote())
	require.Equal(t, d.GetCommit(), gitOut(t, upstream, "rev-parse", "sylk/"+pushed.GetId()))
	require.Empty(t, gitOut(t, clone, "branch", "--list", "sylk/*"))
}

// A replica that stopped after its run succeeded, before merging and
// delivering it, leaves the run to the replica that takes over its lease,
// which delivers it; delivering again makes the same commit, and a branch
// of that name that differs is reported, not overwritten.
func TestDeliveryOfAStoppedReplicaIsTakenOverAndIdempotent(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(t)
	cfgA := orchestrator.DefaultConfig()
	cfgA.ReplicaID, cfgA.LeaseTTL = "replica-a", 300*time.Millisecond
	a, stopA := newReplica(t, db, bus, cfgA)
	a.startWorker(t, 1)
	ctx := userCtx("t1")
	repo := newRepo(t)
	// Delivered by nobody: replica a ran it without deliver.
	run := a.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: a.repo(t, ctx, repo), Dag: dagOf(edit("a", "a.txt", "from a\n"))})
	a.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Eventually(t, func() bool { return a.get(t, ctx, run.GetName()).GetResultPatch() != "" }, waitFor, 20*time.Millisecond)
	stopA()
	bg := context.Background()
	_, err := db.Exec(bg, `UPDATE runs SET deliver = true, result_patch = '', lease_expires = now() - interval '1 second'
		WHERE tenant_id = 't1' AND id = $1`, run.GetId())
	require.NoError(t, err)

	cfgB := cfgA
	cfgB.ReplicaID = "replica-b"
	b, _ := newReplica(t, db, bus, cfgB)
	got := b.waitDelivery(t, ctx, run.GetName())
	first := got.GetDelivery()
	want := "sylk/" + run.GetId()
	require.Equal(t, want, first.GetBranch(), "detail: %s", first.GetDetail())
	require.Contains(t, got.GetResultPatch(), "+from a", "the patches were merged first")
	require.Equal(t, first.GetCommit(), gitOut(t, repo, "rev-parse", want))

	redeliver := func() *orchestratorv1.Delivery {
		t.Helper()
		_, err := db.Exec(bg, `UPDATE runs SET delivery = '' WHERE tenant_id = 't1' AND id = $1`, run.GetId())
		require.NoError(t, err)
		return b.waitDelivery(t, ctx, run.GetName()).GetDelivery()
	}
	again := redeliver()
	require.Equal(t, first.GetCommit(), again.GetCommit(), "the same commit each time")
	require.Equal(t, want, again.GetBranch())
	require.Empty(t, again.GetDetail())

	base := run.GetBaseCommit()
	gitOut(t, repo, "update-ref", "refs/heads/"+want, base)
	clash := redeliver()
	require.Empty(t, clash.GetBranch())
	require.Contains(t, clash.GetDetail(), "already has a different branch "+want)
	require.True(t, clash.GetBundleAvailable(), "the commit is still offered")
	require.Equal(t, base, gitOut(t, repo, "rev-parse", want), "not overwritten")
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_SUCCEEDED, b.get(t, ctx, run.GetName()).GetState(), "the run stays succeeded")
}

// A run that changed nothing delivers no branch and says why; there is
// nothing to download, as for a run not created with deliver.
func TestNoChangesRunDeliversNothing(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 1)
	ctx := userCtx("t1")
	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Repository: h.repo(t, ctx, newRepo(t)), Deliver: true,
		Dag: dagOf(prompt("idle", "tidy the notes"))})
	got := h.waitDelivery(t, ctx, run.GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_NO_CHANGES, got.GetState())
	d := got.GetDelivery()
	require.Empty(t, d.GetBranch())
	require.Empty(t, d.GetCommit())
	require.Equal(t, "no changes: idle: "+fakeNoChanges, d.GetDetail())
	require.Equal(t, "no review", d.GetFindings())
	require.Equal(t, "no tests ran", d.GetTests())
	ev := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_RUN_DELIVERED)
	require.Contains(t, ev.GetText(), "delivered no branch: no changes")

	_, err := h.svc.GetRunBundle(ctx, &orchestratorv1.GetRunBundleRequest{Name: run.GetName()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Equal(t, orchestrator.ReasonRunNotDelivered, apierr.Reason(err))
	require.Contains(t, status.Convert(err).Message(), "delivered nothing: no changes")

	plain := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, newRepo(t)), Dag: dagOf(edit("a", "a.txt", "a\n"))})
	h.waitState(t, ctx, plain.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	_, err = h.svc.GetRunBundle(ctx, &orchestratorv1.GetRunBundleRequest{Name: plain.GetName()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "was not created with deliver")

	_, err = h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Deliver: true, Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "deliver needs a repository")
}

// A run with session checks is delivered once its check is done, and its
// delivery says how the session's tests went.
func TestDeliveryWaitsForTheSessionCheck(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: ids.New(), Repository: h.repo(t, ctx, newRepo(t)), SessionChecks: true, Deliver: true,
		Dag: dagOf(cmd("a", "true"))})
	task := h.tasks(t, "engineer", 1)[0]
	h.sendResult(t, "t1", run.GetId(), "a", task.GetAttempt(), 0, "ok", ids.New())
	check := h.tasks(t, "tester", 1)[0]
	require.Equal(t, orchestrator.SessionCheckNode, check.GetNodeId())
	require.Nil(t, h.get(t, ctx, run.GetName()).GetDelivery(), "not delivered while its check is pending")
	sendCheckResult(t, h, run.GetId(), check.GetAttempt(), &orchestratorv1.SessionCheck{State: pipeline.CheckPassed, InspectorPassed: true,
		TesterPassed: true, TestResult: &orchestratorv1.TestResult{Passed: 5}})
	d := h.waitDelivery(t, ctx, run.GetName()).GetDelivery()
	require.Equal(t, "session check passed: 5 passed, 0 failed, 0 skipped", d.GetTests())
	require.Equal(t, "no changes: the run's tasks changed no file", d.GetDetail())
}

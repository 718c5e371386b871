package orchestrator_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/services/orchestrator"
)

func newRepo(t *testing.T) string {
	t.Helper()
	return repoWith(t, map[string]string{"notes.txt": "line one\nline two\n"})
}

func edit(id, path, content string, deps ...string) *orchestratorv1.Node {
	return &orchestratorv1.Node{Id: id, Name: "update " + path, DependsOn: deps,
		Edits: []*orchestratorv1.FileEdit{{Path: path, Content: content}}}
}

func TestRepositoryRunMergesPatchesAndDetectsConflicts(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	repo := newRepo(t)

	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, repo), Dag: dagOf(
		edit("a", "a.txt", "from a\n"),
		edit("b", "b.txt", "from b\n"),
		edit("c", "notes.txt", "line one\nline two, by c\n", "a"),
	)})
	require.Len(t, run.GetBaseCommit(), 40)
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Eventually(t, func() bool { return h.get(t, ctx, run.GetName()).GetResultPatch() != "" }, waitFor, 20*time.Millisecond)
	got = h.get(t, ctx, run.GetName())
	for _, want := range []string{"+from a", "+from b", "+line two, by c"} {
		require.Contains(t, got.GetResultPatch(), want)
	}
	require.Empty(t, got.GetMergeConflicts())
	n := nodesByID(got)
	require.Equal(t, []string{"a.txt"}, n["a"].GetReport().GetFilesChanged())
	require.Contains(t, n["a"].GetPatch(), "+from a")
	require.True(t, strings.HasPrefix(got.GetDecisionLog(), "# Implementation Log\n\n## Task "))
	require.Contains(t, got.GetDecisionLog(), "- Files changed: notes.txt")
	require.Equal(t, 3, strings.Count(got.GetDecisionLog(), "## Task "))

	// Two tasks change the same line from the same starting commit (neither
	// depends on the other, so neither starts from the other's change).
	clash := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, repo), Dag: dagOf(
		edit("x", "notes.txt", "line one\nline two, by x\n"),
		edit("y", "notes.txt", "line one\nline two, by y\n"),
	)})
	h.waitState(t, ctx, clash.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Eventually(t, func() bool { return len(h.get(t, ctx, clash.GetName()).GetMergeConflicts()) > 0 }, waitFor, 20*time.Millisecond)
	got = h.get(t, ctx, clash.GetName())
	require.Equal(t, []string{"y"}, got.GetMergeConflicts())
	require.Contains(t, got.GetResultPatch(), "+line two, by x")
	require.NotContains(t, got.GetResultPatch(), "by y")

}

// A run's repository is one its tenant registered, named by its name, its
// id or its display name, or a git URL; every other answer is the same
// NOT_FOUND, whatever was given: another tenant's repository, a path that
// exists (registered or not) or does not, a file URL. The run shows the
// name; only its tasks get the directory.
func TestRunRepositoryIsTheTenantsOwn(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	path := newRepo(t)
	name := h.lib.add("t1", "calc", path, "")
	other := h.lib.add("t2", "theirs", newRepo(t), "")
	for _, ref := range []string{name, strings.TrimPrefix(name, "repositories/"), strings.ToUpper(strings.TrimPrefix(name, "repositories/")), "CALC", " calc "} {
		run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: ref, Dag: dagOf(cmd("a", "true"))})
		require.Equal(t, name, run.GetRepository(), ref)
		require.Len(t, run.GetBaseCommit(), 40)
		require.Equal(t, path, h.tasks(t, "engineer", 1)[0].GetRepository())
	}

	_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: other, Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.NotFound, status.Code(err))
	want := status.Convert(err).Message()
	require.Equal(t, orchestrator.ReasonRepositoryNotFound, apierr.Reason(err))
	for _, ref := range []string{path, path + "/", "file://" + path, t.TempDir(), "/no/such/directory", "/etc", "relative",
		"../" + filepath.Base(path), "~/x", "theirs", "repositories/" + ids.New(), "repositories/r1", "file:///etc"} {
		_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: ref, Dag: dagOf(cmd("a", "true"))})
		require.Equal(t, codes.NotFound, status.Code(err), ref)
		require.Equal(t, want, status.Convert(err).Message(), "the same answer for %q", ref)
		st, _ := status.FromError(err)
		require.Empty(t, apierr.Info(st).GetMetadata(), ref)
	}
	require.NotContains(t, want, path)

	// The tenant's own directory that is not a git repository is the
	// tenant's to hear about.
	plain := h.lib.add("t1", "plain", t.TempDir(), "")
	_, err = h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: plain, Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, orchestrator.ReasonRepositoryNoCommit, apierr.Reason(err))
	// Two repositories of one display name: the name is asked for.
	h.lib.add("t1", "twin", path, "")
	h.lib.add("t1", "Twin", path, "")
	_, err = h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: "twin", Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "2 repositories are named")
	h.noMoreTasks(t, "engineer")
}

// A git URL is the tenant's repository cloned from it, registered with
// the Librarian (as the caller, under its rules) the first time.
func TestRunRepositoryFromAGitURL(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	clone := newRepo(t)
	const url = "https://git.example.com/acme/calc.git"
	h.lib.cloneTo(url, clone)
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: url, Dag: dagOf(cmd("a", "true"))})
	require.Len(t, h.lib.registered(), 1)
	require.Equal(t, h.lib.registered()[0], run.GetRepository())
	require.Equal(t, clone, h.tasks(t, "engineer", 1)[0].GetRepository())
	again := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: "HTTPS://git.example.com/acme/calc/", Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, run.GetRepository(), again.GetRepository(), "the registered one is reused")
	require.Len(t, h.lib.registered(), 1)
	h.tasks(t, "engineer", 1)

	_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: "ssh://git.example.com/unknown", Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "the Librarian's refusal is passed on")
	_, err = h.svc.CreateRun(userCtx("t2"), &orchestratorv1.CreateRunRequest{Repository: run.GetRepository(), Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant's clone")
}

// Without a Librarian no run may name a repository.
func TestRunRepositoryWithoutLibrarian(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestratorPeers(t, nil, nil, nil, app.Peers{})
	_, err := h.svc.CreateRun(userCtx("t1"), &orchestratorv1.CreateRunRequest{Repository: "repositories/" + ids.New(), Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, orchestrator.ReasonLibrarianNotConfigured, apierr.Reason(err))
	_, err = h.svc.CreateRun(userCtx("t1"), &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))})
	require.NoError(t, err, "a run without a repository needs none")
}

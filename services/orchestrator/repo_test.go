package orchestrator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
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

	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: repo, Dag: dagOf(
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
	clash := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: repo, Dag: dagOf(
		edit("x", "notes.txt", "line one\nline two, by x\n"),
		edit("y", "notes.txt", "line one\nline two, by y\n"),
	)})
	h.waitState(t, ctx, clash.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Eventually(t, func() bool { return len(h.get(t, ctx, clash.GetName()).GetMergeConflicts()) > 0 }, waitFor, 20*time.Millisecond)
	got = h.get(t, ctx, clash.GetName())
	require.Equal(t, []string{"y"}, got.GetMergeConflicts())
	require.Contains(t, got.GetResultPatch(), "+line two, by x")
	require.NotContains(t, got.GetResultPatch(), "by y")

	_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: t.TempDir(), Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "not a git repository")
	_, err = h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Repository: "relative", Dag: dagOf(cmd("a", "true"))})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

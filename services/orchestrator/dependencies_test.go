package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/services/orchestrator"
)

// patchesOf is the node ids of a dispatch's dependency patches, in order,
// each checked to be the patch its node reported.
func patchesOf(t *testing.T, d *taskv1.TaskDispatch, nodes map[string]*orchestratorv1.NodeStatus) []string {
	t.Helper()
	var ids []string
	for _, p := range d.GetDependencyPatches() {
		require.Equal(t, nodes[p.GetNodeId()].GetPatch(), p.GetPatch(), "the patch of %s as it reported it", p.GetNodeId())
		ids = append(ids, p.GetNodeId())
	}
	return ids
}

// Spec T-10: a task starts from its dependencies' changes, direct or not,
// in DAG order; its own patch is taken from there, so each node's patch
// holds only its own change and the run's result merges them all. A retry
// starts from the same changes.
func TestDependentsStartFromTheirDependenciesChanges(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	w := h.startWorker(t, 2)
	ctx := userCtx("t1")
	repo := newRepo(t)
	// b fails on its first attempt (after writing its edit), then passes.
	flaky := fmt.Sprintf(`f=%s/b-flag; if [ ! -e "$f" ]; then touch "$f"; exit 3; fi; echo b says hi`, h.signals)
	b := edit("b", "notes.txt", "line one, by a\nline two, by b\n", "a")
	b.Command, b.Retry = flaky, &orchestratorv1.RetryPolicy{Max: 1, Backoff: durationpb.New(10 * time.Millisecond)}
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, repo), Dag: dagOf(
		edit("c", "notes.txt", "line one, by a\nline two, by b\nline three, by c\n", "b"),
		edit("a", "notes.txt", "line one, by a\nline two\n"),
		b,
		edit("x", "x.txt", "unrelated\n"),
	)})
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Eventually(t, func() bool { return h.get(t, ctx, run.GetName()).GetResultPatch() != "" }, waitFor, 20*time.Millisecond)
	got := h.get(t, ctx, run.GetName())
	n := nodesByID(got)

	require.Empty(t, w.dispatches(run.GetId(), "a")[0].GetDependencyPatches(), "a depends on nothing")
	bs := w.dispatches(run.GetId(), "b")
	require.Len(t, bs, 2)
	for _, d := range bs {
		require.Equal(t, []string{"a"}, patchesOf(t, d, n), "attempt %d of b starts from a's change", d.GetAttempt())
	}
	c := w.dispatches(run.GetId(), "c")[0]
	require.Equal(t, []string{"a", "b"}, patchesOf(t, c, n), "c starts from a's change, then b's")
	require.Equal(t, map[string]string{"b": "b says hi\n"}, c.GetUpstreamOutputs(), "the direct dependencies' stdout comes with them")

	require.Contains(t, n["b"].GetPatch(), "+line two, by b")
	require.NotContains(t, n["b"].GetPatch(), "+line one, by a", "b's patch holds b's change only")
	require.Contains(t, n["c"].GetPatch(), "+line three, by c")
	require.NotContains(t, n["c"].GetPatch(), "+line two, by b")
	require.Empty(t, got.GetMergeConflicts(), "each patch applies on top of its dependencies'")
	for _, want := range []string{"+line one, by a", "+line two, by b", "+line three, by c", "+unrelated"} {
		require.Contains(t, got.GetResultPatch(), want)
	}
	require.NotContains(t, got.GetResultPatch(), "-line one, by a", "the result goes from the base commit to the last change")
}

// A dispatch never carries more of its dependencies' changes than
// -orchestrator.max-dependency-patch-bytes, nor more than one bus message
// holds: the node fails, naming the limit, and its dependents are skipped.
func TestDependencyPatchesOverTheLimitFailTheNode(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestratorWith(t, nil, nil, func(c *orchestrator.Config) { c.MaxDependencyPatchBytes = 2 << 10 })
	w := h.startWorker(t, 2)
	ctx := userCtx("t1")
	repo := newRepo(t)
	retries := &orchestratorv1.RetryPolicy{Max: 3}
	big := edit("big", "big.txt", strings.Repeat("a line of the big file\n", 200))
	over := edit("over", "over.txt", "never\n", "big")
	over.Retry = retries
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, repo), Dag: dagOf(big, over, edit("after", "after.txt", "never\n", "over"))})
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n := nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["big"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n["over"].GetState())
	require.Contains(t, n["over"].GetError(), "over the limit of 2048 (-orchestrator.max-dependency-patch-bytes)")
	require.Equal(t, int32(1), n["over"].GetAttempt(), "not retried: a retry would carry the same patches")
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SKIPPED, n["after"].GetState())
	require.Empty(t, w.dispatches(run.GetId(), "over"), "no worker got the task")
	require.Contains(t, got.GetDecisionLog(), "## Task over (attempt 1): failed\n\n- Not dispatched: the patches of the 1 node(s)")

	// Within the limit, but not within one bus message (1 MiB by default).
	h2, _ := newOrchestratorWith(t, nil, nil, func(c *orchestrator.Config) { c.MaxDependencyPatchBytes = 8 << 20 })
	w2 := h2.startWorker(t, 2)
	var nodes []*orchestratorv1.Node
	var deps []string
	for i := range 5 {
		id := fmt.Sprintf("part%d", i)
		nodes = append(nodes, edit(id, id+".txt", strings.Repeat(fmt.Sprintf("line %d of a large file\n", i), 10<<10)))
		deps = append(deps, id)
	}
	nodes = append(nodes, edit("join", "join.txt", "never\n", deps...))
	run = h2.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h2.repo(t, ctx, repo), Dag: dagOf(nodes...)})
	got = h2.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n = nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n["join"].GetState())
	require.Contains(t, n["join"].GetError(), "a bus message may hold (the NATS server's max_payload")
	require.Empty(t, w2.dispatches(run.GetId(), "join"))
}

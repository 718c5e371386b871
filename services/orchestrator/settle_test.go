package orchestrator_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
)

// A failed run's partial work is kept or rolled back by the user, with a
// receipt of what the result holds (spec B-37, B-39).
func TestSettleRunKeepsOrRollsBackPartialWork(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	repo := newRepo(t)
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: repo, Dag: dagOf(
		edit("doc", "doc.txt", "kept work\n"),
		&orchestratorv1.Node{Id: "bad", Command: "exit 4"},
		edit("after", "after.txt", "never\n", "bad"),
	)})
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	require.Empty(t, h.get(t, ctx, run.GetName()).GetResultPatch(), "a failed run merges nothing by itself")

	keep := orchestratorv1.SettleAction_SETTLE_ACTION_KEEP
	resp, err := h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: keep})
	require.NoError(t, err)
	rc := resp.GetReceipt()
	require.Equal(t, []string{"doc"}, rc.GetKeptNodes())
	require.ElementsMatch(t, []string{"bad", "after"}, rc.GetUnfinishedNodes())
	require.Equal(t, int32(1), rc.GetFilesChanged())
	require.Empty(t, rc.GetConflicts())
	require.Contains(t, rc.GetNote(), "never change the repository itself")
	require.Contains(t, resp.GetRun().GetResultPatch(), "+kept work")
	require.NotContains(t, resp.GetRun().GetResultPatch(), "never")

	resp, err = h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK})
	require.NoError(t, err)
	require.Equal(t, []string{"doc"}, resp.GetReceipt().GetDiscardedNodes())
	require.Empty(t, resp.GetReceipt().GetKeptNodes())
	require.Zero(t, resp.GetReceipt().GetFilesChanged())
	require.Empty(t, h.get(t, ctx, run.GetName()).GetResultPatch())
	require.Contains(t, h.get(t, ctx, run.GetName()).GetNodes()[0].GetPatch(), "+kept work", "the nodes' own patches stay on record")

	code := func(err error) codes.Code { return status.Code(err) }
	_, err = h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: run.GetName()})
	require.Equal(t, codes.InvalidArgument, code(err))
	_, err = h.svc.SettleRun(identity.NewContext(ctx, identity.Identity{TenantID: "t1", UserID: "v", Role: identity.RoleViewer}),
		&orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: keep})
	require.Equal(t, codes.PermissionDenied, code(err))
	_, err = h.svc.SettleRun(userCtx("t2"), &orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: keep})
	require.Equal(t, codes.NotFound, code(err), "another tenant's run is not found")

	ok := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(&orchestratorv1.Node{Id: "a", Command: "true"})})
	h.waitState(t, ctx, ok.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	_, err = h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: ok.GetName(), Action: keep})
	require.Equal(t, codes.FailedPrecondition, code(err))
	require.Contains(t, err.Error(), "only a FAILED or CANCELLED run")
}

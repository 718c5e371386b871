package orchestrator_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
)

// A failed run offers its choices with a default by error tier (spec
// B-37): retry for a transient or external failure, keep for one the user
// can fix, roll back for a permanent one; retrying runs the failed nodes
// and those their failure skipped.
func TestPartialFailureDefaultsAndRetryFromFailure(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	failed := func(nodes ...*orchestratorv1.Node) *orchestratorv1.Run {
		t.Helper()
		run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(nodes...)})
		return h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	}

	pf := failed(cmd("bad", "exit 4")).GetPartialFailure()
	require.Equal(t, []string{"bad"}, pf.GetFailedNodes())
	require.Equal(t, "permanent", pf.GetErrorTier())
	require.Equal(t, orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK, pf.GetDefaultAction())
	require.NotEmpty(t, pf.GetReason())

	pf = failed(cmd("missing", "no-such-command-for-sylk")).GetPartialFailure()
	require.Equal(t, "user_fixable", pf.GetErrorTier())
	require.Equal(t, orchestratorv1.SettleAction_SETTLE_ACTION_KEEP, pf.GetDefaultAction())

	// The gravest tier decides: a timeout beside a permanent failure.
	marker := filepath.Join(h.signals, "ran")
	slow := &orchestratorv1.Node{Id: "slow", Command: "if [ -f " + marker + " ]; then echo again; else touch " + marker + "; sleep 30; fi",
		Timeout: durationpb.New(300 * time.Millisecond)}
	pf = failed(slow, cmd("bad", "exit 4")).GetPartialFailure()
	require.ElementsMatch(t, []string{"slow", "bad"}, pf.GetFailedNodes())
	require.Equal(t, "permanent", pf.GetErrorTier())
	require.NoError(t, os.Remove(marker))

	// A timeout alone: retry is the default, and it runs the node and its
	// skipped dependent again.
	run := failed(slow, cmd("after", "echo after", "slow"))
	pf = run.GetPartialFailure()
	require.Equal(t, "transient", pf.GetErrorTier())
	require.Equal(t, orchestratorv1.SettleAction_SETTLE_ACTION_RETRY, pf.GetDefaultAction())
	resp, err := h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: pf.GetDefaultAction()})
	require.NoError(t, err)
	require.Equal(t, []string{"slow"}, resp.GetReceipt().GetRetriedNodes())
	done := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	require.Nil(t, done.GetPartialFailure())
	n := nodesByID(done)
	require.Equal(t, int32(2), n["slow"].GetAttempt())
	require.Contains(t, n["slow"].GetStdout(), "again")
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["after"].GetState())

	// Nothing to retry from: a succeeded run.
	_, err = h.svc.SettleRun(ctx, &orchestratorv1.SettleRunRequest{Name: run.GetName(), Action: orchestratorv1.SettleAction_SETTLE_ACTION_RETRY})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
}

// A failed run's partial work is kept or rolled back by the user, with a
// receipt of what the result holds (spec B-37, B-39).
func TestSettleRunKeepsOrRollsBackPartialWork(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 2)
	ctx := userCtx("t1")
	repo := newRepo(t)
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Repository: h.repo(t, ctx, repo), Dag: dagOf(
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

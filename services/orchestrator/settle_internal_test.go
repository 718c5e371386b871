package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
)

// A run that failed only because its user cancelled a node offers to keep
// its work, with no error tier; one that did not fail offers nothing.
func TestPartialFailureOfACancelledNode(t *testing.T) {
	t.Parallel()
	pf := partialFailure([]nodeRow{{NodeID: "a", State: stateSucceeded}, {NodeID: "b", State: stateCancelled}, {NodeID: "c", State: stateSkipped}})
	require.Equal(t, []string{"b"}, pf.GetFailedNodes())
	require.Empty(t, pf.GetErrorTier())
	require.Equal(t, orchestratorv1.SettleAction_SETTLE_ACTION_KEEP, pf.GetDefaultAction())
	require.Contains(t, pf.GetReason(), "cancelled a node")
	require.Nil(t, partialFailure([]nodeRow{{NodeID: "a", State: stateSucceeded}}))
	// A failure beside a cancelled node: the failure decides.
	pf = partialFailure([]nodeRow{{NodeID: "b", State: stateCancelled}, {NodeID: "d", State: stateFailed, ExitCode: 4}})
	require.Equal(t, []string{"d"}, pf.GetFailedNodes())
	require.Equal(t, "permanent", pf.GetErrorTier())
}

// A result patch is stored only while the run is in the states given: a
// settlement computed for a failed run that a retry reopened meanwhile
// leaves the run's patch to its next ending.
func TestStoreMergeOnlyInState(t *testing.T) {
	t.Parallel()
	db, _ := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	ctx := context.Background()
	run := &runRow{TenantID: "t1", ID: ids.New(), UserID: "u1", State: stateRunning, MaxConcurrency: 1, DAG: []byte{}, LeaseOwner: "r"}
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return insertRun(ctx, tx, run, time.Minute) }))

	stored, err := storeMerge(ctx, db, "t1", run.ID, "stale patch", nil, stateFailed, stateCancelled)
	require.NoError(t, err)
	require.False(t, stored, "the run is running again")
	got, err := getRun(ctx, db, "t1", run.ID)
	require.NoError(t, err)
	require.Empty(t, got.ResultPatch)

	stored, err = storeMerge(ctx, db, "t1", run.ID, "patch", nil, stateRunning)
	require.NoError(t, err)
	require.True(t, stored)
	got, err = getRun(ctx, db, "t1", run.ID)
	require.NoError(t, err)
	require.Equal(t, "patch", got.ResultPatch)
}

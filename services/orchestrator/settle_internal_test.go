package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
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

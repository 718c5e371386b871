package orchestrator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// TestRunOutputSecretsAreRedacted: keys a task prints are stored and shown
// redacted, and so is the command that printed them; the worker ran it as
// written.
func TestRunOutputSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 1)
	ctx := userCtx("t1")
	awsID := "AKIA" + "Q7ZP2LK3XW4RT6VN"
	pat := "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(
		cmd("leak", "echo deploying with "+awsID+"; echo token "+pat+" >&2"),
	)})
	run = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	n := run.GetNodes()[0]
	require.Equal(t, "deploying with [REDACTED:aws-access-token]\n", n.GetStdout(), "the command ran as written")
	require.Equal(t, "token [REDACTED:github-fine-grained-pat]\n", n.GetStderr())
	shown := run.String()
	require.NotContains(t, shown, awsID)
	require.NotContains(t, shown, pat)

	var stored string
	require.NoError(t, h.db.QueryRow(ctx, `SELECT stdout || stderr FROM nodes WHERE run_id = $1`, run.GetId()).Scan(&stored))
	require.NotContains(t, stored, awsID)
	require.NotContains(t, stored, pat)
}

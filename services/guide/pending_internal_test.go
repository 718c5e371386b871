package guide

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A pending request written again updates its own row; one that reuses
// the id of another tenant's (or session's) request fails, alone and in a
// pipelined group, and leaves that request as it was.
func TestPendingRequestIDsStayWithTheirSession(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t, Config{}, false)
	one := f.createSession(t, as("t1", "u1"), "one")
	other := f.createSession(t, as("t2", "u2"), "other")
	ctx := t.Context()
	now := time.Now()
	p := pendingRequest{CorrelationID: "corr-1", TenantID: "t1", UserID: "u1", SessionID: one.GetId(),
		Target: "librarian", Original: "where is x", Envelope: []byte("e"), Deadline: now.Add(time.Minute), CreateTime: now, State: statePending}
	require.NoError(t, trackPending(ctx, f.db, p))
	p.Target = "archivalist"
	require.NoError(t, trackPending(ctx, f.db, p), "the same session's request again")

	planted := p
	planted.TenantID, planted.UserID, planted.SessionID, planted.Target = "t2", "u2", other.GetId(), "engineer"
	err := trackPending(ctx, f.db, planted)
	require.ErrorContains(t, err, "belongs to another session")
	var b pgx.Batch
	stmts{insertPending(planted)}.queue(&b)
	require.ErrorContains(t, f.db.SendBatch(ctx, &b).Close(), "belongs to another session")

	got, found, err := getPending(ctx, f.db, "t1", "corr-1", false)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "archivalist", got.Target)
	_, found, err = getPending(ctx, f.db, "t2", "corr-1", false)
	require.NoError(t, err)
	require.False(t, found)
}

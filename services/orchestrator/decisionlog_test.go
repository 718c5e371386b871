package orchestrator_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// A long decision log is read in time and memory in proportion to its size.
// Not parallel: it measures the process's allocations.
func TestLongDecisionLogIsReadInLinearMemory(t *testing.T) {
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("a", "true"))})
	// 3,000 finished attempts with a section of 1 KB each: a 3 MB log.
	const attempts, sectionBytes = 3000, 1 << 10
	_, err := h.db.Exec(context.Background(), `INSERT INTO attempts (tenant_id, run_id, node_id, attempt, state, section)
		SELECT 't1', $1, 'a', 100 + g, 'FAILED', '## Task a' || repeat('.', $2) || E'\n' FROM generate_series(1, $3) g`,
		run.GetId(), sectionBytes-len("## Task a\n"), attempts)
	require.NoError(t, err)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d, err := h.svc.ListDecisions(ctx, &orchestratorv1.ListDecisionsRequest{Name: run.GetName()})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Len(t, d.GetEntries(), attempts)
	require.Equal(t, attempts, strings.Count(d.GetLog(), "## Task a"))
	// The entries and the log are 6 MB; appending each section to a copy
	// of the log so far allocated 4.6 GB.
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(256<<20), "bytes allocated")
}

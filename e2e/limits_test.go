package e2e

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMeshSessionLimitsBoundPlanRuns creates a session allowed one task at a
// time, approves a plan of three independent nodes, and checks from the
// run's node times that the nodes ran one after another.
func TestMeshSessionLimitsBoundPlanRuns(t *testing.T) {
	c := startMesh(t)

	sess := c.ok("POST", "/v1/sessions", map[string]any{
		"displayName": "limits",
		"config":      map[string]any{"maxConcurrentTasks": 1},
	})["session"].(map[string]any)
	require.EqualValues(t, 1, sess["config"].(map[string]any)["maxConcurrentTasks"])
	name := sess["name"].(string)

	plan := c.ok("POST", "/v1/"+name+"/plans", map[string]any{
		"request": "run three independent checks",
		"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "command": "sleep 0.2; echo alpha"},
			map[string]any{"id": "b", "command": "sleep 0.2; echo beta"},
			map[string]any{"id": "c", "command": "sleep 0.2; echo gamma"},
		}},
	})["plan"].(map[string]any)
	require.Equal(t, "PLAN_STATE_AWAITING_APPROVAL", plan["state"])
	// The plan asks for more at once than the session allows.
	approved := c.ok("POST", "/v1/"+plan["name"].(string)+":approve", map[string]any{"maxConcurrency": 3})
	run := c.waitRun(approved["run"].(map[string]any)["name"].(string))
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "run: %v", run)

	type span struct {
		id         string
		start, end time.Time
	}
	var spans []span
	for _, n := range run["nodes"].([]any) {
		n := n.(map[string]any)
		spans = append(spans, span{id: n["nodeId"].(string), start: parseTime(t, n["startTime"]), end: parseTime(t, n["endTime"])})
	}
	require.Len(t, spans, 3)
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		require.False(t, spans[i].start.Before(spans[i-1].end),
			"node %s started at %s, before node %s ended at %s", spans[i].id, spans[i].start, spans[i-1].id, spans[i-1].end)
	}
}

package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Suspending a session pauses its runs, so a suspended session does no new
// work; resuming it resumes them.
func TestSuspendPausesSessionRuns(t *testing.T) {
	c := startMesh(t)
	sess := c.ok("POST", "/v1/sessions", map[string]any{})["session"].(map[string]any)
	name, id := sess["name"].(string), sess["id"].(string)

	run := c.ok("POST", "/v1/runs", map[string]any{
		"sessionId": id,
		"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "command": "sleep 3"},
			map[string]any{"id": "b", "dependsOn": []string{"a"}, "command": "echo after"},
		}},
	})["run"].(map[string]any)
	runName := run["name"].(string)

	c.ok("POST", "/v1/"+name+":suspend", map[string]any{})
	paused := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_SESSION_RUNS_PAUSED" })
	require.Contains(t, payload(paused, "sessionRuns")["runs"], runName)

	// a finishes, but b is not dispatched while the session is suspended.
	var nodes map[string]string
	require.Eventually(t, func() bool {
		r := c.ok("GET", "/v1/"+runName, nil)["run"].(map[string]any)
		nodes = map[string]string{}
		for _, n := range r["nodes"].([]any) {
			m := n.(map[string]any)
			nodes[m["nodeId"].(string)] = m["state"].(string)
		}
		return nodes["a"] == "NODE_STATE_SUCCEEDED"
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "NODE_STATE_PENDING", nodes["b"], "nothing new starts in a suspended session")

	c.ok("POST", "/v1/"+name+":resume", map[string]any{})
	c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_SESSION_RUNS_RESUMED" })
	done := c.waitRun(runName)
	require.Equal(t, "RUN_STATE_SUCCEEDED", done["state"])
}

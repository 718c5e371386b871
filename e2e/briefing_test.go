package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRetryBriefing drives the retry briefing through REST (spec B-38): a
// node retried after failing gets its prior attempts' story, and the run's
// decision log records it for the retried attempt only.
func TestRetryBriefing(t *testing.T) {
	c := startMesh(t)
	run := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
		map[string]any{"id": "broken", "command": "exit 7", "retry": map[string]any{"max": 1, "backoff": "0.010s"}},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(run)["state"])
	d := c.ok("GET", "/v1/"+run+"/decisions", nil)
	require.Len(t, d["entries"], 2)
	log := d["log"].(string)
	require.Contains(t, log, "## Task broken (attempt 2): failed\n")
	require.Contains(t, log, "- Briefing: attempt 2 after 1 prior: Attempt 1 exited with 7.")
	require.Equal(t, 1, strings.Count(log, "- Briefing:"), "the first attempt is not briefed")
}

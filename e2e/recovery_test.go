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

// TestSettlePartialWork drives the partial-failure choices through REST
// (spec B-37, B-39): a failed repository run's succeeded work is kept in
// its result patch, then rolled back, each time with a receipt.
func TestSettlePartialWork(t *testing.T) {
	c := startMesh(t)
	repo := e2eRepo(t)
	run := c.createRun(map[string]any{"repository": repo, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "doc", "edits": []any{map[string]any{"path": "NOTES.md", "content": "partial\n"}}},
		map[string]any{"id": "bad", "command": "exit 4"},
	}}})
	require.Equal(t, "RUN_STATE_FAILED", c.waitRun(run)["state"])

	kept := c.ok("POST", "/v1/"+run+":settle", map[string]any{"action": "SETTLE_ACTION_KEEP"})
	rc := kept["receipt"].(map[string]any)
	require.Equal(t, []any{"doc"}, rc["keptNodes"])
	require.Equal(t, []any{"bad"}, rc["unfinishedNodes"])
	require.EqualValues(t, 1, rc["filesChanged"])
	require.Contains(t, kept["run"].(map[string]any)["resultPatch"], "+partial")

	back := c.ok("POST", "/v1/"+run+":settle", map[string]any{"action": "SETTLE_ACTION_ROLLBACK"})
	require.Equal(t, []any{"doc"}, back["receipt"].(map[string]any)["discardedNodes"])
	require.Empty(t, back["run"].(map[string]any)["resultPatch"])

	r := c.do("POST", "/v1/"+run+":settle", map[string]any{})
	require.Equal(t, 400, r.Status, r.Raw)
	ok := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{map[string]any{"id": "a", "command": "true"}}}})
	require.Equal(t, "RUN_STATE_SUCCEEDED", c.waitRun(ok)["state"])
	r = c.do("POST", "/v1/"+ok+":settle", map[string]any{"action": "SETTLE_ACTION_KEEP"})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "only a FAILED or CANCELLED run")
}

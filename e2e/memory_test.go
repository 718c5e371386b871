package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/testenv"
)

// TestFailureMemory is spec E-09 through the mesh: a failed run's node is
// recorded in the Archivalist under its repository; a session started on
// that repository is briefed on it; "what failed recently?" lists it and
// not an older failure; and the next plan on the same area is alerted.
func TestFailureMemory(t *testing.T) {
	c := startMesh(t, "-guide.llm-classifier=false")
	repo := c.register(e2eRepo(t))

	// A run on the repository whose node fails: its failure is recorded.
	run := c.waitRun(c.createRun(map[string]any{"repository": repo, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "parse", "name": "Rewrite the calc parser", "files": []string{"calc.go"},
			"command": "echo 'calc.go:4: undefined: Parse' >&2; exit 2", "retry": map[string]any{"max": 0}},
	}}}))
	require.Equal(t, "RUN_STATE_FAILED", run["state"])
	runName := run["name"].(string)
	failures := c.archived("calc parser", "failure", 1, func(e map[string]any) bool {
		return e["repository"] == repo && strings.Contains(e["content"].(string), "Run: "+runName)
	})
	failure := failures[0]
	require.Contains(t, failure["title"], "Failed: Rewrite the calc parser")
	for _, want := range []string{"Node: parse", "Files: calc.go", "Repository: " + repo, "Error tier: permanent", "undefined: Parse"} {
		require.Contains(t, failure["content"], want)
	}

	// An older failure of the same repository, 10 days back.
	old := c.ok("POST", "/v1/entries", map[string]any{"category": "failure", "title": "Failed: the ancient calc parser port",
		"content": "Files: calc.go", "repository": repo})["entry"].(map[string]any)
	ctx := context.Background()
	pool, err := mesh.OpenSchema(ctx, pgstore.Config{DSN: testenv.PostgresDSN(), MaxConns: 1}, c.schemaPrefix, "archivalist")
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `UPDATE entries SET created_at = now() - interval '10 days' WHERE id = $1::uuid`, old["id"])
	require.NoError(t, err)

	// A session on the repository is briefed on its recent failure.
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "memory", "repository": repo})["session"].(map[string]any)
	name := sess["name"].(string)
	ev := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_SESSION_BRIEFING" })
	brief := payload(ev, "briefing")
	require.Equal(t, repo, brief["repository"])
	require.Equal(t, failure["name"], brief["failures"].([]any)[0].(map[string]any)["entry"], "%v", brief)
	require.Len(t, brief["failures"], 1, "the older failure is outside the 7 days")
	require.Contains(t, ev["text"], "Rewrite the calc parser")
	require.Contains(t, ev["text"], "no model wrote this")

	// "What failed recently?" lists it, not the older one, and says the
	// window it searched.
	sent := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "what failed recently?"})
	route := sent["route"].(map[string]any)
	require.Equal(t, "archivalist", route["target"], "%v", sent)
	require.Equal(t, "recent", route["timeScope"])
	corr := sent["correlationId"].(string)
	answer := c.waitEvent(name, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_MESSAGE_ANSWERED" && e["source"] == "archivalist" && e["correlationId"] == corr
	})
	require.Contains(t, answer["text"], "in the last 7 days")
	var hitIDs []string
	for _, h := range payload(answer, "messageAnswered")["hits"].([]any) {
		hitIDs = append(hitIDs, h.(map[string]any)["id"].(string))
	}
	require.Contains(t, hitIDs, failure["id"], "%v", answer)
	require.NotContains(t, hitIDs, old["id"])

	// The next plan on the same area is alerted to the failure.
	plan := c.ok("POST", "/v1/"+name+"/plans", map[string]any{"request": "Rewrite the parser in calc.go so that it parses sums"})["plan"].(map[string]any)
	cons := plan["consultation"].(map[string]any)
	alerts, _ := cons["failureAlerts"].([]any)
	require.NotEmpty(t, alerts, "consultation: %v", cons)
	alert := alerts[0].(map[string]any)
	require.Equal(t, failure["name"], alert["entry"])
	require.Equal(t, runName, alert["run"])
	require.Contains(t, alert["reason"], "calc.go")
	require.Contains(t, strings.Join(anyStrings(plan["notes"]), "\n"), "similar failure: \""+failure["title"].(string))

	// The REST search takes the window and says how to fix a bad one.
	r := c.do("POST", "/v1/entries:search", map[string]any{"query": "calc parser", "crossSession": true, "timeScope": "fortnight"})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "allowed values")
	recent := c.ok("POST", "/v1/entries:search", map[string]any{"query": "calc parser", "crossSession": true, "timeScope": "recent",
		"repository": repo, "category": "failure"})
	require.Len(t, recent["hits"], 1)
	since := c.ok("POST", "/v1/entries:search", map[string]any{"query": "calc parser", "crossSession": true, "repository": repo,
		"category": "failure", "until": time.Now().Add(-9 * 24 * time.Hour).UTC().Format(time.RFC3339)})
	require.Len(t, since["hits"], 1)
	require.Equal(t, old["id"], since["hits"].([]any)[0].(map[string]any)["entry"].(map[string]any)["id"])
}

// TestFailureMemoryOfARecoveredRetry is spec G-25 through the mesh: a node
// whose command fails the first time and succeeds on its retry leaves a
// failure record marked recovered, and the next plan on the same area is
// alerted to it as recovered, with how often the area failed.
func TestFailureMemoryOfARecoveredRetry(t *testing.T) {
	c := startMesh(t, "-guide.llm-classifier=false")
	repo := c.register(e2eRepo(t))
	// The task sees its workspace and its user's Go caches only: the
	// caches outlive the attempt, so the marker of the first goes there.
	marker := `"$GOCACHE/sylk-e2e-tried-` + testenv.ID() + `"`
	run := c.waitRun(c.createRun(map[string]any{"repository": repo, "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "lex", "name": "Rewrite the calc lexer", "files": []string{"lex.go"},
			"command": "test -e " + marker + " || { touch " + marker + "; echo 'lex.go:9: undefined: Token' >&2; exit 2; }",
			"retry":   map[string]any{"max": 1, "backoff": "1s"}},
	}}}))
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "%v", nodeMap(run))
	require.EqualValues(t, 2, nodeMap(run)["lex"]["attempt"])
	runName := run["name"].(string)
	failure := c.archived("calc lexer", "failure", 1, func(e map[string]any) bool {
		return e["repository"] == repo && strings.Contains(e["content"].(string), "Run: "+runName)
	})[0]
	require.Contains(t, failure["title"], "Failed, then recovered: Rewrite the calc lexer")
	for _, want := range []string{"Attempt: 1\n", "Recovered: attempt 2 succeeded", "Outcome: recovered", "Files: lex.go",
		"Signature: lex.go:#: undefined: token", "undefined: Token"} {
		require.Contains(t, failure["content"], want)
	}

	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "recovered", "repository": repo})["session"].(map[string]any)
	plan := c.ok("POST", "/v1/"+sess["name"].(string)+"/plans", map[string]any{"request": "Rewrite the lexer in lex.go so that it reads tokens"})["plan"].(map[string]any)
	cons := plan["consultation"].(map[string]any)
	alerts, _ := cons["failureAlerts"].([]any)
	require.NotEmpty(t, alerts, "consultation: %v", cons)
	alert := alerts[0].(map[string]any)
	require.Equal(t, failure["name"], alert["entry"])
	require.Equal(t, true, alert["recovered"], "%v", alert)
	require.EqualValues(t, 1, alert["recentFailures"], "%v", alert)
	require.Contains(t, strings.Join(anyStrings(plan["notes"]), "\n"), "recovered on retry")
}

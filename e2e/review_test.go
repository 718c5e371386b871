package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/review"
)

// The review API through the mesh (spec P-01..P-14): a registered
// repository's branch is reviewed by the scripted model through a real
// inspector worker, and the finding comes back within wait_seconds; a
// patch of excluded files alone asks no model.
func TestReviewAPI(t *testing.T) {
	c, srv := scriptMesh(t, nil, review.Script("main...feature", map[string]any{"severity": "high", "file": "calc.py", "line": 5,
		"message": "div raises ZeroDivisionError when b is 0", "suggestion": "check b first", "category": "correctness"}))
	repo := pyRepo(t, map[string]string{"calc.py": "def add(a, b):\n    return a + b\n"})
	gitCmd(t, repo, "branch", "-M", "main")
	gitCmd(t, repo, "checkout", "--quiet", "-b", "feature")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "calc.py"), []byte("def add(a, b):\n    return a + b\n\ndef div(a, b):\n    return a / b\n"), 0o644))
	gitCmd(t, repo, "commit", "--quiet", "-am", "div")
	gitCmd(t, repo, "checkout", "--quiet", "main")
	name := c.ok("POST", "/v1/repositories?index=false", map[string]any{"path": repo})["repository"].(map[string]any)["name"].(string)

	got := c.ok("POST", "/v1/reviews?waitSeconds=120", map[string]any{"repository": name, "baseRef": "main", "headRef": "feature",
		"persona": "security"})["review"].(map[string]any)
	require.Equal(t, "REVIEW_STATE_DONE", got["state"], "review: %v", got)
	rv := got["review"].(map[string]any)
	require.Equal(t, "REVIEW_OUTCOME_REVIEWED", rv["outcome"])
	require.Equal(t, "security", rv["persona"])
	require.Equal(t, true, rv["blocking"])
	finding := rv["findings"].([]any)[0].(map[string]any)
	require.Equal(t, "SEVERITY_HIGH", finding["severity"])
	require.Equal(t, "div raises ZeroDivisionError when b is 0", finding["message"])
	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Contains(t, reqs[0].Messages[0].Content, "+def div(a, b):")
	require.Contains(t, reqs[0].System, "# Reviewer: security")

	excluded := "diff --git a/gen/api.pb.go b/gen/api.pb.go\n--- a/gen/api.pb.go\n+++ b/gen/api.pb.go\n@@ -1 +1 @@\n-package api\n+package api // v2\n"
	got = c.ok("POST", "/v1/reviews?waitSeconds=120", map[string]any{"patch": excluded})["review"].(map[string]any)
	require.Equal(t, "REVIEW_STATE_DONE", got["state"], "review: %v", got)
	require.Equal(t, "REVIEW_OUTCOME_ALL_FILES_EXCLUDED", got["review"].(map[string]any)["outcome"])
	require.Len(t, srv.Requests(), 1, "no model was asked")

	list := c.ok("GET", "/v1/reviews", nil)["reviews"].([]any)
	require.Len(t, list, 2)
	one := c.ok("GET", "/v1/"+got["name"].(string), nil)["review"].(map[string]any)
	require.Equal(t, got["name"], one["name"])
	require.Empty(t, srv.Failures())
}

package guide

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModelRoutesIssuePhrases: ordinary developer questions route to their
// agent without a clarification (issue 24), and an unclear one is asked.
func TestModelRoutesIssuePhrases(t *testing.T) {
	t.Parallel()
	c := newModelClassifier()
	tests := []struct {
		text, target, knowledge, scope string
	}{
		{"how are prepared statements cached?", "librarian", "", ""},
		{"explain how CopyFrom works", "librarian", "EXPLAIN", ""},
		{"find the function that parses durations", "librarian", "LOCATE", ""},
		{"what failed recently?", "archivalist", "", "recent"},
		{"what do our docs say about error handling?", "academic", "", ""},
		{"what is Main", "librarian", "", ""},
		{"where is the auth middleware", "librarian", "LOCATE", ""},
		{"how did we handle the auth migration last month", "archivalist", "HISTORICAL", "last_month"},
		{"where was I in the last session", "archivalist", "RESUME", ""},
		{"is there an RFC or best practice for idempotency keys?", "academic", "", ""},
		{"fix typo in README", "architect", "", ""},
		{"upgrade pgx to v5.7", "architect", "", ""},
		{"rename Classify to Route", "architect", "", ""},
		{"make the reaper interval configurable", "architect", "", ""},
		{"hello", "", "", ""},
		{"the cache", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			got, err := c.Classify(context.Background(), tt.text)
			require.NoError(t, err)
			require.NotEmpty(t, got.Reason)
			if tt.target == "" {
				require.True(t, got.Target == "" || got.Confidence < DefaultRouteThreshold, "%+v", got)
				return
			}
			require.Equal(t, tt.target, got.Target, "%+v", got)
			require.GreaterOrEqual(t, got.Confidence, DefaultRouteThreshold, "%+v", got)
			require.Equal(t, tt.target, got.Candidates[0])
			if tt.knowledge != "" {
				require.Equal(t, tt.knowledge, got.KnowledgeIntent, "%+v", got)
			}
			require.Equal(t, tt.scope, got.TimeScope, "%+v", got)
		})
	}
}

// TestModelKeepsRefinement: a routed change keeps the intent gate's type
// and action that the rules give it.
func TestModelKeepsRefinement(t *testing.T) {
	t.Parallel()
	c := newModelClassifier()
	for text, want := range map[string][2]string{
		"fix typo in README":                             {"FIX", "TRIVIAL"},
		"Refactor the scheduler loop":                    {"MODIFY", "EXPLICIT"},
		"fix issue #42 and open a pull request":          {"FIX", "GITHUB_WORK"},
		"Could you add a health endpoint to the gateway": {"CREATE", "EXPLICIT"},
	} {
		got, err := c.Classify(context.Background(), text)
		require.NoError(t, err)
		require.Equal(t, "architect", got.Target, text)
		require.Equal(t, want[0], got.Action, text)
		require.Equal(t, want[1], got.IntentType, text)
	}
}

func TestRoutingSet(t *testing.T) {
	t.Parallel()
	set, err := RoutingSet()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(set), 300)
	seen := map[string]bool{}
	for _, ex := range set {
		require.False(t, seen[ex.Text], "duplicate %q", ex.Text)
		seen[ex.Text] = true
	}
}

package guide

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/testenv"
)

func TestKeywordClassifier(t *testing.T) {
	t.Parallel()
	c := newKeywordClassifier()
	tests := []struct {
		text   string
		target string // "" when the Guide should ask
		intent string // the action
		gate   string // the intent gate's type, when routed
	}{
		{"where is the function ComputeInvoiceTotal defined in the code?", "librarian", "FIND_CODE", "EXPLORATORY"},
		{"who calls parse_config", "librarian", "FIND_CODE", "EXPLORATORY"},
		{"did we try a write-through cache previously?", "archivalist", "RECALL", "EXPLORATORY"},
		{"remember the decision about retries from last time", "archivalist", "RECALL", "EXPLORATORY"},
		{"is there an RFC or best practice for idempotency keys?", "academic", "RESEARCH", "EXPLORATORY"},
		{"Refactor the scheduler loop", "architect", "MODIFY", "EXPLICIT"},
		{"Could you add a health endpoint to the gateway", "architect", "CREATE", "EXPLICIT"},
		{"fix the bug in ParseConfig", "architect", "FIX", "EXPLICIT"},
		{"fix typo in README", "architect", "FIX", "TRIVIAL"},
		{"improve the performance", "architect", "MODIFY", "OPEN_ENDED"},
		{"fix issue #42 and open a pull request", "architect", "FIX", "GITHUB_WORK"},
		{"hello", "", "", ""},
		{"function", "", "FIND_CODE", ""},
		{"history of this function", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			got, err := c.Classify(context.Background(), tt.text)
			require.NoError(t, err)
			require.GreaterOrEqual(t, got.Confidence, 0.0)
			require.LessOrEqual(t, got.Confidence, 1.0)
			require.NotEmpty(t, got.Reason)
			if tt.target == "" {
				require.Less(t, got.Confidence, DefaultRouteThreshold, "%+v", got)
				if tt.intent != "" {
					require.Equal(t, tt.intent, got.Action)
				}
				return
			}
			require.Equal(t, tt.target, got.Target, "%+v", got)
			require.GreaterOrEqual(t, got.Confidence, DefaultRouteThreshold, "%+v", got)
			require.Equal(t, tt.intent, got.Action)
			require.Equal(t, tt.gate, got.IntentType)
			require.Equal(t, tt.target, got.Candidates[0])
		})
	}
}

func TestIsIdentifier(t *testing.T) {
	t.Parallel()
	for w, want := range map[string]bool{
		"ParseConfig": true, "parseConfig": true, "HTTPServer": true, "parse_config": true, "MAX_SIZE": true,
		"Where": false, "config": false, "I": false, "a_": false, "_x": false, "go": false,
	} {
		require.Equal(t, want, isIdentifier(w), w)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := testenv.FromFlags[Config](t, "-guide.max-message-bytes=1024")
	require.NoError(t, c.Validate())
	require.Equal(t, 1024, c.MaxMessageBytes)
	require.Equal(t, DefaultRouteThreshold, c.RouteThreshold)
	require.Equal(t, Config{}.withDefaults().MaxMessageBytes, DefaultMaxMessageBytes)

	bad := Config{MaxMessageBytes: -1, RouteThreshold: 2, ProvisionTimeout: -1}
	err := bad.Validate()
	require.ErrorContains(t, err, "guide.max-message-bytes")
	require.ErrorContains(t, err, "guide.route-threshold")
	require.ErrorContains(t, err, "guide.provision-timeout")
}

// Spec A-35: the time hints the Archivalist applies are found offline
// ("recently" is the last 7 days there).
func TestTimeScopes(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"what failed recently?":            "recent",
		"which runs failed today":          "today",
		"what did we decide yesterday":     "yesterday",
		"what failed last week":            "last_week",
		"what did we change last month":    "last_month",
		"which pipelines failed this week": "this_week",
		"what failed":                      "",
	} {
		got, _ := timeScope(strings.ToLower(text))
		require.Equal(t, want, got, text)
	}
	c := newKeywordClassifier()
	got, err := c.Classify(context.Background(), "what failed recently?")
	require.NoError(t, err)
	require.Equal(t, "archivalist", got.Target, "%+v", got)
	require.Equal(t, "recent", got.TimeScope)
}

// TestRoutingTable is spec and acceptance behaviour 20.
func TestRoutingTable(t *testing.T) {
	t.Parallel()
	c := newKeywordClassifier()
	tests := []struct {
		text, target, knowledge, subject, scope string
	}{
		{"fix typo in README", "architect", "", "", ""},
		{"How would I design a rate limiter?", "academic", "", "", ""},
		{"where is the auth middleware", "librarian", "LOCATE", "auth_middleware", ""},
		{"how did we handle the auth migration last month", "archivalist", "HISTORICAL", "auth_migration", "last_month"},
		{"how does the auth flow work in the code", "librarian", "EXPLAIN", "", ""},
		{"what is our convention for error wrapping in this codebase", "librarian", "PATTERN", "", ""},
		{"where was I in the last session", "archivalist", "RESUME", "", ""},
		{"did it work, the result of the cache refactor", "archivalist", "OUTCOME", "", ""},
		{"what happened with the API recently", "archivalist", "ACTIVITY", "", "recent"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			got, err := c.Classify(context.Background(), tt.text)
			require.NoError(t, err)
			require.Equal(t, tt.target, got.Target, "%+v", got)
			require.GreaterOrEqual(t, got.Confidence, DefaultRouteThreshold, "%+v", got)
			require.Equal(t, tt.knowledge, got.KnowledgeIntent, "%+v", got)
			if tt.subject != "" {
				require.Equal(t, tt.subject, got.Subject)
			}
			require.Equal(t, tt.scope, got.TimeScope)
		})
	}
}

func TestConstraints(t *testing.T) {
	t.Parallel()
	cons, crit := constraints("Add caching to the search endpoint, careful about memory, so that repeated queries are fast")
	require.Equal(t, []string{"careful about memory"}, cons)
	require.Equal(t, []string{"so that repeated queries are fast"}, crit)
}

func TestCumulativeConfidence(t *testing.T) {
	t.Parallel()
	chain := []*messagev1.ConfidenceEntry{{Agent: "guide", Confidence: 0.95}, {Agent: "librarian", Confidence: 0.88}, {Agent: "academic", Confidence: 0.72}}
	c := CumulativeConfidence(chain)
	require.InDelta(t, 0.60, c, 0.005)
	require.Less(t, c, 0.65)
	band, action := ConfidenceBand(c)
	require.Equal(t, "moderate", band)
	require.Equal(t, "query_more_agents", action)
	for _, tt := range []struct {
		c            float64
		band, action string
	}{{0.95, "high", "proceed"}, {0.7, "good", "proceed"}, {0.4, "low", "consider_escalating"}, {0.2, "very_low", "escalate"}} {
		b, a := ConfidenceBand(tt.c)
		require.Equal(t, tt.band, b)
		require.Equal(t, tt.action, a)
	}
}

func TestMatchCommand(t *testing.T) {
	t.Parallel()
	name, conf := matchCommand("/status")
	require.Equal(t, "/status", name)
	require.Equal(t, 1.0, conf)
	name, conf = matchCommand("/stauts")
	require.Equal(t, "/status", name)
	require.LessOrEqual(t, conf, DefaultSkillThreshold)
}

func TestDirectSkill(t *testing.T) {
	t.Parallel()
	c, ok := directSkill("show me ParseConfig")
	require.True(t, ok)
	require.Equal(t, "librarian", c.Target)
	require.Equal(t, "LOCATE", c.KnowledgeIntent)
	require.Equal(t, "ParseConfig", c.Subject)
	require.Greater(t, c.Confidence, DefaultSkillThreshold)
	c, ok = directSkill("what is parse_config?")
	require.True(t, ok)
	require.Equal(t, "EXPLAIN", c.KnowledgeIntent)
	_, ok = directSkill("what is the meaning of life")
	require.False(t, ok)
	// An exported name is code (issue 24: "what is Main"); an acronym and a
	// lower-case word are left to the classifier.
	c, ok = directSkill("what is Main")
	require.True(t, ok)
	require.Equal(t, "librarian", c.Target)
	require.Equal(t, "Main", c.Subject)
	for _, text := range []string{"what is JWT?", "what is idempotency?"} {
		_, ok = directSkill(text)
		require.False(t, ok, text)
	}
}

package guide

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeywordClassifier(t *testing.T) {
	t.Parallel()
	c := newKeywordClassifier()
	tests := []struct {
		text   string
		target string // "" when the Guide should ask
		intent string
	}{
		{"where is the function ComputeInvoiceTotal defined in the code?", "librarian", "FIND_CODE"},
		{"who calls parse_config", "librarian", "FIND_CODE"},
		{"did we try a write-through cache previously?", "archivalist", "RECALL"},
		{"remember the decision about retries from last time", "archivalist", "RECALL"},
		{"is there an RFC or best practice for idempotency keys?", "academic", "RESEARCH"},
		{"Refactor the scheduler loop", "architect", "MODIFY"},
		{"Could you add a health endpoint to the gateway", "architect", "CREATE"},
		{"fix the bug in ParseConfig", "architect", "FIX"},
		{"hello", "", ""},
		{"function", "", "FIND_CODE"},
		{"history of this function", "", ""},
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
					require.Equal(t, tt.intent, got.IntentType)
				}
				return
			}
			require.Equal(t, tt.target, got.Target, "%+v", got)
			require.GreaterOrEqual(t, got.Confidence, DefaultRouteThreshold, "%+v", got)
			require.Equal(t, tt.intent, got.IntentType)
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
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"-guide.max-message-bytes=1024"}))
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

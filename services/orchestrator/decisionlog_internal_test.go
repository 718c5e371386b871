package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A malformed report still gives a decision-log entry (spec H-01, AC-21):
// what can be read of it, and a note that it was malformed.
func TestDecisionSectionOfAMalformedReport(t *testing.T) {
	t.Parallel()
	ok := decisionSection("n1", 1, stateSucceeded, nodeResult{Report: `{"implemented":"the parser","filesChanged":["a.go"]}`}, "")
	require.Contains(t, ok, "- Implemented: the parser\n")
	require.Contains(t, ok, "- Files changed: a.go\n")
	require.NotContains(t, ok, "malformed")

	partial := decisionSection("n1", 2, stateFailed, nodeResult{Report: `{"implemented":"half of it","tested":7,"concerns":"slow"}`}, "")
	require.Contains(t, partial, "## Task n1 (attempt 2): failed\n")
	require.Contains(t, partial, "- Implemented: half of it\n")
	require.Contains(t, partial, "- Concerns: slow\n")
	require.Contains(t, partial, "- Tested: none\n")
	require.Contains(t, partial, "- Report: malformed, partial entry (")

	garbage := decisionSection("n1", 3, stateFailed, nodeResult{Report: "not json"}, "")
	require.Contains(t, garbage, "- Implemented: none\n")
	require.Contains(t, garbage, "- Report: malformed, partial entry (")

	none := decisionSection("n1", 4, stateSucceeded, nodeResult{}, "")
	require.NotContains(t, none, "malformed", "no report is not a malformed one")
}

package intent

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var logoutCriteria = Merge("authentication/logout", nil, []string{"the button is in the header"}, Lookup("authentication/logout"))

// Acceptance behaviour 9 (spec seed001-A.md section 4): a correction that
// contradicts a key constraint is blocked.
func TestGateBlocksAConstraintConflict(t *testing.T) {
	t.Parallel()
	a := Validate([]string{"don't touch the database schema"}, logoutCriteria,
		Correction{Issue: "slow session lookup", Correction: "add an index to the schema", RootCauseConfidence: 0.9})
	require.Equal(t, Blocked, a.Decision)
	require.Equal(t, []string{"don't touch the database schema"}, a.Conflicts)
	require.Contains(t, a.Warning, "don't touch the database schema")

	a = Validate([]string{"don't touch the database schema"}, nil,
		Correction{Correction: "fix the handler without touching the schema", RootCauseConfidence: 0.9})
	require.Equal(t, Passed, a.Decision, "a correction that also leaves the schema alone agrees with the constraint")
}

// Acceptance behaviour 10: a negative impact on a criterion flags the
// correction, strongly below medium root-cause confidence.
func TestGateFlagsANegativeImpact(t *testing.T) {
	t.Parallel()
	c := Correction{Issue: "logout test times out", Correction: "remove the redirect after logout"}
	c.RootCauseConfidence = 0.35
	a := Validate(nil, logoutCriteria, c)
	require.Equal(t, FlaggedStrong, a.Decision)
	require.Equal(t, "LOW", a.RootCause)
	require.Contains(t, a.Impacts, CriterionImpact{"redirect to login", Negative, `the correction negates "redirect"`})
	require.Contains(t, a.Warning, `"redirect to login"`)
	c.RootCauseConfidence = 0.6
	a = Validate(nil, logoutCriteria, c)
	require.Equal(t, Flagged, a.Decision)
	require.Equal(t, "MEDIUM", a.RootCause)
	require.NotEmpty(t, a.Warning)
}

// Acceptance behaviour 11: without a negative impact, only a low
// root-cause confidence is noted.
func TestGatePassesOrNotes(t *testing.T) {
	t.Parallel()
	c := Correction{Issue: "TestLogout fails", Correction: "invalidate the session token on logout so that session termination holds"}
	c.RootCauseConfidence = 0.4
	a := Validate([]string{"skip confirmation"}, logoutCriteria, c)
	require.Equal(t, FlaggedNote, a.Decision)
	require.Contains(t, a.Impacts, CriterionImpact{"session termination", Positive, "the correction works toward it"})
	require.Contains(t, a.Warning, "LOW")
	c.RootCauseConfidence = 0.95
	a = Validate([]string{"skip confirmation"}, logoutCriteria, c)
	require.Equal(t, Passed, a.Decision)
	require.Equal(t, "HIGH", a.RootCause)
	require.Empty(t, a.Warning)
}

func TestDecideTable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		conflicts int
		negative  bool
		rc        float64
		want      Decision
	}{
		{1, false, 0.99, Blocked}, {1, true, 0.1, Blocked},
		{0, true, 0.35, FlaggedStrong}, {0, true, 0.49, FlaggedStrong}, {0, true, 0.5, Flagged}, {0, true, 0.6, Flagged},
		{0, false, 0.4, FlaggedNote}, {0, false, 0.5, Passed}, {0, false, 0.95, Passed},
	} {
		require.Equal(t, tt.want, Decide(tt.conflicts, tt.negative, tt.rc), "%+v", tt)
	}
	require.Equal(t, "HIGH", RootCauseBand(0.8))
	require.Equal(t, "MEDIUM", RootCauseBand(0.79))
	require.Equal(t, "LOW", RootCauseBand(0.49))
}

func TestForbids(t *testing.T) {
	t.Parallel()
	for constraint, want := range map[string]forbidden{
		"don't touch the database schema": {object: "schem"},
		"skip confirmation":               {object: "confi"},
		"without breaking the API":        {action: "break", object: "api"},
		"never change the format":         {object: "forma"},
		"never log secrets":               {action: "log", object: "secre"},
	} {
		got, ok := forbids(constraint)
		require.True(t, ok, constraint)
		require.Equal(t, want, got, constraint)
	}
	_, ok := forbids("careful about memory")
	require.False(t, ok)
}

// A constraint that forbids a specific action on something does not block
// every correction that names it: a failing API test is what keeps the
// API from breaking.
func TestGateReadsTheForbiddenAction(t *testing.T) {
	t.Parallel()
	constraints := []string{"without breaking the API"}
	for correction, want := range map[string]Decision{
		"test TestAPI failed (api_test.go:12): status 500":             Passed,
		"rename the API fields, breaking the API for existing clients": Blocked,
		"fix the handler so that the API does not break":               Passed,
	} {
		require.Equal(t, want, Validate(constraints, nil, Correction{Correction: correction, RootCauseConfidence: 0.9}).Decision, correction)
	}
	require.Equal(t, Passed, Validate([]string{"never log secrets"}, nil,
		Correction{Correction: "remove the secret from the log line", RootCauseConfidence: 0.9}).Decision)
	require.Equal(t, Blocked, Validate([]string{"never log secrets"}, nil,
		Correction{Correction: "log the secret key to debug the failure", RootCauseConfidence: 0.9}).Decision)
}

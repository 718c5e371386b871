package intent

import (
	"testing"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

type row struct {
	text     string
	source   messagev1.CriterionSource
	priority messagev1.ExpectationPriority
}

func rows(cs []*messagev1.SuccessCriterion) []row {
	out := make([]row, len(cs))
	for i, c := range cs {
		out[i] = row{c.GetCriterion(), c.GetSource(), c.GetPriority()}
	}
	return out
}

const (
	explicit = messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT
	inferred = messagev1.CriterionSource_CRITERION_SOURCE_INFERRED
	none     = messagev1.ExpectationPriority_EXPECTATION_PRIORITY_UNSPECIFIED
)

func TestFeatureDomain(t *testing.T) {
	t.Parallel()
	for request, want := range map[string]string{
		"Add a logout button to the header":                       "authentication/logout",
		"let users sign out from the settings page":               "authentication/logout",
		"Add caching to the search results, careful about memory": "performance/caching",
		"rate-limit the public API":                               "api/rate-limiting",
		"paginate the list of runs":                               "api/pagination",
		"support avatar uploads":                                  "storage/file-upload",
		"write the migration for the new column":                  "data/migration",
		"let users log in with their email":                       "authentication/login",
	} {
		got, ok := FeatureDomain(request)
		require.True(t, ok, request)
		require.Equal(t, want, got, request)
	}
	_, ok := FeatureDomain("fix the typo in the README")
	require.False(t, ok)
	require.Nil(t, Lookup("no/such-domain"))
	require.NotEmpty(t, Lookup(" Authentication/Logout "))
}

// Acceptance behaviour 7 (spec seed001-A.md section 4).
func TestMergeLeavesOutWhatAConstraintRulesOut(t *testing.T) {
	t.Parallel()
	exps := Lookup("authentication/logout")
	got := rows(Merge("authentication/logout", []string{"skip confirmation"}, nil, exps))
	require.NotContains(t, got, row{"confirmation if unsaved", inferred, recommended})
	require.Contains(t, got, row{"session termination", inferred, required})

	got = rows(Merge("authentication/logout", []string{"redirect to home"}, nil, exps))
	require.NotContains(t, got, row{"redirect to login", inferred, required}, "an explicit constraint beats a REQUIRED expectation")
}

// Acceptance behaviour 7, second half: without constraints the REQUIRED
// expectation is added as inferred, and explicit criteria stay explicit.
func TestMergeAddsExpectationsAfterExplicitCriteria(t *testing.T) {
	t.Parallel()
	cs := Merge("authentication/logout", nil, []string{"the button is in the header"}, Lookup("authentication/logout"))
	require.Equal(t, []row{
		{"the button is in the header", explicit, none},
		{"session termination", inferred, required},
		{"redirect to login", inferred, required},
		{"confirmation if unsaved", inferred, recommended},
		{"log out of all devices", inferred, optional},
	}, rows(cs))
	require.Equal(t, "academic:authentication/logout", cs[1].GetInferredFrom())
	require.NotEmpty(t, cs[1].GetRationale())
	require.Empty(t, cs[0].GetInferredFrom())
}

// Acceptance behaviour 8: an expectation already among the criteria is not
// added again.
func TestMergeAddsNoDuplicate(t *testing.T) {
	t.Parallel()
	for _, criterion := range []string{"session termination", "The session is terminated on the server", "users are redirected to the login page"} {
		cs := rows(Merge("authentication/logout", nil, []string{criterion}, Lookup("authentication/logout")))
		require.Len(t, cs, 4, criterion)
		require.Equal(t, row{criterion, explicit, none}, cs[0])
	}
}

func TestConflicts(t *testing.T) {
	t.Parallel()
	confirm := Expectation{Text: "confirmation if unsaved", Topic: "confirm"}
	login := Expectation{Text: "redirect to login", Topic: "redirect", Object: "login"}
	data := Expectation{Text: "no data loss", Topic: "data"}
	for _, tt := range []struct {
		statement string
		e         Expectation
		want      bool
	}{
		{"skip confirmation", confirm, true},
		{"confirmation is not needed", confirm, true},
		{"don't ask for confirmation", confirm, true},
		{"ask for confirmation in a modal", confirm, false},
		{"no emails; confirmation stays as it is today", confirm, false},
		{"redirect to home", login, true},
		{"redirect to the login page", login, false},
		{"never redirect", login, true},
		{"careful about memory", login, false},
		{"no data loss", data, false},
	} {
		require.Equal(t, tt.want, Conflicts(tt.statement, tt.e), tt.statement)
	}
}

func TestMergeProtoUsesTheTablesTopics(t *testing.T) {
	t.Parallel()
	var exps []*messagev1.DomainExpectation
	for _, e := range Lookup("authentication/logout") {
		exps = append(exps, e.Proto())
	}
	exps = append(exps, &messagev1.DomainExpectation{Expectation: "audit entry per logout", Priority: optional})
	got := rows(MergeProto("authentication/logout", []string{"skip confirmation", "no audit"}, nil, exps))
	require.NotContains(t, got, row{"confirmation if unsaved", inferred, recommended})
	require.NotContains(t, got, row{"audit entry per logout", inferred, optional})
	require.Contains(t, got, row{"redirect to login", inferred, required})
}

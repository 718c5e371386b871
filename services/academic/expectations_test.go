package academic

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/testenv"
)

func expectationTexts(resp *academicv1.GetDomainExpectationsResponse) []string {
	var out []string
	for _, e := range resp.GetExpectations() {
		out = append(out, e.GetExpectation())
	}
	return out
}

func TestGetDomainExpectations(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", identity.RoleMember)

	resp, err := f.svc.GetDomainExpectations(ctx, &academicv1.GetDomainExpectationsRequest{
		IntentType: "EXPLICIT", FeatureDomain: "authentication/logout"})
	require.NoError(t, err)
	require.Equal(t, "authentication/logout", resp.GetDomain())
	require.Equal(t, "local", resp.GetSource())
	require.InDelta(t, 0.9, resp.GetConfidence(), 1e-9)
	require.Equal(t, []string{"session termination", "redirect to login", "confirmation if unsaved", "log out of all devices"}, expectationTexts(resp))
	require.Equal(t, messagev1.ExpectationPriority_EXPECTATION_PRIORITY_REQUIRED, resp.GetExpectations()[0].GetPriority())
	require.NotEmpty(t, resp.GetExpectations()[0].GetRationale())

	// The domain derived from the request; a constraint rules one out.
	resp, err = f.svc.GetDomainExpectations(ctx, &academicv1.GetDomainExpectationsRequest{
		Request: "Add a logout button", ExistingConstraints: []string{"skip confirmation"}})
	require.NoError(t, err)
	require.Equal(t, "authentication/logout", resp.GetDomain())
	require.InDelta(t, 0.8, resp.GetConfidence(), 1e-9)
	require.NotContains(t, expectationTexts(resp), "confirmation if unsaved")
	require.Contains(t, expectationTexts(resp), "session termination")

	// Nothing known: an empty answer, not an error.
	resp, err = f.svc.GetDomainExpectations(ctx, &academicv1.GetDomainExpectationsRequest{Request: "fix the typo in the README"})
	require.NoError(t, err)
	require.Empty(t, resp.GetDomain())
	require.Empty(t, resp.GetExpectations())
	require.Zero(t, resp.GetConfidence())
	resp, err = f.svc.GetDomainExpectations(ctx, &academicv1.GetDomainExpectationsRequest{FeatureDomain: "weather/forecast"})
	require.NoError(t, err)
	require.Equal(t, "weather/forecast", resp.GetDomain())
	require.Empty(t, resp.GetExpectations())
}

func TestGetDomainExpectationsValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", identity.RoleViewer)
	for _, tt := range []struct {
		req  *academicv1.GetDomainExpectationsRequest
		want string
	}{
		{&academicv1.GetDomainExpectationsRequest{}, "feature_domain or request is required"},
		{&academicv1.GetDomainExpectationsRequest{FeatureDomain: strings.Repeat("x", 201)}, "feature_domain"},
		{&academicv1.GetDomainExpectationsRequest{Request: strings.Repeat("x", 65<<10)}, "request"},
		{&academicv1.GetDomainExpectationsRequest{Request: "logout", ExistingConstraints: make([]string, 51)}, "existing_constraints"},
		{&academicv1.GetDomainExpectationsRequest{Request: "logout", ExistingConstraints: []string{strings.Repeat("x", 1001)}}, "existing_constraints[0]"},
		{&academicv1.GetDomainExpectationsRequest{Request: "logout \xff"}, "UTF-8"},
	} {
		_, err := f.svc.GetDomainExpectations(ctx, tt.req)
		testenv.RequireCode(t, err, codes.InvalidArgument, tt.want)
	}
	_, err := f.svc.GetDomainExpectations(t.Context(), &academicv1.GetDomainExpectationsRequest{Request: "logout"})
	testenv.RequireCode(t, err, codes.Unauthenticated)
}

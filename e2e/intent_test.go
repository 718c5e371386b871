package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIntentEnrichment drives implicit requirements inference through REST
// (spec; acceptance behaviours 7 and 8): the academic's domain
// expectations, and a plan drafted from a routed request whose criteria
// gain what the domain implies, except what the user's constraint rules
// out.
func TestIntentEnrichment(t *testing.T) {
	c := startMesh(t)

	exp := c.ok("POST", "/v1/expectations:lookup", map[string]any{
		"request": "Add a logout button", "existingConstraints": []string{"skip confirmation"}})
	require.Equal(t, "authentication/logout", exp["domain"])
	require.Equal(t, "local", exp["source"])
	var texts []string
	for _, e := range exp["expectations"].([]any) {
		texts = append(texts, e.(map[string]any)["expectation"].(string))
	}
	require.Equal(t, []string{"session termination", "redirect to login", "log out of all devices"}, texts)
	r := c.do("POST", "/v1/expectations:lookup", map[string]any{})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Contains(t, r.Raw, "feature_domain or request is required")

	s := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "intent"})["session"].(map[string]any)
	name := s["name"].(string)
	route := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "Add a logout button to the header, skip confirmation"})["route"].(map[string]any)
	require.Equal(t, "architect", route["target"])
	ev := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "plan.awaiting_approval" })
	require.Contains(t, ev["text"], "expected of authentication/logout")
	planName := ev["data"].(map[string]any)["plan"].(string)
	plan := c.ok("GET", "/v1/"+planName, nil)["plan"].(map[string]any)
	in := plan["intent"].(map[string]any)
	require.Equal(t, "authentication/logout", in["featureDomain"])
	require.Equal(t, "enriched", in["inference"])
	require.Contains(t, strings.Join(anyStrings(in["keyConstraints"]), "|"), "skip confirmation")
	var inferred []string
	for _, raw := range in["successCriteria"].([]any) {
		cr := raw.(map[string]any)
		if cr["source"] == "CRITERION_SOURCE_INFERRED" {
			inferred = append(inferred, cr["criterion"].(string)+"/"+cr["priority"].(string))
			require.Equal(t, "academic:authentication/logout", cr["inferredFrom"])
		}
	}
	require.Equal(t, []string{"session termination/EXPECTATION_PRIORITY_REQUIRED", "redirect to login/EXPECTATION_PRIORITY_REQUIRED",
		"log out of all devices/EXPECTATION_PRIORITY_OPTIONAL"}, inferred, "no confirmation: the user's constraint rules it out")

	// Stated criteria through the plan API stay explicit and are not
	// repeated by the inferred ones.
	plan = c.ok("POST", "/v1/"+name+"/plans", map[string]any{"request": "let users log out",
		"successCriteria": []string{"the session is terminated on the server"}})["plan"].(map[string]any)
	crit := plan["intent"].(map[string]any)["successCriteria"].([]any)
	require.Equal(t, "CRITERION_SOURCE_EXPLICIT", crit[0].(map[string]any)["source"])
	for _, raw := range crit[1:] {
		require.NotEqual(t, "session termination", raw.(map[string]any)["criterion"])
	}
	r = c.do("POST", "/v1/"+name+"/plans", map[string]any{"request": "let users log out", "keyConstraints": make([]string, 51)})
	require.Equal(t, 400, r.Status, r.Raw)
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

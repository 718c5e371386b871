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
	ev := c.waitEvent(name, func(e map[string]any) bool { return e["type"] == "EVENT_TYPE_PLAN_AWAITING_APPROVAL" })
	require.Contains(t, ev["text"], "expected of authentication/logout")
	planName := payload(ev, "plan")["plan"].(string)
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

	// Approved, the plan's run carries the intent to its tasks.
	approved := c.ok("POST", "/v1/"+planName+":approve", map[string]any{})
	run := c.ok("GET", "/v1/"+approved["run"].(map[string]any)["name"].(string), nil)["run"].(map[string]any)
	rc := run["context"].(map[string]any)
	require.Contains(t, strings.Join(anyStrings(rc["keyConstraints"]), "|"), "skip confirmation")
	require.Len(t, rc["successCriteria"], len(in["successCriteria"].([]any)))

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

// TestCorrectionGate drives the feedback validation gate through REST
// (spec A-12; acceptance behaviours 9 and 10): a run whose context carries
// the intent, an Inspector finding the user's constraint rules out, and a
// Tester failure that works against a criterion.
func TestCorrectionGate(t *testing.T) {
	c := startMesh(t)
	repo := e2eRepo(t)
	edit := func(path, content string) []any { return []any{map[string]any{"path": path, "content": content}} }
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(repo), "maxConcurrency": 2,
		"context": map[string]any{
			"keyConstraints":  []string{"never change the format"},
			"successCriteria": []any{map[string]any{"criterion": "Add returns the sum", "source": "CRITERION_SOURCE_EXPLICIT"}},
		},
		"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "ugly", "pipeline": true, "maxLoops": 1, "edits": edit("calc.go", "package calc\nfunc Add(a, b int) int {return a+b}\n")},
			map[string]any{"id": "wrong", "pipeline": true, "maxLoops": 1, "edits": []any{
				map[string]any{"path": "calc.go", "content": "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n"},
				map[string]any{"path": "calc_test.go", "content": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"Add does not return the sum\")\n\t}\n}\n"},
			}},
		}}}))
	require.Equal(t, "RUN_STATE_FAILED", run["state"])
	n := nodeMap(run)

	ugly := n["ugly"]
	fb := ugly["pipeline"].(map[string]any)["feedback"].([]any)[0].(string)
	require.Contains(t, fb, "inspector: 1 correction(s) withheld")
	require.NotContains(t, fb, "not gofmt-formatted", "the blocked correction does not reach the Engineer")
	require.Contains(t, ugly["report"].(map[string]any)["concerns"], `contradicts the constraint "never change the format"`)

	wrong := n["wrong"]["pipeline"].(map[string]any)["feedback"].([]any)[0].(string)
	require.Contains(t, wrong, `[FLAGGED: may work against "Add returns the sum"; root cause confidence MEDIUM] test TestAdd failed`)
	require.EqualValues(t, 2, c.metric("sylk_worker_corrections_total"), "one blocked, one flagged")
}

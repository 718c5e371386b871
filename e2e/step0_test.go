package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStep0 shows an agent's Step 0 through the mesh (spec E-02, A-04,
// a question that reaches an agent that cannot help is
// declined, rerouted by the Guide and answered by the agent that can,
// with both hops in the answer's confidence chain; a question that names
// nothing to search for is asked about, and the user's plain next message
// gets the real answer.
func TestStep0(t *testing.T) {
	c := startMesh(t)
	c.registerIndexed(map[string]any{"path": fixtureRepo(t), "displayName": "invoices"})
	s := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "step0"})["session"].(map[string]any)
	name := s["name"].(string)
	send := func(text string) map[string]any {
		return c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": text})
	}
	answered := func(corr, agent string) map[string]any {
		return payload(c.waitEvent(name, func(e map[string]any) bool {
			return e["type"] == "EVENT_TYPE_MESSAGE_ANSWERED" && e["source"] == agent && e["correlationId"] == corr
		}), "messageAnswered")
	}

	// (a) "best practice … docs" goes to the academic, which holds no
	// documents; the question names code, so it declines to the librarian.
	q := send("best practice docs for the rounding in ComputeInvoiceTotal")
	require.Equal(t, "academic", q["route"].(map[string]any)["target"])
	corr := q["correlationId"].(string)
	rerouted := payload(c.waitEvent(name, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_MESSAGE_REROUTED" && e["correlationId"] == corr
	}), "messageRerouted")
	require.Equal(t, "academic", rerouted["from"])
	require.Equal(t, "librarian", rerouted["to"])
	a := answered(corr, "librarian")
	require.Contains(t, a["text"], "billing/invoice.go")
	var chain []string
	for _, e := range a["confidenceChain"].([]any) {
		chain = append(chain, e.(map[string]any)["agent"].(string))
	}
	require.Equal(t, []string{"guide", "academic", "librarian"}, chain)
	hops := a["rerouteHistory"].([]any)
	require.Len(t, hops, 1)
	require.Equal(t, "academic", hops[0].(map[string]any)["from"])
	require.Equal(t, "librarian", hops[0].(map[string]any)["to"])
	require.Positive(t, a["cumulativeConfidence"])
	require.NotEmpty(t, a["confidenceBand"])
	require.NotEmpty(t, a["suggestedAction"])

	// (b) "where is it?" names nothing to search for: the librarian asks,
	// with options; the plain next message answers it, and the librarian
	// answers the question refined by it.
	q = send("where is it?")
	require.Equal(t, "librarian", q["route"].(map[string]any)["target"])
	corr = q["correlationId"].(string)
	asked := c.waitEvent(name, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_CLARIFICATION_REQUESTED" && e["correlationId"] == corr
	})
	require.Contains(t, asked["text"], "names nothing")
	cr := payload(asked, "clarificationRequested")
	require.Equal(t, "librarian", cr["requestingAgent"])
	require.NotEmpty(t, cr["options"])
	reply := send("the function that computes the invoice total")
	require.Equal(t, "librarian", reply["route"].(map[string]any)["target"])
	require.Equal(t, "clarification", reply["route"].(map[string]any)["tier"])
	a = answered(corr, "librarian")
	require.Contains(t, a["text"], "billing/invoice.go")
	require.Contains(t, a["query"], "where is it?")
	require.Contains(t, a["query"], "invoice total")
	require.Empty(t, c.ok("GET", "/v1/"+name+"/clarifications", nil)["clarifications"])
}

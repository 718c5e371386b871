package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/scriptmodel"
)

// Knowledge agents answer rather than list hits (spec K-11): the Librarian
// asks the model for a short answer citing the code, verifies every
// citation against the indexed revision, and drops and marks what fails.

// invoiceGo is billing/invoice.go; its lines are numbered below.
const invoiceGo = "package billing\n" + // 1
	"\n" + // 2
	"// ComputeInvoiceTotal sums the invoice's lines.\n" + // 3
	"func ComputeInvoiceTotal(lines []int) int {\n" + // 4
	"\ttotal := 0\n" + // 5
	"\tfor _, l := range lines {\n" + // 6
	"\t\ttotal += l\n" + // 7
	"\t}\n" + // 8
	"\treturn total\n" + // 9
	"}\n" // 10

func TestLibrarianAnswersWithVerifiedCitations(t *testing.T) {
	c, srv := scriptMesh(t, []string{"-guide.llm-classifier=false"})
	main := c.register(nestedRepo(t, map[string]string{"billing/invoice.go": invoiceGo,
		"billing/tax.go": "package billing\n\n// TaxRate is the rate applied to totals.\nconst TaxRate = 20\n"}))
	c.register(nestedRepo(t, map[string]string{"legacy/invoice.go": strings.ReplaceAll(invoiceGo, "billing", "legacy")}))
	repo := c.ok("GET", "/v1/"+main, nil)["repository"].(map[string]any)
	name, commit := repo["displayName"].(string), repo["lastCommit"].(string)
	require.Len(t, commit, 40)

	good := fmt.Sprintf("`ComputeInvoiceTotal` sums the lines of an invoice [%[1]s:billing/invoice.go:4-9], starting from `total := 0` [%[1]s:billing/invoice.go:5].", name)
	// The second citation names a line without TaxRate, the third a file
	// that does not exist.
	bad := fmt.Sprintf("`ComputeInvoiceTotal` adds each line [%[1]s:billing/invoice.go:4-9], then applies `TaxRate` [%[1]s:billing/invoice.go:5] "+
		"from the rates table [%[1]s:billing/rates.go:2].", name)
	srv.Add(scriptmodel.Script{Match: "where is the function ComputeInvoiceTotal defined", Turns: []scriptmodel.Turn{scriptmodel.Say(good)}},
		scriptmodel.Script{Match: "explain how ComputeInvoiceTotal works", Turns: []scriptmodel.Turn{scriptmodel.Say(bad)}})

	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "answers", "repository": main})["session"].(map[string]any)
	session := sess["name"].(string)
	ask := func(text string) map[string]any {
		t.Helper()
		sent := c.ok("POST", "/v1/"+session+"/messages", map[string]any{"text": text})
		require.Equal(t, "librarian", sent["route"].(map[string]any)["target"], "%v", sent)
		corr := sent["correlationId"].(string)
		ev := c.waitEvent(session, func(e map[string]any) bool {
			return e["type"] == "EVENT_TYPE_MESSAGE_ANSWERED" && e["source"] == "librarian" && e["correlationId"] == corr
		})
		return payload(ev, "messageAnswered")
	}

	// Every citation holds: the answer stands as the model wrote it, with
	// the commit it read, its citations and a ratio of 1.
	a := ask("where is the function ComputeInvoiceTotal defined in the code?")
	require.Equal(t, "openai/scripted", a["model"])
	require.True(t, strings.HasPrefix(a["text"].(string), good), a["text"])
	require.Contains(t, a["text"], "at commit "+commit[:12])
	require.Equal(t, commit, a["revision"])
	require.EqualValues(t, 1, a["groundingRatio"])
	require.Nil(t, a["ungrounded"])
	require.Nil(t, a["droppedCitations"])
	cites := a["citations"].([]any)
	require.Len(t, cites, 2)
	for _, x := range cites {
		cite := x.(map[string]any)
		require.Equal(t, main, cite["name"])
		require.Equal(t, "billing/invoice.go", cite["path"])
		require.Equal(t, commit, cite["revision"])
	}
	for _, h := range a["hits"].([]any) {
		require.Equal(t, main, h.(map[string]any)["repository"], "the session's repository scopes the answer")
	}

	// A wrong line and a missing file are caught, dropped and marked.
	a = ask("explain how ComputeInvoiceTotal works")
	require.Equal(t, "openai/scripted", a["model"])
	require.Equal(t, true, a["ungrounded"])
	require.InDelta(t, 1.0/3, a["groundingRatio"], 1e-9)
	require.Len(t, a["citations"], 1)
	dropped := a["droppedCitations"].([]any)
	require.Len(t, dropped, 2)
	require.Contains(t, dropped[0].(map[string]any)["problem"], "`TaxRate`")
	require.Contains(t, dropped[1].(map[string]any)["problem"], "billing/rates.go is not in the indexed revision")
	text := a["text"].(string)
	require.NotContains(t, text, "invoice.go:5]")
	require.NotContains(t, text, "rates.go")
	require.Contains(t, text, "Only 1 of 3 citations held when checked against the code")
}

// Offline (the `local` provider), the answer is the hits grouped by file,
// scoped to the session's repository, and says that no model wrote it.
func TestLibrarianAnswersOffline(t *testing.T) {
	c := startMesh(t)
	main := c.register(nestedRepo(t, map[string]string{"billing/invoice.go": invoiceGo}))
	repo := c.ok("GET", "/v1/"+main, nil)["repository"].(map[string]any)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "offline answers", "repository": main})["session"].(map[string]any)
	session := sess["name"].(string)
	sent := c.ok("POST", "/v1/"+session+"/messages", map[string]any{"text": "where is the function ComputeInvoiceTotal defined in the code?"})
	require.Equal(t, "librarian", sent["route"].(map[string]any)["target"])
	ev := c.waitEvent(session, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_MESSAGE_ANSWERED" && e["source"] == "librarian" && e["correlationId"] == sent["correlationId"]
	})
	a := payload(ev, "messageAnswered")
	require.Nil(t, a["model"])
	text := a["text"].(string)
	require.NotContains(t, text, "Found ")
	require.Contains(t, text, "billing/invoice.go\n- billing/invoice.go:")
	require.Contains(t, text, "`ComputeInvoiceTotal`")
	require.Contains(t, text, "at commit "+repo["lastCommit"].(string)[:12])
	require.True(t, strings.HasSuffix(text, "No model summarised this: these are the best matches of the search, grouped by file."), text)
}

package archivalist

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
)

// scriptGate is an LLM gate whose default provider talks to a script
// server.
func scriptGate(t *testing.T, scripts ...scriptmodel.Script) (*gate.Gate, *scriptmodel.Server) {
	t.Helper()
	srv, err := scriptmodel.New(scripts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	lc := testenv.FromFlags[llm.Config](t, "-llm.provider", "openai", "-llm.openai.model-default", "scripted")
	lc.OpenAI.APIKey, lc.OpenAI.BaseURL = "sk-test", srv.URL+"/v1"
	reg, err := provider.New(lc)
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g, srv
}

// With a model, the answer is the model's, every citation verified against
// the entry it names; a citation of an entry that does not exist is
// dropped from the text and the answer marked.
func TestAnswerWithModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	sess := ids.New()
	e := f.create(t, ctx, &archivalistv1.Entry{Category: "decision", Title: "Advisory lock for migrations",
		Content: "We chose `pg_advisory_lock` so that two replicas never migrate at once.", SessionId: sess})
	missing := ids.New()
	good := fmt.Sprintf("Migrations take `pg_advisory_lock`, so \"two replicas never migrate at once\" [entries/%s].", e.GetId())
	bad := fmt.Sprintf("Migrations take `pg_advisory_lock` [entries/%s]. The lock was added after an outage [entries/%s].",
		e.GetId(), missing)
	g, srv := scriptGate(t,
		scriptmodel.Script{Match: "Question: why the advisory lock", Turns: []scriptmodel.Turn{scriptmodel.Say(good)}},
		scriptmodel.Script{Match: "Question: when was the advisory lock", Turns: []scriptmodel.Turn{scriptmodel.Say(bad)}})
	f.svc.SetLLMGate(g)

	res, err := f.svc.answer(t.Context(), question("t1", sess, "why the advisory lock on migrations?"))
	require.NoError(t, err)
	a := res.Answer
	require.NotNil(t, a)
	require.Empty(t, srv.Failures())
	require.Equal(t, "openai/scripted", a.GetModel())
	require.Equal(t, good, a.GetText())
	require.Equal(t, 1.0, a.GetGroundingRatio())
	require.False(t, a.GetUngrounded())
	require.Empty(t, a.GetGrounding())
	require.Empty(t, a.GetDroppedCitations())
	require.Len(t, a.GetCitations(), 1)
	require.Equal(t, "entries/"+e.GetId(), a.GetCitations()[0].GetName())
	require.Equal(t, e.GetTitle(), a.GetCitations()[0].GetTitle())
	prompt := srv.Requests()[0].Messages[0].Content
	require.Contains(t, prompt, "[entries/"+e.GetId()+"] decision, ")
	require.Contains(t, prompt, "We chose `pg_advisory_lock`")

	res, err = f.svc.answer(t.Context(), question("t1", sess, "when was the advisory lock added?"))
	require.NoError(t, err)
	a = res.Answer
	require.Empty(t, srv.Failures())
	require.Equal(t, "openai/scripted", a.GetModel())
	require.Equal(t, 0.5, a.GetGroundingRatio())
	require.True(t, a.GetUngrounded())
	require.Len(t, a.GetCitations(), 1)
	require.Equal(t, "entries/"+e.GetId(), a.GetCitations()[0].GetName())
	require.Len(t, a.GetDroppedCitations(), 1)
	d := a.GetDroppedCitations()[0]
	require.Equal(t, "entries/"+missing, d.GetName())
	require.Equal(t, "no entry "+missing, d.GetProblem())
	require.NotContains(t, a.GetText(), missing)
	require.Contains(t, a.GetText(), "The lock was added after an outage.")
	require.Contains(t, a.GetText(), "[entries/"+e.GetId()+"]")
	require.True(t, strings.HasSuffix(a.GetText(), "Only 1 of 2 citations held when checked against the history; "+
		"the 1 that failed was removed, so what it backed is unverified."), a.GetText())
	require.Equal(t, a.GetGrounding(), a.GetText()[strings.LastIndex(a.GetText(), "\n\n")+2:])
}

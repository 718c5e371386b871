package academic

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
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

func research(tenant, text string) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id: ids.New(), CorrelationId: ids.New(), TenantId: tenant, SessionId: ids.New(), UserId: "u1",
		Source: topology.AgentGuide, Target: topology.AgentAcademic, Type: messagev1.MessageType_MESSAGE_TYPE_RESEARCH_REQUEST,
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}},
	}
}

// With a model, the answer is the model's, every citation verified against
// the section it names; a section that does not hold the claim's
// identifier is dropped from the text and the answer marked.
func TestAnswerWithModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	doc := f.create(t, admin("t1"), &academicv1.Document{Title: "Operations guide", Content: guide})
	const linux, trouble = "Sylk operations guide > Install > Linux", "Sylk operations guide > Troubleshooting"
	good := "Install the Debian package, then run `sylk migrate` [" + doc.GetName() + "#" + linux + "]."
	bad := "Install the Debian package [" + doc.GetName() + "#" + linux + "]. " +
		"Run `sylk migrate` when NATS is unreachable [" + doc.GetName() + "#" + trouble + "]."
	g, srv := scriptGate(t,
		scriptmodel.Script{Match: "Question: How do I install on Linux", Turns: []scriptmodel.Turn{scriptmodel.Say(good)}},
		scriptmodel.Script{Match: "Question: What if NATS is unreachable", Turns: []scriptmodel.Turn{scriptmodel.Say(bad)}})
	f.svc.SetLLMGate(g)

	res, err := f.svc.answer(t.Context(), research("t1", "How do I install on Linux?"))
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
	require.Equal(t, doc.GetName(), a.GetCitations()[0].GetName())
	require.Equal(t, linux, a.GetCitations()[0].GetHeading())
	prompt := srv.Requests()[0].Messages[0].Content
	require.Contains(t, prompt, "["+doc.GetName()+"#"+linux+"] Operations guide\n")
	require.Contains(t, prompt, "sylk migrate")

	res, err = f.svc.answer(t.Context(), research("t1", "What if NATS is unreachable?"))
	require.NoError(t, err)
	a = res.Answer
	require.Empty(t, srv.Failures())
	require.Equal(t, "openai/scripted", a.GetModel())
	require.Equal(t, 0.5, a.GetGroundingRatio())
	require.True(t, a.GetUngrounded())
	require.Len(t, a.GetCitations(), 1)
	require.Equal(t, linux, a.GetCitations()[0].GetHeading())
	require.Len(t, a.GetDroppedCitations(), 1)
	d := a.GetDroppedCitations()[0]
	require.Equal(t, doc.GetName(), d.GetName())
	require.Equal(t, trouble, d.GetHeading())
	require.Contains(t, d.GetProblem(), "`sylk migrate`")
	require.NotContains(t, a.GetText(), "#"+trouble)
	require.Contains(t, a.GetText(), "Run `sylk migrate` when NATS is unreachable.")
	require.Contains(t, a.GetText(), "["+doc.GetName()+"#"+linux+"]")
	require.True(t, strings.HasSuffix(a.GetText(), "Only 1 of 2 citations held when checked against the documents; "+
		"the 1 that failed was removed, so what it backed is unverified."), a.GetText())
}

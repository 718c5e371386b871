package librarian

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
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

func asked(tenant, repo, text string) *messagev1.Envelope {
	env := userInput("m-"+text, tenant, "s1", text)
	env.Repository = repo
	return env
}

const handlerGo = "package server\n\nimport \"net/http\"\n\n// parseHTTPRequest reads the body of a request.\n" +
	"func parseHTTPRequest(r *http.Request) ([]byte, error) {\n\treturn readAll(r.Body)\n}\n"

// Offline, the answer is the hits grouped by file, with their symbols and
// snippets, the commit read, and a sentence saying no model wrote it.
func TestAnswerOffline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "tenant-a")
	dir := gitRepo(t, map[string]string{"server/handler.go": handlerGo})
	repo := create(t, ctx, h.svc, dir, true)
	a, err := h.svc.answerQuestion(ctx, asked("tenant-a", repo.GetName(), "Where is parseHTTPRequest defined?"), "Where is parseHTTPRequest defined?")
	require.NoError(t, err)
	require.Empty(t, a.GetModel())
	require.NotContains(t, a.GetText(), "Found ")
	require.Contains(t, a.GetText(), "server/handler.go\n- server/handler.go:")
	require.Contains(t, a.GetText(), "`parseHTTPRequest`")
	require.Contains(t, a.GetText(), "func parseHTTPRequest(r *http.Request)")
	require.True(t, strings.HasSuffix(a.GetText(), noModelSentence), a.GetText())
	require.Len(t, repo.GetLastCommit(), 40)
	require.Equal(t, repo.GetLastCommit(), a.GetRevision())
	require.Contains(t, a.GetText(), "at commit "+repo.GetLastCommit()[:shortCommit])
	require.Zero(t, a.GetGroundingRatio())
	require.Empty(t, a.GetCitations())
}

// A session's repository scopes the answer; without one, a tenant with
// several repositories sees each hit's repository named.
func TestAnswerScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "tenant-a")
	one := create(t, ctx, h.svc, gitRepo(t, map[string]string{"server/handler.go": handlerGo}), true)
	two := create(t, ctx, h.svc, gitRepo(t, map[string]string{"api/parse.go": strings.ReplaceAll(handlerGo, "package server", "package api")}), true)
	q := "parseHTTPRequest"

	a, err := h.svc.answerQuestion(ctx, asked("tenant-a", two.GetName(), q), q)
	require.NoError(t, err)
	require.NotEmpty(t, a.GetHits())
	for _, hit := range a.GetHits() {
		require.Equal(t, two.GetName(), hit.GetRepository())
	}
	require.NotContains(t, a.GetText(), "server/handler.go")
	require.Equal(t, two.GetLastCommit(), a.GetRevision())

	a, err = h.svc.answerQuestion(ctx, asked("tenant-a", "", q), q)
	require.NoError(t, err)
	require.Contains(t, a.GetText(), one.GetDisplayName()+": server/handler.go\n")
	require.Contains(t, a.GetText(), two.GetDisplayName()+": api/parse.go\n")
	require.Empty(t, a.GetRevision(), "two repositories: each citation says its own")

	none, err := h.svc.answerQuestion(ctx, asked("tenant-a", two.GetName(), "zzyzx quuxfoo"), "zzyzx quuxfoo")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("No indexed code matches %q in %s.", "zzyzx quuxfoo", two.GetDisplayName()), none.GetText())
}

// With a model, the answer is the model's, every citation verified
// against the indexed lines; a wrong line or a missing file is dropped
// and the answer marked.
func TestAnswerWithModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "tenant-a")
	repo := create(t, ctx, h.svc, gitRepo(t, map[string]string{"server/handler.go": handlerGo}), true)
	name := repo.GetDisplayName()
	good := fmt.Sprintf("`parseHTTPRequest` reads the request body [%s:server/handler.go:6-8].", name)
	bad := fmt.Sprintf("`parseHTTPRequest` reads the request body [%s:server/handler.go:1]; "+
		"`readAll` does the reading [%s:server/reader.go:3].", name, name)
	g, srv := scriptGate(t,
		scriptmodel.Script{Match: "Question: where is parseHTTPRequest", Turns: []scriptmodel.Turn{scriptmodel.Say(good)}},
		scriptmodel.Script{Match: "Question: what does parseHTTPRequest do", Turns: []scriptmodel.Turn{scriptmodel.Say(bad)}})
	h.svc.SetLLMGate(g)

	q := "where is parseHTTPRequest defined?"
	a, err := h.svc.answerQuestion(ctx, asked("tenant-a", repo.GetName(), q), q)
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, "openai/scripted", a.GetModel())
	require.True(t, strings.HasPrefix(a.GetText(), good), a.GetText())
	require.Contains(t, a.GetText(), "at commit "+repo.GetLastCommit()[:shortCommit])
	require.Equal(t, 1.0, a.GetGroundingRatio())
	require.False(t, a.GetUngrounded())
	require.Empty(t, a.GetGrounding())
	require.Len(t, a.GetCitations(), 1)
	c := a.GetCitations()[0]
	require.Equal(t, repo.GetName(), c.GetName())
	require.Equal(t, "server/handler.go", c.GetPath())
	require.EqualValues(t, 6, c.GetLineStart())
	require.EqualValues(t, 8, c.GetLineEnd())
	require.Equal(t, repo.GetLastCommit(), c.GetRevision())
	prompt := srv.Requests()[0].Messages[0].Content
	require.Contains(t, prompt, fmt.Sprintf("[%s:server/handler.go:", name))
	require.Contains(t, prompt, "6| func parseHTTPRequest(r *http.Request)")

	q = "what does parseHTTPRequest do?"
	a, err = h.svc.answerQuestion(ctx, asked("tenant-a", repo.GetName(), q), q)
	require.NoError(t, err)
	require.Zero(t, a.GetGroundingRatio())
	require.True(t, a.GetUngrounded())
	require.Empty(t, a.GetCitations())
	require.Len(t, a.GetDroppedCitations(), 2)
	require.Contains(t, a.GetDroppedCitations()[0].GetProblem(), "`parseHTTPRequest`")
	require.Contains(t, a.GetDroppedCitations()[1].GetProblem(), "server/reader.go is not in the indexed revision")
	require.NotContains(t, a.GetText(), "[")
	require.Contains(t, a.GetText(), "Only 0 of 2 citations held when checked against the code")
	require.Less(t, a.GetConfidence().GetConfidence(), 0.5, "the confidence of an ungrounded answer is halved")
}

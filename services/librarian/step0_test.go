package librarian

import (
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/topology"
)

func step0Env(text string) *messagev1.Envelope {
	return userInput(ids.New(), "tenant-a", ids.New(), text)
}

func clarifiedEnv(original, answer string) *messagev1.Envelope {
	env := step0Env("")
	env.Type = messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_RESPONSE
	env.StructuredIntent = &messagev1.StructuredIntent{OriginalRequest: original}
	env.Payload = &messagev1.Envelope_ClarificationResponse{ClarificationResponse: &messagev1.ClarificationResponse{Answer: answer}}
	return env
}

// The librarian's Step 0: a question about the team's decisions goes to
// the archivalist; one that names nothing to search for, or that does not
// say which of several repositories, is asked about; the rest is searched.
func TestStep0(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "tenant-a")
	decide := func(env *messagev1.Envelope) (inbox.Result, bool) {
		t.Helper()
		res, done, err := h.svc.step0(ctx, env)
		require.NoError(t, err)
		return res, done
	}

	res, done := decide(step0Env("what did we decide last week about retries?"))
	require.True(t, done)
	require.Equal(t, topology.AgentArchivalist, res.Reroute.GetSuggestedTarget())
	require.NotEmpty(t, res.Reroute.GetReason())
	require.Equal(t, topology.AgentLibrarian, res.Confidence.GetAgent())

	visited := step0Env("what did we decide about retries?")
	visited.RerouteHistory = []*messagev1.RerouteHop{{From: topology.AgentArchivalist, To: topology.AgentLibrarian}}
	_, done = decide(visited)
	require.False(t, done, "an agent that declined already is never suggested: the librarian searches")

	for _, q := range []string{"where is it?", "explain this", "How does that work?"} {
		res, done = decide(step0Env(q))
		require.True(t, done, q)
		require.Contains(t, res.Clarify.GetQuestion(), "names nothing", q)
		require.NotEmpty(t, res.Clarify.GetOptions(), q)
	}
	withSubject := step0Env("where is it?")
	withSubject.StructuredIntent = &messagev1.StructuredIntent{OriginalRequest: "where is it?", Subject: "auth_middleware"}
	_, done = decide(withSubject)
	require.False(t, done, "the Guide's subject is something to search for")

	_, done = decide(step0Env("where is parseHTTPRequest defined?"))
	require.False(t, done, "no repository yet: answered (that nothing is indexed)")
	alpha := h.create(t, "alpha")
	_, done = decide(step0Env("where is parseHTTPRequest defined?"))
	require.False(t, done, "one repository: searched")
	h.create(t, "beta")

	res, done = decide(step0Env("where is parseHTTPRequest defined?"))
	require.True(t, done, "two repositories and none chosen: asked")
	require.ElementsMatch(t, []string{"alpha", "beta"}, res.Clarify.GetOptions())
	require.Contains(t, res.Clarify.GetQuestion(), "Which repository")
	inRepo := step0Env("where is parseHTTPRequest defined?")
	inRepo.Repository = alpha.GetName()
	_, done = decide(inRepo)
	require.False(t, done, "the session's repository")
	_, done = decide(step0Env("where is parseHTTPRequest defined in beta?"))
	require.False(t, done, "the question names the repository")

	// The user's answer: a repository named scopes the request as first
	// asked; anything else refines it.
	chosen := clarifiedEnv("where is parseHTTPRequest defined?", "Alpha")
	_, done = decide(chosen)
	require.False(t, done)
	require.Equal(t, alpha.GetName(), chosen.GetRepository())
	q, err := inbox.Question(chosen)
	require.NoError(t, err)
	require.Equal(t, "where is parseHTTPRequest defined?", q)
	byNumber := clarifiedEnv("where is parseHTTPRequest defined?", "2")
	_, done = decide(byNumber)
	require.False(t, done)
	require.NotEmpty(t, byNumber.GetRepository())
	refined := clarifiedEnv("where is it?", "the HTTP request parser")
	_, done = decide(refined)
	require.False(t, done, "an answer is never questioned again")
	require.Empty(t, refined.GetRepository())
	q, err = inbox.Question(refined)
	require.NoError(t, err)
	require.Equal(t, "where is it? the HTTP request parser", q)
}

// create registers and indexes the fixture under a display name.
func (h harness) create(t *testing.T, name string) *librarianv1.Repository {
	t.Helper()
	resp, err := h.svc.CreateRepository(as(t, "tenant-a"), &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Path: writeFixture(t), DisplayName: name}, Wait: true,
	})
	require.NoError(t, err)
	return resp.GetRepository()
}

func TestSearchable(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]bool{"where is it?": false, "explain this": false, "what does the code do": false,
		"where is parseDuration": true, "explain the retry loop": true, "x": false} {
		require.Equal(t, want, searchable(q), q)
	}
}

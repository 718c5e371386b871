package academic

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/topology"
)

func step0Env(text string) *messagev1.Envelope {
	return &messagev1.Envelope{Id: ids.New(), TenantId: "t1", SessionId: ids.New(),
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}}}
}

// The academic's Step 0: holding no documents, it declines a question
// about the code (to the librarian) or the team's past (to the
// archivalist), never to an agent that declined already; with documents,
// or for anything else, it searches.
func TestStep0(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	decide := func(env *messagev1.Envelope) string {
		t.Helper()
		res, done, err := f.svc.step0(ctx, env)
		require.NoError(t, err)
		if !done {
			return ""
		}
		require.Equal(t, topology.AgentAcademic, res.Confidence.GetAgent())
		require.NotEmpty(t, res.Reroute.GetReason())
		return res.Reroute.GetSuggestedTarget()
	}
	require.Equal(t, topology.AgentLibrarian, decide(step0Env("what do our docs say about the function that parses durations?")))
	require.Equal(t, topology.AgentLibrarian, decide(step0Env("how does parseDuration handle days")))
	require.Equal(t, topology.AgentArchivalist, decide(step0Env("what did we decide about retries?")))
	require.Empty(t, decide(step0Env("How would I design a rate limiter?")), "ambiguous: answered")
	visited := step0Env("how does parseDuration handle days")
	visited.RerouteHistory = []*messagev1.RerouteHop{{From: topology.AgentLibrarian, To: topology.AgentAcademic}}
	require.Empty(t, decide(visited), "the librarian declined already")

	f.create(t, admin("t1"), &academicv1.Document{Title: "Ops", Content: "# Durations\nparseDuration reads 1d as a day."})
	require.Empty(t, decide(step0Env("how does parseDuration handle days")), "with documents: searched")
	other := step0Env("how does parseDuration handle days")
	other.TenantId = "t2"
	require.Equal(t, topology.AgentLibrarian, decide(other), "another tenant's documents do not count")
}

func TestAnswerConfidence(t *testing.T) {
	t.Parallel()
	require.InDelta(t, confidenceFound, answerConfidence(&messagev1.AgentAnswer{Hits: []*messagev1.Hit{{}}}).GetConfidence(), 1e-9)
	require.InDelta(t, confidenceNothing, answerConfidence(&messagev1.AgentAnswer{}).GetConfidence(), 1e-9)
}

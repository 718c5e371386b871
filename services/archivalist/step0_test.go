package archivalist

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/topology"
)

// The archivalist's Step 0 declines, to the librarian, a question about
// where code is that says nothing of the past; anything else is searched.
func TestStep0(t *testing.T) {
	t.Parallel()
	s := &Service{}
	env := func(text string) *messagev1.Envelope {
		return &messagev1.Envelope{Id: ids.New(), TenantId: "t1", SessionId: ids.New(),
			Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: text}}}
	}
	for q, declines := range map[string]bool{
		"where is the function that parses durations":          true,
		"find the handler for the login endpoint":              true,
		"where is parseDuration":                               true,
		"where is the retry policy defined?":                   true,
		"what did we decide last week about retries?":          false,
		"why did we change the function that parses durations": false,
		"where is the function we changed yesterday":           false,
		"what failed recently?":                                false,
		"how did we handle the auth migration last month":      false,
	} {
		res, done, err := s.step0(context.Background(), env(q))
		require.NoError(t, err, q)
		require.Equal(t, declines, done, q)
		if declines {
			require.Equal(t, topology.AgentLibrarian, res.Reroute.GetSuggestedTarget(), q)
			require.Equal(t, topology.AgentArchivalist, res.Confidence.GetAgent(), q)
		}
	}
	visited := env("where is the function that parses durations")
	visited.RerouteHistory = []*messagev1.RerouteHop{{From: topology.AgentLibrarian, To: topology.AgentArchivalist}}
	_, done, err := s.step0(context.Background(), visited)
	require.NoError(t, err)
	require.False(t, done, "the librarian declined already: searched")
	answered := env("")
	answered.Type = messagev1.MessageType_MESSAGE_TYPE_CLARIFICATION_RESPONSE
	answered.StructuredIntent = &messagev1.StructuredIntent{OriginalRequest: "where is the parser"}
	answered.Payload = &messagev1.Envelope_ClarificationResponse{ClarificationResponse: &messagev1.ClarificationResponse{Answer: "the duration one"}}
	_, done, err = s.step0(context.Background(), answered)
	require.NoError(t, err)
	require.False(t, done, "an answer to a question is answered")
}

func TestAnswerConfidence(t *testing.T) {
	t.Parallel()
	require.InDelta(t, confidenceFound, answerConfidence(&messagev1.AgentAnswer{Hits: []*messagev1.Hit{{}}}).GetConfidence(), 1e-9)
	require.InDelta(t, confidenceRecent, answerConfidence(&messagev1.AgentAnswer{Recent: []*messagev1.Hit{{}}}).GetConfidence(), 1e-9)
	require.InDelta(t, confidenceNothing, answerConfidence(&messagev1.AgentAnswer{}).GetConfidence(), 1e-9)
}

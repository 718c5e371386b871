package academic

import (
	"context"
	"regexp"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/topology"
)

// Step 0 (spec E-02, A-06): before searching the ingested documents, the
// academic decides whether the request is its to answer. Holding no
// documents, it declines a question about the code, naming the librarian,
// and one about what the team decided or did, naming the archivalist. With
// documents it searches them: a document may well answer, and a decline
// of what it could have answered costs the user a hop. Anything in doubt
// is answered; the Guide's hop limit stops a request passed around.

// Confidences of the academic's answers and declines.
const (
	// step0DeclineConfidence is how sure the academic is, on declining,
	// that the agent it names is the right one.
	step0DeclineConfidence = 0.8
	// confidenceFound: sections of the documents matched the question.
	confidenceFound = 0.75
	// confidenceNothing: nothing matched.
	confidenceNothing = 0.25
)

// codePattern matches a question about the code: its functions, files and
// types, or an identifier written as code.
var codePattern = regexp.MustCompile(`(?i)\b(?:function|func|method|struct|class|interface|variable|source file|` +
	`codebase|(?:in|of) (?:the|our) code|implemented|defined|call(?:s|ed)?)\b|(?-i:\b\w*[a-z][A-Z]\w*\b)|\b\w+_\w+\b|\w+\.(?:go|py|ts|js|rs|java)\b`)

// teamHistoryPattern matches a question about what the team decided or
// did.
var teamHistoryPattern = regexp.MustCompile(`(?i)\b(?:(?:what|when|why|how) (?:did|have|had) we|we (?:decided|agreed|tried|discussed)|what failed)\b`)

// step0 decides how to handle env before the search: done says that res
// (a decline) is the whole answer.
func (s *Service) step0(ctx context.Context, env *messagev1.Envelope) (res inbox.Result, done bool, err error) {
	question, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, true, err
	}
	if _, _, ok := inbox.Clarified(env); ok {
		return inbox.Result{}, false, nil
	}
	target, reason := declineTarget(question)
	if target == "" || inbox.Visited(env, target) {
		return inbox.Result{}, false, nil
	}
	docs, _, err := s.store.list(ctx, env.GetTenantId(), nil, 1)
	if err != nil || len(docs) > 0 {
		return inbox.Result{}, false, err
	}
	return inbox.Result{
		Reroute: &messagev1.RerouteRequest{SuggestedTarget: target, Reason: "the academic holds no documents, and " + reason},
		Confidence: &messagev1.ConfidenceEntry{Agent: topology.AgentAcademic, Confidence: step0DeclineConfidence,
			Reason: "no documents; the question is the " + target + "'s"},
	}, true, nil
}

// declineTarget is the agent a question plainly belongs to when the
// academic has nothing to answer it with, and why; "" for none.
func declineTarget(question string) (target, reason string) {
	switch {
	case teamHistoryPattern.MatchString(question):
		return topology.AgentArchivalist, "the question asks what the team decided or did, which the archivalist keeps"
	case codePattern.MatchString(question):
		return topology.AgentLibrarian, "the question is about the code, which the librarian searches"
	}
	return "", ""
}

// answerConfidence is the academic's confidence in an answer it gave none
// (pkg/inbox appends it to the chain).
func answerConfidence(a *messagev1.AgentAnswer) *messagev1.ConfidenceEntry {
	if len(a.GetHits()) > 0 {
		return &messagev1.ConfidenceEntry{Agent: topology.AgentAcademic, Confidence: confidenceFound, Reason: "sections of the documents match"}
	}
	return &messagev1.ConfidenceEntry{Agent: topology.AgentAcademic, Confidence: confidenceNothing, Reason: "no section matches"}
}

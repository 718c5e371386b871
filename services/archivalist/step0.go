package archivalist

import (
	"context"
	"regexp"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/topology"
)

// Step 0 (spec E-02, A-06): before searching the archive, the archivalist
// decides whether the request is its to answer. It declines, naming the
// librarian, a question that asks where something is in the code ("where
// is the function that parses durations") and says nothing of the past:
// the archive holds what happened, not the code. Anything else, and
// anything in doubt, is searched and answered; the Guide's hop limit stops
// a request passed around.

// Confidences of the archivalist's answers and declines.
const (
	// step0DeclineConfidence is how sure the archivalist is, on
	// declining, that the librarian is the right agent.
	step0DeclineConfidence = 0.85
	// confidenceFound: entries matched the question.
	confidenceFound = 0.8
	// confidenceRecent: nothing matched; the newest entries are shown.
	confidenceRecent = 0.4
	// confidenceNothing: the archive holds nothing to show.
	confidenceNothing = 0.2
)

// codeLocationPattern matches a question about where code is.
var codeLocationPattern = regexp.MustCompile(`(?i)\b(?:where (?:is|are|does|do)|find|locate|show me|which file)\b.{0,40}?` +
	`\b(?:function|func|method|type|struct|class|interface|constant|variable|file|package|module|handler|endpoint)s?\b` +
	`|\bwhere (?:is|are)\b.{0,40}?\b(?:defined|implemented|declared)\b|\bwhere (?:is|are) (?-i:\w*[a-z][A-Z_]\w*)\b`)

// pastPattern matches words about the past, which make a question the
// archivalist's even when it names code.
var pastPattern = regexp.MustCompile(`(?i)\b(?:did we|we (?:did|decided|changed|tried|fixed)|last (?:week|month|time|session)|yesterday|previous(?:ly)?|earlier|history|decid\w*|decision\w*|fail\w*|before|ago|used to)\b`)

// step0 decides how to handle env before the search: done says that res
// (a decline) is the whole answer.
func (s *Service) step0(_ context.Context, env *messagev1.Envelope) (res inbox.Result, done bool, err error) {
	question, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, true, err
	}
	if _, _, ok := inbox.Clarified(env); ok {
		return inbox.Result{}, false, nil
	}
	if declinesToLibrarian(question) && !inbox.Visited(env, topology.AgentLibrarian) {
		return inbox.Result{
			Reroute: &messagev1.RerouteRequest{SuggestedTarget: topology.AgentLibrarian,
				Reason: "asks where something is in the code, which the librarian searches; the archive holds what happened"},
			Confidence: &messagev1.ConfidenceEntry{Agent: topology.AgentArchivalist, Confidence: step0DeclineConfidence,
				Reason: "not the archivalist's domain: code location"},
		}, true, nil
	}
	return inbox.Result{}, false, nil
}

// declinesToLibrarian reports whether question asks where code is and
// says nothing of the past.
func declinesToLibrarian(question string) bool {
	return codeLocationPattern.MatchString(question) && !pastPattern.MatchString(question)
}

// answerConfidence is the archivalist's confidence in an answer it gave
// none (pkg/inbox appends it to the chain): high when entries matched, low
// when it could only list the newest, lowest when the archive is empty.
func answerConfidence(a *messagev1.AgentAnswer) *messagev1.ConfidenceEntry {
	e := &messagev1.ConfidenceEntry{Agent: topology.AgentArchivalist, Confidence: confidenceFound, Reason: "archived entries match"}
	switch {
	case len(a.GetHits()) > 0:
	case len(a.GetRecent()) > 0:
		e.Confidence, e.Reason = confidenceRecent, "nothing matched; the newest entries are listed"
	default:
		e.Confidence, e.Reason = confidenceNothing, "the archive holds nothing to show"
	}
	return e
}

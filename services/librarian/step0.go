package librarian

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/topology"
)

// Step 0 (spec E-02, A-06): before searching, the librarian decides
// whether the request is its to answer. It declines, naming the
// archivalist, a question about what the team decided or did (the code
// does not hold that); it asks first when the question names nothing to
// search for, or when it holds several repositories and neither the
// session nor the question says which one (only the user's own
// requests: another agent's is answered as it is). Anything else, and anything
// in doubt, is searched and answered: the Guide's hop limit stops a
// request passed around, and a decline of what the librarian could have
// answered costs the user a hop.

// Step 0 settings.
const (
	// step0DeclineConfidence is how sure the librarian is, on declining,
	// that the agent it names is the right one.
	step0DeclineConfidence = 0.85
	// step0AskConfidence is its confidence in a request it must ask about.
	step0AskConfidence = 0.5
	// step0MaxOptions bounds the repositories offered as options.
	step0MaxOptions = 8
	// step0RepoScan bounds the repositories read to decide.
	step0RepoScan = 100
)

// historyPattern matches a question about the team's decisions or past
// work, which the archivalist keeps.
var historyPattern = regexp.MustCompile(`(?i)\b(?:(?:what|when|why|how) (?:did|have|had) we (?:decide|agree|choose|conclude|settle|discuss)` +
	`|we (?:decided|agreed|concluded|settled on|discussed)|(?:our|the team's|the) decisions? (?:about|on|for|to)|what failed (?:recently|last|yesterday|today))`)

// vagueWords carry no subject of their own: a question made only of them
// and stop words names nothing to search for.
var vagueWords = map[string]bool{"code": true, "thing": true, "things": true, "stuff": true, "work": true, "works": true,
	"mean": true, "means": true, "one": true, "again": true}

// underspecifiedOptions are the kinds of detail that make a question
// searchable, offered when it names none.
var underspecifiedOptions = []string{"a function, type or file name", "an error message or log line", "the feature, in a few words"}

// step0 decides how to handle env before the search: done says that res
// (a decline or a question) is the whole answer. The user's answer to the
// librarian's own question is never questioned again; when it names one
// of the repositories offered, the request is searched as first asked
// within that repository.
func (s *Service) step0(ctx context.Context, env *messagev1.Envelope) (res inbox.Result, done bool, err error) {
	question, err := inbox.Question(env)
	if err != nil {
		return inbox.Result{}, true, err
	}
	if original, answer, ok := inbox.Clarified(env); ok {
		return inbox.Result{}, false, s.chooseRepository(ctx, env, original, answer)
	}
	intent := env.GetStructuredIntent()
	if historyPattern.MatchString(question) && !inbox.Visited(env, topology.AgentArchivalist) {
		return inbox.Result{
			Reroute: &messagev1.RerouteRequest{SuggestedTarget: topology.AgentArchivalist,
				Reason: "asks what the team decided or did, which the archivalist keeps; the code does not say"},
			Confidence: confidenceEntryWhy(step0DeclineConfidence, "not the librarian's domain: history"),
		}, true, nil
	}
	// A request another agent routed is answered with what there is: the
	// user did not ask it, so the user is not asked about it.
	if env.GetRoutedRequest() != nil {
		return inbox.Result{}, false, nil
	}
	if intent.GetSubject() == "" && !searchable(question) {
		return inbox.Result{
			Clarify: &messagev1.ClarificationRequest{Options: underspecifiedOptions, Context: "librarian_search",
				Question: fmt.Sprintf("%q names nothing I can search the code for. What should I look for?", truncateRunes(question, answerQuoteLen))},
			Confidence: confidenceEntryWhy(step0AskConfidence, "nothing to search for"),
		}, true, nil
	}
	if env.GetRepository() != "" {
		return inbox.Result{}, false, nil
	}
	repos, err := s.indexedRepos(ctx, env.GetTenantId())
	if err != nil || len(repos) < 2 || namesRepository(question, repos) != nil {
		return inbox.Result{}, false, err
	}
	options := make([]string, 0, min(len(repos), step0MaxOptions))
	for _, r := range repos[:min(len(repos), step0MaxOptions)] {
		options = append(options, r.DisplayName)
	}
	return inbox.Result{
		Clarify: &messagev1.ClarificationRequest{Options: options, Context: "librarian_repository",
			Question: fmt.Sprintf("Which repository should I search? This session works on none, and I hold %d: %s.",
				len(repos), strings.Join(options, ", "))},
		Confidence: confidenceEntryWhy(step0AskConfidence, "several repositories, none chosen"),
	}, true, nil
}

// searchable reports whether text holds a word worth searching for: not a
// stop word, not a vague word, at least two characters.
func searchable(text string) bool {
	found := false
	words(text, func(w string) {
		for _, t := range identifierTokens(w) {
			if len(t) >= 2 && !stopWords[t] && !vagueWords[t] {
				found = true
			}
		}
	})
	return found
}

// indexedRepos are the tenant's repositories indexed at least once.
func (s *Service) indexedRepos(ctx context.Context, tenant string) ([]repository, error) {
	all, err := s.store.listRepos(ctx, tenant, "", step0RepoScan)
	if err != nil {
		return nil, err
	}
	var out []repository
	for _, r := range all {
		if r.IndexTime != nil && r.DisplayName != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

// namesRepository returns the repository text names by its display name
// (as a whole word) or its position among repos ("2", "the second"), nil
// for none or more than one.
func namesRepository(text string, repos []repository) *repository {
	lower := strings.ToLower(strings.TrimSpace(text))
	var named *repository
	for i := range repos {
		pat := `(?i)(?:^|[^\w-])` + regexp.QuoteMeta(strings.ToLower(repos[i].DisplayName)) + `(?:$|[^\w-])`
		if regexp.MustCompile(pat).MatchString(lower) {
			if named != nil {
				return nil
			}
			named = &repos[i]
		}
	}
	if named != nil {
		return named
	}
	fields := strings.Fields(strings.Trim(lower, ".!? "))
	if len(fields) == 0 || len(fields) > 3 {
		return nil
	}
	last := strings.TrimPrefix(fields[len(fields)-1], "#")
	n, err := strconv.Atoi(last)
	if err != nil {
		n = ordinalWords[last]
	}
	if n >= 1 && n <= min(len(repos), step0MaxOptions) {
		return &repos[n-1]
	}
	return nil
}

var ordinalWords = map[string]int{"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "one": 1, "two": 2, "three": 3}

// chooseRepository reads the user's answer to the librarian's question:
// an answer that names one of the tenant's repositories scopes env to it,
// and the request is then the one first asked; any other answer refines
// the request (inbox.Question reads the two together).
func (s *Service) chooseRepository(ctx context.Context, env *messagev1.Envelope, original, answer string) error {
	if original == "" {
		return nil
	}
	repos, err := s.indexedRepos(ctx, env.GetTenantId())
	if err != nil {
		return err
	}
	r := namesRepository(answer, repos)
	if r == nil {
		return nil
	}
	env.Repository = repositoryPrefix + r.ID
	env.StructuredIntent.OriginalRequest = original
	env.Payload = &messagev1.Envelope_ClarificationResponse{ClarificationResponse: &messagev1.ClarificationResponse{}}
	return nil
}

// confidenceEntryWhy is the librarian's confidence c, with its reason.
func confidenceEntryWhy(c float64, why string) *messagev1.ConfidenceEntry {
	e := confidenceEntry(c)
	e.Reason = why
	return e
}

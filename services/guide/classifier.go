package guide

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"

	"sylk.dev/sylk/pkg/topology"
)

// Classification says which agent owns a message and how sure the
// classifier is.
type Classification struct {
	// Target is the best agent, "" when nothing matched.
	Target string
	// Confidence in Target, in [0, 1].
	Confidence float64
	// IntentType is the intent gate's type (spec A-29): TRIVIAL, EXPLICIT,
	// EXPLORATORY, OPEN_ENDED, GITHUB_WORK or AMBIGUOUS.
	IntentType string
	// Action is what the request asks for: FIND_CODE, RECALL, RESEARCH,
	// CREATE, MODIFY or FIX.
	Action string
	// KnowledgeIntent is the librarian's LOCATE, PATTERN, EXPLAIN, GENERAL
	// or the archivalist's HISTORICAL, ACTIVITY, OUTCOME, SIMILAR, RESUME,
	// GENERAL (spec ); empty for other targets.
	KnowledgeIntent string
	// TimeScope is the archivalist's time hint: "today", "yesterday",
	// "this_week", "last_week", "last_month", "last_year", "recent" (7 days), "before"; optional.
	TimeScope string
	// Subject is what the message is about, in snake_case or as an identifier.
	Subject string
	// KeyConstraints and SuccessCriteria are lifted from the request for
	// the structured intent (spec A-03).
	KeyConstraints  []string
	SuccessCriteria []string
	// Reason explains the decision in a few words.
	Reason string
	// Candidates are the plausible agents, best first; the Guide offers them
	// when it asks the user to clarify.
	Candidates []string
}

// Classifier decides which agent owns a user message. The keyword classifier
// is the offline default; a model-backed classifier can take its place.
type Classifier interface {
	Classify(ctx context.Context, text string) (Classification, error)
}

// keywordRule scores a phrase (a sequence of lower-case words; the last word
// also matches its common inflections).
type keywordRule struct {
	phrase []string
	weight float64
	intent string // overrides the domain's intent type, for the architect's verbs
}

type domain struct {
	agent  string
	intent string
	rules  []keywordRule
	// identifierWeight scores each code identifier (CamelCase, snake_case).
	identifierWeight float64
	// leadingVerbBonus is added when the message opens with one of the
	// domain's rules (an imperative: "fix the ...").
	leadingVerbBonus float64
}

// Actions.
const (
	intentFindCode = "FIND_CODE"
	intentRecall   = "RECALL"
	intentResearch = "RESEARCH"
	intentCreate   = "CREATE"
	intentModify   = "MODIFY"
	intentFix      = "FIX"
)

// Intent gate types (spec A-29).
const (
	gateTrivial     = "TRIVIAL"
	gateExplicit    = "EXPLICIT"
	gateExploratory = "EXPLORATORY"
	gateOpenEnded   = "OPEN_ENDED"
	gateGitHubWork  = "GITHUB_WORK"
	gateAmbiguous   = "AMBIGUOUS"
)

func rules(weight float64, intent string, phrases ...string) []keywordRule {
	out := make([]keywordRule, 0, len(phrases))
	for _, p := range phrases {
		out = append(out, keywordRule{phrase: strings.Fields(p), weight: weight, intent: intent})
	}
	return out
}

// keywordDomains are the offline routing rules, in the order ties are broken.
var keywordDomains = []domain{
	{
		agent:  topology.AgentArchitect,
		intent: intentCreate,
		rules: slices.Concat(
			rules(2, intentCreate, "implement", "add", "create", "build", "write"),
			rules(2, intentModify, "refactor", "change", "remove", "update", "rename", "improve", "optimize", "optimise"),
			rules(2, intentFix, "fix"),
			rules(1, intentFix, "bug", "typo", "spelling", "whitespace"),
		),
		leadingVerbBonus: 2,
	},
	{
		agent:  topology.AgentLibrarian,
		intent: intentFindCode,
		rules: slices.Concat(
			rules(5, "", "where is", "where are", "which file", "who calls"),
			rules(3, "", "search the code", "show me", "how does", "what does", "walk through", "our convention"),
			rules(2, "", "defined", "definition", "function", "method", "struct", "class", "codebase", "symbol"),
			rules(1, "", "code", "implementation", "file", "call", "interface", "package"),
		),
		identifierWeight: 1,
	},
	{
		agent:  topology.AgentArchivalist,
		intent: intentRecall,
		rules: slices.Concat(
			rules(3, "", "last time", "did we", "what happened", "where was i", "last session", "did it work",
				"result of", "recent changes", "who worked on", "like before", "pick up where", "leave off", "what failed"),
			rules(2, "", "history", "previously", "decide", "decision", "remember", "earlier", "failure", "what approach",
				"turn out", "yesterday", "last week", "last month", "this week", "recently"),
		),
	},
	{
		agent:  topology.AgentAcademic,
		intent: intentResearch,
		rules: slices.Concat(
			rules(3, "", "best practice", "how would i", "how should i", "best way"),
			rules(2, "", "documentation", "docs", "research", "paper", "how do i", "tutorial", "rfc", "design"),
			rules(1, "", "how to", "standard", "approach", "compare"),
		),
	},
}

// keywordClassifier routes by weighted keyword matches. Confidence grows with
// the best score and shrinks as the runner-up gets close:
//
//	confidence = b/(b+1) * (1 + (b-s)/b) / 2
//
// where b is the best score and s the second best, so one weak keyword or a
// tie stays under the routing threshold and a clear signal passes it.
type keywordClassifier struct {
	domains []domain
	forms   map[string][]string // keyword -> its accepted word forms
}

func newKeywordClassifier() *keywordClassifier {
	c := &keywordClassifier{domains: keywordDomains, forms: map[string][]string{}}
	for _, d := range c.domains {
		for _, r := range d.rules {
			last := r.phrase[len(r.phrase)-1]
			c.forms[last] = inflections(last)
		}
	}
	return c
}

// inflections lists a word and its regular English inflections.
func inflections(w string) []string {
	out := []string{w, w + "s", w + "es", w + "ed", w + "ing"}
	if strings.HasSuffix(w, "e") {
		out = append(out, w+"d", w[:len(w)-1]+"ing")
	}
	return out
}

var (
	// Hyphenated words stay whole: "write-through" is not "write".
	wordPattern  = regexp.MustCompile(`[\p{L}\p{N}_'][\p{L}\p{N}_'-]*`)
	camelPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	snakePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)+$`)
)

// isIdentifier reports whether a word looks like a code identifier:
// snake_case, camelCase or PascalCase with an inner capital.
func isIdentifier(w string) bool {
	if snakePattern.MatchString(w) {
		return true
	}
	if !camelPattern.MatchString(w) || len(w) < 3 {
		return false
	}
	hasLower := strings.IndexFunc(w, unicode.IsLower) >= 0
	inner := strings.IndexFunc(w[1:], unicode.IsUpper) >= 0
	return hasLower && inner
}

// Leading words skipped when looking for an imperative verb.
var politeOpeners = map[string]bool{"please": true, "can": true, "could": true, "would": true, "you": true, "pls": true}

var stopWords = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "for": true, "to": true, "in": true, "on": true, "and": true,
	"or": true, "is": true, "are": true, "was": true, "we": true, "i": true, "me": true, "my": true, "it": true,
	"this": true, "that": true, "with": true, "what": true, "how": true, "why": true, "when": true, "about": true,
	"please": true, "can": true, "could": true, "you": true, "do": true, "does": true, "did": true, "be": true,
	"our": true, "at": true, "by": true, "from": true, "so": true, "all": true, "any": true, "some": true,
	"there": true, "where": true, "which": true, "who": true, "tell": true, "show": true, "find": true, "let's": true,
}

type match struct {
	agent  string
	score  float64
	intent string
	first  int      // position of the first match, for intent choice
	words  []string // matched phrases, for the reason
}

// Classify scores every domain and picks the best.
func (c *keywordClassifier) Classify(_ context.Context, text string) (Classification, error) {
	tok := tokenize(text)
	results, matched := c.score(tok)
	best := results[0]
	out := Classification{Subject: subject(tok.raw, tok.words, tok.identifiers, matched)}
	for _, r := range results {
		if r.score > 0 {
			out.Candidates = append(out.Candidates, r.agent)
		}
	}
	out.KeyConstraints, out.SuccessCriteria = constraints(text)
	if best.score == 0 {
		out.IntentType = gateAmbiguous
		out.Reason = "no routing keywords matched"
		return out, nil
	}
	second := results[1].score
	conf := best.score / (best.score + 1) * (1 + (best.score-second)/best.score) / 2
	out.Target = best.agent
	out.Confidence = math.Round(conf*1000) / 1000
	out.Action = best.intent
	out.Reason = fmt.Sprintf("keywords: %s (score %g", strings.Join(best.words, ", "), best.score)
	if second > 0 {
		out.Reason += fmt.Sprintf("; %s scored %g", results[1].agent, second)
	}
	out.Reason += ")"
	refine(&out, text, tok, matched)
	return out, nil
}

// tokens are a text's words as classification reads them.
type tokens struct {
	raw, words  []string // as written, and lower case
	lead        int      // position of the first word after polite openers
	identifiers []string // code identifiers, each once
}

func tokenize(text string) tokens {
	t := tokens{raw: wordPattern.FindAllString(text, -1)}
	t.words = make([]string, len(t.raw))
	for i, w := range t.raw {
		t.words[i] = strings.ToLower(w)
	}
	for t.lead < len(t.words) && politeOpeners[t.words[t.lead]] {
		t.lead++
	}
	for _, w := range t.raw {
		if isIdentifier(w) && !slices.Contains(t.identifiers, w) {
			t.identifiers = append(t.identifiers, w)
		}
	}
	return t
}

// score matches every domain's rules, best first, and says which word
// positions a rule used.
func (c *keywordClassifier) score(t tokens) ([]match, map[int]bool) {
	matched := map[int]bool{}
	var results []match
	for _, d := range c.domains {
		m := match{agent: d.agent, intent: d.intent, first: math.MaxInt}
		for _, r := range d.rules {
			for _, pos := range c.find(t.words, r.phrase) {
				m.score += r.weight
				m.words = append(m.words, strings.Join(t.words[pos:pos+len(r.phrase)], " "))
				for i := pos; i < pos+len(r.phrase); i++ {
					matched[i] = true
				}
				if r.intent != "" && pos < m.first {
					m.first, m.intent = pos, r.intent
				}
				if pos == t.lead && d.leadingVerbBonus > 0 {
					m.score += d.leadingVerbBonus
					m.words = append(m.words, "(imperative)")
				}
			}
		}
		if d.identifierWeight > 0 && len(t.identifiers) > 0 {
			n := min(len(t.identifiers), 2)
			m.score += float64(n) * d.identifierWeight
			m.words = append(m.words, t.identifiers[:n]...)
		}
		results = append(results, m)
	}
	sort.SliceStable(results, func(i, j int) bool { return results[i].score > results[j].score })
	return results, matched
}

// refine sets what the target's own routing reads: the intent gate's type
// (a trivial change goes to the Architect too, which makes it a one-task
// plan), the knowledge intent and the time scope.
func refine(out *Classification, text string, t tokens, matched map[int]bool) {
	lower := strings.ToLower(text)
	switch out.Target {
	case topology.AgentArchitect:
		out.IntentType = gateType(lower, t.identifiers)
		if out.IntentType == gateTrivial {
			out.Reason += "; trivial change: a one-task plan"
		}
	case topology.AgentLibrarian:
		out.IntentType = gateExploratory
		out.KnowledgeIntent = librarianIntent(lower)
	case topology.AgentArchivalist:
		out.IntentType = gateExploratory
		out.KnowledgeIntent = archivalistIntent(lower)
		var scopeWords []string
		out.TimeScope, scopeWords = timeScope(lower)
		out.Subject = subjectWithout(t.raw, t.words, t.identifiers, matched, scopeWords)
	default:
		out.IntentType = gateExploratory
	}
}

// Trigger tables of the intent gate (spec A-29).
var (
	trivialPattern  = regexp.MustCompile(`\b(typos?|spelling|misspell\w*|whitespace|indentation|comment|one[- ]line|bump the version|bump version)\b`)
	githubPattern   = regexp.MustCompile(`(\bissue\s*#?\d+|\bpull request\b|\bPR\s*#?\d+|\bgithub\b|#\d+\b)`)
	openEndedPrefix = regexp.MustCompile(`\b(improve|make (it|this|the \w+) (better|faster|cleaner)|clean up|optimi[sz]e|modernize|redesign|rethink)\b`)
	specificPattern = regexp.MustCompile(`(\w+\.\w{1,5}\b|/\w+|\busing\b|\bwith\b|\bto the\b|\bin the\b|\bendpoint\b|\bfunction\b)`)
)

// gateType classifies a change request.
func gateType(lower string, identifiers []string) string {
	switch {
	case trivialPattern.MatchString(lower):
		return gateTrivial
	case githubPattern.MatchString(lower):
		return gateGitHubWork
	case openEndedPrefix.MatchString(lower) && len(identifiers) == 0 && !specificPattern.MatchString(lower):
		return gateOpenEnded
	}
	return gateExplicit
}

// knowledgeTrigger is one row of a trigger table.
type knowledgeTrigger struct {
	intent   string
	patterns []string
}

// Librarian triggers (spec A-34), checked in order.
var librarianTriggers = []knowledgeTrigger{
	{"LOCATE", []string{"where is", "where are", "find", "show me", "which file", "locate", "who calls", "defined"}},
	{"PATTERN", []string{"strategy", "approach", "pattern", "how do we", "convention"}},
	{"EXPLAIN", []string{"how does", "explain", "what does", "walk through", "walk me through"}},
}

// Archivalist triggers (spec A-35), checked in order.
var archivalistTriggers = []knowledgeTrigger{
	{"RESUME", []string{"where was i", "continue", "pick up", "last session", "leave off", "left off"}},
	{"OUTCOME", []string{"did it work", "result of", "status of", "turn out", "succeed", "work out"}},
	{"SIMILAR", []string{"similar to", "like before", "same as", "comparable", "similar"}},
	{"HISTORICAL", []string{"how did we", "what approach", "last time", "previously", "what was the solution", "decide", "decision"}},
	{"ACTIVITY", []string{"what has", "recent changes", "who worked on", "history of", "what happened"}},
}

func matchTrigger(lower string, table []knowledgeTrigger) string {
	for _, t := range table {
		for _, p := range t.patterns {
			if containsPhrase(lower, p) {
				return t.intent
			}
		}
	}
	return "GENERAL"
}

func librarianIntent(lower string) string   { return matchTrigger(lower, librarianTriggers) }
func archivalistIntent(lower string) string { return matchTrigger(lower, archivalistTriggers) }

// containsPhrase reports whether phrase occurs in lower on word boundaries.
func containsPhrase(lower, phrase string) bool {
	for i := 0; ; {
		j := strings.Index(lower[i:], phrase)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(phrase)
		okStart := start == 0 || !isWordByte(lower[start-1])
		okEnd := end == len(lower) || !isWordByte(lower[end])
		if okStart && okEnd {
			return true
		}
		i = start + 1
	}
}

func isWordByte(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b >= 'A' && b <= 'Z'
}

// timeScopes map temporal hints to a scope (spec A-35), checked in order.
var timeScopes = []struct{ phrase, scope string }{
	{"last month", "last_month"},
	{"last week", "last_week"},
	{"last year", "last_year"},
	{"this week", "this_week"},
	{"yesterday", "yesterday"},
	{"today", "today"},
	{"recently", "recent"},
	{"recent", "recent"},
	{"before", "before"},
}

// timeScope returns the time scope of a question and the words it used.
func timeScope(lower string) (string, []string) {
	for _, t := range timeScopes {
		if containsPhrase(lower, t.phrase) {
			return t.scope, strings.Fields(t.phrase)
		}
	}
	return "", nil
}

// constraintPattern finds a request's constraints: "careful about memory",
// "without breaking the API", "don't touch the schema".
var (
	constraintPattern = regexp.MustCompile(`(?i)\b(careful (?:about|with)|without|don'?t|do not|must not|must|never|avoid|skip|keep|only|make sure|no more than|at most)\b[^,;.!?]*`)
	criteriaPattern   = regexp.MustCompile(`(?i)\b(so that|should|such that|in order to)\b[^,;.!?]*`)
)

// constraints lifts key constraints and success criteria from a request.
func constraints(text string) ([]string, []string) {
	var cons, crit []string
	for _, m := range constraintPattern.FindAllString(text, 8) {
		if m = strings.TrimSpace(m); len(strings.Fields(m)) > 1 {
			cons = append(cons, m)
		}
	}
	for _, m := range criteriaPattern.FindAllString(text, 8) {
		if m = strings.TrimSpace(m); len(strings.Fields(m)) > 1 {
			crit = append(crit, m)
		}
	}
	return cons, crit
}

// find returns the positions where phrase occurs in words; the phrase's last
// word may be inflected.
func (c *keywordClassifier) find(words, phrase []string) []int {
	var out []int
	n := len(phrase)
	for i := 0; i+n <= len(words); i++ {
		ok := true
		for j := 0; j < n-1 && ok; j++ {
			ok = words[i+j] == phrase[j]
		}
		if ok && slices.Contains(c.forms[phrase[n-1]], words[i+n-1]) {
			out = append(out, i)
		}
	}
	return out
}

// subject names what a message is about: its first code identifier, else
// up to five content words in snake_case.
func subject(raw, words, identifiers []string, matched map[int]bool) string {
	return subjectWithout(raw, words, identifiers, matched, nil)
}

// subjectVerbs are generic verbs left out of a subject.
var subjectVerbs = map[string]bool{"handle": true, "handled": true, "deal": true, "dealt": true, "work": true, "worked": true, "go": true, "went": true}

// subjectWithout is subject leaving out the words in skip (a time scope).
func subjectWithout(raw, words, identifiers []string, matched map[int]bool, skip []string) string {
	if len(identifiers) > 0 {
		return identifiers[0]
	}
	var parts []string
	for i, w := range words {
		if matched[i] || stopWords[w] || subjectVerbs[w] || slices.Contains(skip, w) || len(parts) == 5 {
			continue
		}
		parts = append(parts, strings.Trim(strings.ToLower(raw[i]), "'"))
	}
	return strings.Join(parts, "_")
}

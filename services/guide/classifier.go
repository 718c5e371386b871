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
	// IntentType is, for example, FIND_CODE, RECALL, RESEARCH, CREATE, MODIFY or FIX.
	IntentType string
	// Subject is what the message is about, in snake_case or as an identifier.
	Subject string
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

// Intent types.
const (
	intentFindCode = "FIND_CODE"
	intentRecall   = "RECALL"
	intentResearch = "RESEARCH"
	intentCreate   = "CREATE"
	intentModify   = "MODIFY"
	intentFix      = "FIX"
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
			rules(2, intentModify, "refactor", "change", "remove", "update", "rename"),
			rules(2, intentFix, "fix"),
			rules(1, intentFix, "bug"),
		),
		leadingVerbBonus: 2,
	},
	{
		agent:  topology.AgentLibrarian,
		intent: intentFindCode,
		rules: slices.Concat(
			rules(3, "", "where is", "where are", "search the code", "who calls"),
			rules(2, "", "defined", "definition", "function", "method", "struct", "class", "codebase", "symbol"),
			rules(1, "", "code", "implementation", "file", "call", "interface", "package"),
		),
		identifierWeight: 1,
	},
	{
		agent:  topology.AgentArchivalist,
		intent: intentRecall,
		rules: slices.Concat(
			rules(3, "", "last time", "did we", "what happened"),
			rules(2, "", "history", "previously", "decide", "decision", "remember", "earlier", "failure"),
		),
	},
	{
		agent:  topology.AgentAcademic,
		intent: intentResearch,
		rules: slices.Concat(
			rules(3, "", "best practice"),
			rules(2, "", "documentation", "docs", "research", "paper", "how do i", "tutorial", "rfc"),
			rules(1, "", "how to", "standard"),
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
	raw := wordPattern.FindAllString(text, -1)
	words := make([]string, len(raw))
	for i, w := range raw {
		words[i] = strings.ToLower(w)
	}
	lead := 0
	for lead < len(words) && politeOpeners[words[lead]] {
		lead++
	}
	var identifiers []string
	for _, w := range raw {
		if isIdentifier(w) && !slices.Contains(identifiers, w) {
			identifiers = append(identifiers, w)
		}
	}
	matched := map[int]bool{} // word positions used by a rule
	var results []match
	for _, d := range c.domains {
		m := match{agent: d.agent, intent: d.intent, first: math.MaxInt}
		for _, r := range d.rules {
			for _, pos := range c.find(words, r.phrase) {
				m.score += r.weight
				m.words = append(m.words, strings.Join(words[pos:pos+len(r.phrase)], " "))
				for i := pos; i < pos+len(r.phrase); i++ {
					matched[i] = true
				}
				if r.intent != "" && pos < m.first {
					m.first, m.intent = pos, r.intent
				}
				if pos == lead && d.leadingVerbBonus > 0 {
					m.score += d.leadingVerbBonus
					m.words = append(m.words, "(imperative)")
				}
			}
		}
		if d.identifierWeight > 0 && len(identifiers) > 0 {
			n := min(len(identifiers), 2)
			m.score += float64(n) * d.identifierWeight
			m.words = append(m.words, identifiers[:n]...)
		}
		results = append(results, m)
	}
	sort.SliceStable(results, func(i, j int) bool { return results[i].score > results[j].score })
	best := results[0]
	out := Classification{Subject: subject(raw, words, identifiers, matched)}
	for _, r := range results {
		if r.score > 0 {
			out.Candidates = append(out.Candidates, r.agent)
		}
	}
	if best.score == 0 {
		out.Reason = "no routing keywords matched"
		return out, nil
	}
	second := results[1].score
	conf := best.score / (best.score + 1) * (1 + (best.score-second)/best.score) / 2
	out.Target = best.agent
	out.Confidence = math.Round(conf*1000) / 1000
	out.IntentType = best.intent
	out.Reason = fmt.Sprintf("keywords: %s (score %g", strings.Join(best.words, ", "), best.score)
	if second > 0 {
		out.Reason += fmt.Sprintf("; %s scored %g", results[1].agent, second)
	}
	out.Reason += ")"
	return out, nil
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
	if len(identifiers) > 0 {
		return identifiers[0]
	}
	var parts []string
	for i, w := range words {
		if matched[i] || stopWords[w] || len(parts) == 5 {
			continue
		}
		parts = append(parts, strings.Trim(strings.ToLower(raw[i]), "'"))
	}
	return strings.Join(parts, "_")
}

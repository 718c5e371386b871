package guide

import (
	"bufio"
	"context"
	_ "embed" // the labelled routing set
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"sylk.dev/sylk/pkg/topology"
)

// The offline router is a multinomial logistic regression over the words of
// a message (unigrams and bigrams, lightly stemmed), its leading words, its
// shape (identifiers, paths, a question mark, its length) and the keyword
// rules' domain scores. It is trained at start-up on the labelled set below
// (deterministic, a few milliseconds), and its confidence is the model's
// probability of the agent it picks, so that the routing threshold sends an
// unclear message to a clarification. The set has a fifth class, ambiguous,
// which takes the probability of messages that name no owner.

//go:embed routingset/labelled.tsv
var labelledTSV string

// LabelAmbiguous is the label of a message the Guide should ask about.
const LabelAmbiguous = "ambiguous"

// RoutingLabels are the labels of the routing set: the routable agents, then
// LabelAmbiguous.
var RoutingLabels = []string{topology.AgentLibrarian, topology.AgentArchivalist, topology.AgentAcademic,
	topology.AgentArchitect, LabelAmbiguous}

// LabelledMessage is one example of the routing set.
type LabelledMessage struct {
	Text, Label string
}

// RoutingSet returns the labelled set the offline router is trained on.
func RoutingSet() ([]LabelledMessage, error) {
	var out []LabelledMessage
	sc := bufio.NewScanner(strings.NewReader(labelledTSV))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		text, label, ok := strings.Cut(line, "\t")
		if !ok || !slices.Contains(RoutingLabels, label) || strings.TrimSpace(text) == "" {
			return nil, fmt.Errorf("routing set line %d: want text<TAB>label with a label of %s", n, strings.Join(RoutingLabels, ", "))
		}
		out = append(out, LabelledMessage{Text: text, Label: label})
	}
	return out, sc.Err()
}

// Training parameters, chosen by cross-validation on the routing set
// (make bench-routing).
var defaultModelParams = modelParams{epochs: 200, rate: 1, l2: 3e-5}

// modelParams are the training parameters.
type modelParams struct {
	epochs int
	rate   float64 // the first epoch's; it decays by epoch
	l2     float64 // weight decay, which keeps probabilities from saturating
}

const (
	modelSeed = 24
	// charGramWeight is the value of a word's character trigrams, which
	// carry a typo or an unseen inflection to the words seen in training.
	charGramWeight = 0.1
)

// ModelClassifier is the offline router.
type ModelClassifier struct {
	keywords *keywordClassifier
	weights  map[string][]float64 // feature -> weight per label
}

// feature is one feature of a message, with its value.
type feature struct {
	name  string
	value float64
}

// trainedRouter is the router trained on the embedded set, once per process.
var trainedRouter = sync.OnceValue(func() *ModelClassifier {
	set, err := RoutingSet()
	if err != nil {
		panic(err) // the embedded set is checked by the tests
	}
	return TrainModelClassifier(set)
})

// newModelClassifier returns the router trained on the embedded set.
func newModelClassifier() *ModelClassifier { return trainedRouter() }

// NewKeywordClassifier returns the keyword rules alone, the router's
// baseline in make bench-routing.
func NewKeywordClassifier() Classifier { return newKeywordClassifier() }

// TrainModelClassifier trains a router on set by stochastic gradient
// descent in a fixed shuffled order; a fixed number of epochs and a
// decaying rate stop it before it fits the set exactly.
func TrainModelClassifier(set []LabelledMessage) *ModelClassifier {
	return train(set, defaultModelParams)
}

func train(set []LabelledMessage, mp modelParams) *ModelClassifier {
	c := &ModelClassifier{keywords: newKeywordClassifier(), weights: map[string][]float64{}}
	xs := make([][]weighted, len(set))
	ys := make([]int, len(set))
	for i, ex := range set {
		for _, f := range c.features(ex.Text) {
			w := c.weights[f.name]
			if w == nil {
				w = make([]float64, len(RoutingLabels))
				c.weights[f.name] = w
			}
			xs[i] = append(xs[i], weighted{w, f.value})
		}
		ys[i] = slices.Index(RoutingLabels, ex.Label)
	}
	order := make([]int, len(set))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(modelSeed, modelSeed))
	p := make([]float64, len(RoutingLabels))
	for epoch := range mp.epochs {
		rate := mp.rate / (1 + 0.05*float64(epoch))
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			step(xs[i], ys[i], rate, mp.l2, p)
		}
	}
	return c
}

// weighted is a feature's value and its weights, in training.
type weighted struct {
	w     []float64
	value float64
}

// step moves the weights of x's features against the gradient of the log
// loss of label y; p is scratch space.
func step(x []weighted, y int, rate, l2 float64, p []float64) {
	clear(p)
	for _, f := range x {
		for k := range p {
			p[k] += f.w[k] * f.value
		}
	}
	softmax(p)
	for k := range p {
		g := p[k]
		if k == y {
			g--
		}
		for _, f := range x {
			f.w[k] -= rate * (g*f.value + l2*f.w[k])
		}
	}
}

// probabilities are the softmax of x's scores, per label.
func (c *ModelClassifier) probabilities(x []feature) []float64 {
	s := make([]float64, len(RoutingLabels))
	for _, f := range x {
		if w, ok := c.weights[f.name]; ok {
			for k := range s {
				s[k] += w[k] * f.value
			}
		}
	}
	softmax(s)
	return s
}

// softmax turns scores into probabilities, in place.
func softmax(s []float64) {
	top := slices.Max(s)
	var sum float64
	for k := range s {
		s[k] = math.Exp(s[k] - top)
		sum += s[k]
	}
	for k := range s {
		s[k] /= sum
	}
}

var (
	namePattern     = regexp.MustCompile(`^[A-Z][a-z]+[A-Za-z0-9]*$`)
	acronymPattern  = regexp.MustCompile(`^[A-Z][A-Z0-9]+$`)
	pathPattern     = regexp.MustCompile(`(\w/\w|\b\w+\.(go|md|ya?ml|json|proto|sql|ts|py|txt|toml|mod)\b|/v\d/)`)
	questionOpeners = map[string]bool{"what": true, "where": true, "how": true, "why": true, "which": true, "who": true,
		"when": true, "is": true, "are": true, "does": true, "do": true, "did": true, "has": true, "have": true,
		"was": true, "were": true, "can": true, "could": true, "should": true, "would": true, "any": true}
)

// Word classes the model reads besides the words themselves: a verb that
// opens an imperative, a past tense (history), and a word that points at
// this codebase rather than knowledge in general.
var (
	imperativeVerbs = wordSet(`add fix remove make rename upgrade bump move split delete replace write creat create implement
		change update enable disable convert extract introduce support allow limit set turn use handle log return reduce stop
		ensure send open generate parametrise parameterise clean cleanup wire swap port migrate deprecate drop inline rewrite
		adjust reword refactor optimiz optimis improve build get let put increas decreas raise lower expose hide cache retry
		wrap unwrap validat check document test mov renam deprecat`)
	pastMarkers = wordSet(`did was were had went tried decided chose agreed happened failed broke changed worked
		previously before earlier last ago yesterday history ever already again`)
	pronouns    = wordSet("we i you they it he she someone anyone")
	selfMarkers = wordSet("our we us here this repo codebase code func function method struct file package")
)

func wordSet(words string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(words) {
		out[w] = true
	}
	return out
}

// featureSet collects a message's features, each once, in a fixed order.
type featureSet struct {
	seen map[string]bool
	out  []feature
}

func (f *featureSet) add(name string, v float64) {
	if !f.seen[name] {
		f.seen[name] = true
		f.out = append(f.out, feature{name, v})
	}
}

// features are what the model reads of a message: its words, its shape and
// the keyword rules' scores.
func (c *ModelClassifier) features(text string) []feature {
	tok := tokenize(text)
	stems := make([]string, len(tok.words))
	for i, w := range tok.words {
		stems[i] = stem(w)
	}
	f := &featureSet{seen: map[string]bool{}, out: []feature{{"bias", 1}}}
	wordFeatures(f, tok, stems)
	shapeFeatures(f, text, tok, stems)
	kw, _ := c.keywords.score(tok)
	for i, m := range kw {
		if m.score > 0 {
			f.add("kw:"+m.agent, m.score/(m.score+2))
			if i == 0 && m.score > kw[1].score {
				f.add("kwbest:"+m.agent, 1)
			}
		}
	}
	if kw[0].score == 0 {
		f.add("kw:none", 1)
	}
	return f.out
}

// wordFeatures: stemmed unigrams and bigrams, character trigrams, and the
// leading word and bigram.
func wordFeatures(f *featureSet, tok tokens, stems []string) {
	for i, s := range stems {
		f.add("w:"+s, 1)
		g := " " + tok.words[i] + " "
		for j := 0; j+3 <= len(g); j++ {
			f.add("c:"+g[j:j+3], charGramWeight)
		}
		if i+1 < len(stems) {
			f.add("b:"+s+"_"+stems[i+1], 1)
		}
	}
	if tok.lead < len(stems) {
		f.add("lead:"+stems[tok.lead], 1)
		if tok.lead+1 < len(stems) {
			f.add("lead2:"+stems[tok.lead]+"_"+stems[tok.lead+1], 1)
		}
	}
}

// shapeFeatures: the word classes, names and acronyms, question form,
// identifiers, paths, politeness and length.
func shapeFeatures(f *featureSet, text string, tok tokens, stems []string) {
	if tok.lead < len(stems) && imperativeVerbs[stems[tok.lead]] {
		f.add("shape:imperative", 1)
	}
	for i, w := range tok.words {
		switch {
		case pastMarkers[w] || i > 0 && pronouns[tok.words[i-1]] && strings.HasSuffix(w, "ed"):
			f.add("shape:past", 1)
		case selfMarkers[w]:
			f.add("shape:ours", 1)
		}
	}
	for i, w := range tok.raw {
		switch {
		case i > 0 && namePattern.MatchString(w):
			f.add("shape:name", 1) // Main, Classification: a name in the code
		case acronymPattern.MatchString(w):
			f.add("shape:acronym", 1) // NATS, HNSW: a product or a technique
		}
	}
	if len(stems) > 0 && questionOpeners[stems[0]] {
		f.add("shape:question", 1)
	}
	for _, sh := range []struct {
		name string
		on   bool
	}{
		{"shape:identifier", len(tok.identifiers) > 0}, {"shape:path", pathPattern.MatchString(text)},
		{"shape:qmark", strings.HasSuffix(strings.TrimSpace(text), "?")}, {"shape:polite", tok.lead > 0},
	} {
		if sh.on {
			f.add(sh.name, 1)
		}
	}
	f.add(fmt.Sprintf("shape:len%d", lengthBucket(len(stems))), 1)
}

// lengthBucket groups a message's word count: 1, 2-3, 4-7, 8 and more.
func lengthBucket(n int) int {
	switch {
	case n <= 1:
		return 1
	case n <= 3:
		return 2
	case n <= 7:
		return 3
	}
	return 4
}

// stem strips a word's possessive and common inflections, so that
// "cached", "caches" and "caching" read alike.
func stem(w string) string {
	w = strings.TrimSuffix(strings.TrimSuffix(w, "'s"), "'")
	for _, suf := range []string{"ing", "ed", "es", "s"} {
		if len(w) > len(suf)+3 && strings.HasSuffix(w, suf) && !strings.HasSuffix(w, "ss") {
			return strings.TrimSuffix(w, suf)
		}
	}
	return w
}

// Classify routes text to the most probable agent. When ambiguous is the
// most probable label, Target stays empty; Confidence is the probability
// of the best agent either way.
func (c *ModelClassifier) Classify(_ context.Context, text string) (Classification, error) {
	p := c.probabilities(c.features(text))
	agents := slices.Clone(RoutingLabels[:len(RoutingLabels)-1])
	sort.SliceStable(agents, func(i, j int) bool {
		return p[slices.Index(RoutingLabels, agents[i])] > p[slices.Index(RoutingLabels, agents[j])]
	})
	best, ambiguous := p[slices.Index(RoutingLabels, agents[0])], p[len(p)-1]
	tok := tokenize(text)
	kw, matched := c.keywords.score(tok)
	out := Classification{Subject: subject(tok.raw, tok.words, tok.identifiers, matched),
		Confidence: math.Round(best*1000) / 1000}
	out.KeyConstraints, out.SuccessCriteria = constraints(text)
	out.Candidates = candidates(agents, p, kw, ambiguous > best)
	var parts []string
	for _, a := range agents[:2] {
		parts = append(parts, fmt.Sprintf("%s %.2f", a, p[slices.Index(RoutingLabels, a)]))
	}
	out.Reason = fmt.Sprintf("model: %s, unclear %.2f", strings.Join(parts, ", "), ambiguous)
	if words := keywordWords(kw); words != "" {
		out.Reason += "; keywords: " + words
	}
	if ambiguous > best {
		out.IntentType = gateAmbiguous
		return out, nil
	}
	out.Target = agents[0]
	out.Action = actionOf(out.Target, kw)
	refine(&out, text, tok, matched)
	return out, nil
}

// candidates are the agents offered when the Guide asks, best first: those
// the model gives at least a tenth of the probability, or, when the
// message is unclear, those the keyword rules matched (none: the Guide
// offers them all).
func candidates(agents []string, p []float64, kw []match, unclear bool) []string {
	var out []string
	for i, a := range agents {
		matched := slices.ContainsFunc(kw, func(m match) bool { return m.agent == a && m.score > 0 })
		if unclear && matched || !unclear && (i == 0 || p[slices.Index(RoutingLabels, a)] >= 0.1) {
			out = append(out, a)
		}
	}
	return out
}

// actionOf is the action of a request routed to agent: the intent of the
// agent's first matching rule, else the domain's own.
func actionOf(agent string, kw []match) string {
	for _, m := range kw {
		if m.agent == agent {
			if m.score == 0 && agent == topology.AgentArchitect {
				return intentModify
			}
			return m.intent
		}
	}
	return ""
}

// keywordWords lists the keyword matches of every domain, for a reason.
func keywordWords(kw []match) string {
	var parts []string
	for _, m := range kw {
		if m.score > 0 {
			parts = append(parts, fmt.Sprintf("%s %g (%s)", m.agent, m.score, strings.Join(m.words, ", ")))
		}
	}
	return strings.Join(parts, ", ")
}

package intent

import (
	"cmp"
	"slices"
	"strings"
	"unicode"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// Bounds of the key constraints, and of the success criteria, that a caller
// may state for one request (each list, each entry).
const (
	MaxStatements     = 50
	MaxStatementBytes = 1000
)

// Merge returns a request's enriched success criteria (spec A-11): every
// explicit criterion as the user gave it, then each expectation of the
// domain that no key constraint contradicts and no constraint or criterion
// already states, as inferred from "academic:<domain>", REQUIRED first,
// then RECOMMENDED, then OPTIONAL. An explicit constraint always wins over
// an inferred expectation.
func Merge(domain string, constraints, criteria []string, exps []Expectation) []*messagev1.SuccessCriterion {
	out := make([]*messagev1.SuccessCriterion, 0, len(criteria)+len(exps))
	for _, c := range criteria {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, &messagev1.SuccessCriterion{Criterion: c, Source: messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT})
		}
	}
	var inferred []*messagev1.SuccessCriterion
	for _, e := range Allowed(constraints, exps) {
		if slices.ContainsFunc(criteria, func(c string) bool { return Covers(c, e) }) {
			continue
		}
		inferred = append(inferred, &messagev1.SuccessCriterion{
			Criterion:    e.Text,
			Source:       messagev1.CriterionSource_CRITERION_SOURCE_INFERRED,
			Priority:     e.Priority,
			InferredFrom: "academic:" + domain,
			Rationale:    e.Rationale,
		})
	}
	slices.SortStableFunc(inferred, func(a, b *messagev1.SuccessCriterion) int { return cmp.Compare(a.GetPriority(), b.GetPriority()) })
	return append(out, inferred...)
}

// MergeProto is Merge for expectations received as messages (from the
// academic): their topics are recovered from the built-in table when the
// domain is known, else from their own words.
func MergeProto(domain string, constraints, criteria []string, exps []*messagev1.DomainExpectation) []*messagev1.SuccessCriterion {
	known := Lookup(domain)
	in := make([]Expectation, 0, len(exps))
	for _, p := range exps {
		e := Expectation{Text: p.GetExpectation(), Priority: p.GetPriority(), Rationale: p.GetRationale()}
		if i := slices.IndexFunc(known, func(k Expectation) bool { return strings.EqualFold(k.Text, e.Text) }); i >= 0 {
			e.Topic, e.Object = known[i].Topic, known[i].Object
		} else if ws := significant(words(e.Text)); len(ws) > 0 {
			e.Topic = stem(ws[0])
		}
		in = append(in, e)
	}
	return Merge(domain, constraints, criteria, in)
}

// Allowed returns the expectations that no constraint contradicts and no
// constraint already states.
func Allowed(constraints []string, exps []Expectation) []Expectation {
	var out []Expectation
	for _, e := range exps {
		if !slices.ContainsFunc(constraints, func(c string) bool { return Conflicts(c, e) || Covers(c, e) }) {
			out = append(out, e)
		}
	}
	return out
}

// Conflicts reports whether a statement (a key constraint) contradicts e:
// it speaks of e's topic, and either negates it ("skip confirmation") or
// asks something else of it ("redirect to home" against "redirect to
// login"). A statement that says what e says does not conflict with it.
func Conflicts(statement string, e Expectation) bool {
	ws := words(statement)
	if e.Topic == "" || !hasStem(ws, e.Topic) || saysAll(ws, e) {
		return false
	}
	return negatedNear(statement, e.Topic) || (e.Object != "" && !hasStem(ws, e.Object))
}

// Covers reports whether a statement already states e: it has e's
// significant words, or it speaks of e's topic (and object) without
// negating it.
func Covers(statement string, e Expectation) bool {
	ws := words(statement)
	if saysAll(ws, e) {
		return true
	}
	return e.Topic != "" && hasStem(ws, e.Topic) && (e.Object == "" || hasStem(ws, e.Object)) && !negatedNear(statement, e.Topic)
}

func saysAll(ws []string, e Expectation) bool {
	want := significant(words(e.Text))
	if len(want) == 0 {
		return false
	}
	for _, w := range want {
		if !hasStem(ws, stem(w)) {
			return false
		}
	}
	return true
}

// phrases are multi-word forms read as one word.
var phrases = strings.NewReplacer("log in", "login", "sign in", "login", "signin", "login",
	"log out", "logout", "sign out", "logout", "signout", "logout", "do not", "dont", "don't", "dont")

// words splits s into lower-case words.
func words(s string) []string {
	s = phrases.Replace(strings.ToLower(s))
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' })
}

var stopWords = map[string]bool{"a": true, "an": true, "the": true, "to": true, "of": true, "on": true, "in": true,
	"if": true, "and": true, "or": true, "with": true, "for": true, "is": true, "are": true, "be": true, "it": true}

func significant(ws []string) []string {
	return slices.DeleteFunc(slices.Clone(ws), func(w string) bool { return stopWords[w] })
}

// stem is a word's first five letters: enough to tell "termination" and
// "terminated" from "terms", and "redirected" from "read".
func stem(w string) string {
	if r := []rune(w); len(r) > 5 {
		return string(r[:5])
	}
	return w
}

func hasStem(ws []string, s string) bool {
	return slices.ContainsFunc(ws, func(w string) bool { return strings.HasPrefix(w, s) })
}

var negations = map[string]bool{"no": true, "not": true, "never": true, "without": true, "dont": true, "skip": true,
	"skipping": true, "avoid": true, "disable": true, "disabled": true, "omit": true, "remove": true, "drop": true,
	"instead": true, "nor": true, "none": true}

// negationWindow is how many words from a topic a negation applies to it:
// "skip the confirmation", "confirmation is not needed".
const negationWindow = 3

// negatedNear reports whether a negation stands within negationWindow words
// of a word with the given stem, in the same clause.
func negatedNear(statement, topic string) bool {
	for _, clause := range clauses(statement) {
		ws := words(clause)
		for i, w := range ws {
			if !strings.HasPrefix(w, topic) {
				continue
			}
			for _, n := range ws[max(0, i-negationWindow):min(len(ws), i+negationWindow+1)] {
				if negations[n] {
					return true
				}
			}
		}
	}
	return false
}

package intent

import (
	"fmt"
	"strings"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// Decision is the feedback validation gate's verdict on a correction
// (spec A-12).
type Decision string

// The gate's decisions.
const (
	Passed        Decision = "PASSED"
	Flagged       Decision = "FLAGGED"
	FlaggedStrong Decision = "FLAGGED_STRONG"
	FlaggedNote   Decision = "FLAGGED_NOTE"
	Blocked       Decision = "BLOCKED"
)

// Impact is a correction's effect on one success criterion.
type Impact string

// Impacts; NEUTRAL ones are not kept.
const (
	Positive Impact = "POSITIVE"
	Negative Impact = "NEGATIVE"
)

// Correction is what an Inspector or Tester would send the Engineer.
type Correction struct {
	Issue      string
	Correction string
	// RootCauseConfidence is the corrector's confidence (0 to 1) that the
	// issue's root cause is what the correction addresses.
	RootCauseConfidence float64
}

// CriterionImpact is a non-neutral impact of a correction on a criterion.
type CriterionImpact struct {
	Criterion string
	Impact    Impact
	Reason    string
}

// Assessment is the gate's result: the decision, what led to it, and the
// warning to send with a flagged correction.
type Assessment struct {
	Decision  Decision
	Conflicts []string // the key constraints the correction contradicts
	Impacts   []CriterionImpact
	RootCause string // HIGH, MEDIUM or LOW
	Warning   string
}

// Root-cause bands (spec A-12).
const (
	rootCauseHigh   = 0.80
	rootCauseMedium = 0.50
)

// RootCauseBand names a root-cause confidence's band.
func RootCauseBand(rc float64) string {
	switch {
	case rc >= rootCauseHigh:
		return "HIGH"
	case rc >= rootCauseMedium:
		return "MEDIUM"
	}
	return "LOW"
}

// Decide applies the gate's decision table (spec A-12): a constraint
// conflict blocks; a negative impact flags strongly below medium root-cause
// confidence and flags otherwise; a low root-cause confidence alone adds a
// note; anything else passes.
func Decide(conflicts int, negative bool, rootCause float64) Decision {
	switch {
	case conflicts > 0:
		return Blocked
	case negative && rootCause < rootCauseMedium:
		return FlaggedStrong
	case negative:
		return Flagged
	case rootCause < rootCauseMedium:
		return FlaggedNote
	}
	return Passed
}

// Validate runs the feedback validation gate on a correction against the
// intent it must serve: the request's key constraints and its success
// criteria, explicit and inferred.
//
// A correction contradicts a constraint that forbids something ("don't
// touch the schema", "skip confirmation") when it speaks of that thing
// without negating it. It hurts a criterion when it negates the
// criterion's subject ("remove the redirect" against "redirect to login"),
// and serves one when it names the criterion's words without negating
// them. Both are judged on words, not meaning: the offline gate is
// deliberately literal.
func Validate(constraints []string, criteria []*messagev1.SuccessCriterion, c Correction) Assessment {
	text := strings.TrimSpace(c.Issue + ". " + c.Correction)
	a := Assessment{RootCause: RootCauseBand(c.RootCauseConfidence)}
	for _, k := range constraints {
		if f, ok := forbids(k); ok && f.contradicts(text) {
			a.Conflicts = append(a.Conflicts, k)
		}
	}
	negative := false
	for _, cr := range criteria {
		if imp, ok := impactOn(text, cr.GetCriterion()); ok {
			a.Impacts = append(a.Impacts, imp)
			negative = negative || imp.Impact == Negative
		}
	}
	a.Decision = Decide(len(a.Conflicts), negative, c.RootCauseConfidence)
	switch a.Decision {
	case Blocked:
		a.Warning = "contradicts the constraint " + quoteAll(a.Conflicts)
	case FlaggedStrong, Flagged:
		var hurt []string
		for _, imp := range a.Impacts {
			if imp.Impact == Negative {
				hurt = append(hurt, imp.Criterion)
			}
		}
		a.Warning = fmt.Sprintf("may work against %s; root cause confidence %s", quoteAll(hurt), a.RootCause)
	case FlaggedNote:
		a.Warning = "root cause confidence " + a.RootCause + ": check that this addresses the cause, not a symptom"
	}
	return a
}

// forbidden is what a constraint forbids: an object (the stem of the last
// significant word its negation governs, "schema" in "don't touch the
// schema") and, when the constraint names a specific action on it, that
// action's stem ("break" in "without breaking the API"). Generic actions
// ("touch", "change") forbid any change to the object.
type forbidden struct {
	action, object string
}

// genericActions forbid any change to their object.
var genericActions = map[string]bool{"touch": true, "touching": true, "change": true, "changing": true, "modify": true,
	"modifying": true, "alter": true, "altering": true, "edit": true, "editing": true, "update": true, "updating": true,
	"rewrite": true, "rewriting": true, "reformat": true, "reformatting": true}

// forbids returns what a constraint forbids; ok is false for constraints
// that forbid nothing ("careful about memory").
func forbids(constraint string) (forbidden, bool) {
	for _, clause := range clauses(constraint) {
		ws := words(clause)
		for i, w := range ws {
			if !negations[w] {
				continue
			}
			rest := dropNegations(significant(ws[i+1:]))
			if len(rest) == 0 {
				continue
			}
			f := forbidden{object: stem(rest[len(rest)-1])}
			if len(rest) > 1 && !genericActions[rest[0]] {
				f.action = stem(rest[0])
			}
			return f, true
		}
	}
	return forbidden{}, false
}

// contradicts reports whether a correction does what f forbids: it speaks
// of the object (and of the action, when f names one) without negating it.
func (f forbidden) contradicts(text string) bool {
	if !speaksOf(text, f.object) {
		return false
	}
	return f.action == "" || speaksOf(text, f.action)
}

// speaksOf reports whether text names the stem without negating it.
func speaksOf(text, s string) bool {
	return hasStem(words(text), s) && !negatedNear(text, s)
}

// impactOn judges a correction's effect on one criterion: NEGATIVE when it
// negates one of the criterion's significant words, POSITIVE when it names
// at least half of them without negating any, and neutral (not ok)
// otherwise.
func impactOn(text, criterion string) (CriterionImpact, bool) {
	want := significant(words(criterion))
	if len(want) == 0 {
		return CriterionImpact{}, false
	}
	ws := words(text)
	named := 0
	for _, w := range want {
		s := stem(w)
		if !hasStem(ws, s) {
			continue
		}
		if negatedNear(text, s) {
			return CriterionImpact{criterion, Negative, fmt.Sprintf("the correction negates %q", w)}, true
		}
		named++
	}
	if 2*named >= len(want) {
		return CriterionImpact{criterion, Positive, "the correction works toward it"}, true
	}
	return CriterionImpact{}, false
}

func clauses(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(",;:.!?()", r) })
}

func dropNegations(ws []string) []string {
	out := ws[:0:0]
	for _, w := range ws {
		if !negations[w] {
			out = append(out, w)
		}
	}
	return out
}

func quoteAll(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

package grounding

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Threshold is the least grounding ratio of an answer that stands as
// written (spec K-11: 95%).
const Threshold = 0.95

// Verifier resolves citations for one agent: the Librarian reads the cited
// lines of the indexed revision, the Archivalist an entry, the Academic a
// document section.
type Verifier interface {
	// Resolve returns the text r points at, or a problem saying why it
	// points at nothing ("file not in the index", "line 90 is past the
	// file's end"); err is a failure to look, not a failed citation.
	Resolve(ctx context.Context, r Ref) (text, problem string, err error)
}

// Checked is a citation after verification.
type Checked struct {
	Claim
	// Problem says why the citation failed; "" when it holds.
	Problem string
}

// OK reports whether the citation held.
func (c Checked) OK() bool { return c.Problem == "" }

// Result is an answer after verification.
type Result struct {
	// Text is the answer with the failed citations removed.
	Text string
	// Checks are every citation in the order written.
	Checks []Checked
	// Verified of Total citations held; Ratio is Verified/Total (0 when
	// there is none: an answer that cites nothing is not grounded).
	Verified, Total int
	Ratio           float64
	// Ungrounded is Ratio below Threshold.
	Ungrounded bool
}

// Failed are the citations that did not hold.
func (r Result) Failed() []Checked {
	var out []Checked
	for _, c := range r.Checks {
		if !c.OK() {
			out = append(out, c)
		}
	}
	return out
}

// Check verifies every citation of text with v, computes the grounding
// ratio and removes the failed citations from the text (a claim whose only
// citation failed stands uncited; the caller marks the answer).
func Check(ctx context.Context, text string, v Verifier) (Result, error) {
	claims := Parse(text)
	res := Result{Total: len(claims)}
	texts := map[string]resolved{}
	for _, c := range claims {
		key := fmt.Sprintf("%d|%s", c.Ref.Kind, c.Ref.Raw)
		got, ok := texts[key]
		if !ok {
			t, problem, err := v.Resolve(ctx, c.Ref)
			if err != nil {
				return Result{}, fmt.Errorf("verify citation [%s]: %w", c.Ref.Raw, err)
			}
			got = resolved{text: t, problem: problem}
			texts[key] = got
		}
		problem := got.problem
		if problem == "" {
			problem = holdsClaim(c, got.text, groupSize(claims, c.Group))
		}
		res.Checks = append(res.Checks, Checked{Claim: c, Problem: problem})
		if problem == "" {
			res.Verified++
		}
	}
	if res.Total > 0 {
		res.Ratio = float64(res.Verified) / float64(res.Total)
	}
	res.Ungrounded = res.Ratio < Threshold
	res.Text = drop(text, res.Checks)
	return res, nil
}

type resolved struct {
	text, problem string
}

func groupSize(claims []Claim, group int) int {
	n := 0
	for _, c := range claims {
		if c.Group == group {
			n++
		}
	}
	return n
}

// holdsClaim says what of its claim the cited text lacks ("" when it
// holds it): alone, a citation must hold every identifier and quote of its
// claim; in a group of several, at least one.
func holdsClaim(c Claim, text string, members int) string {
	terms := relevantTerms(c)
	if len(terms) == 0 {
		return ""
	}
	var missing []string
	for _, t := range terms {
		if !Holds(text, t.text, t.quote) {
			missing = append(missing, t.text)
		}
	}
	if len(missing) == 0 || members > 1 && len(missing) < len(terms) {
		return ""
	}
	return fmt.Sprintf("the cited text does not hold %s", quoteList(missing))
}

type term struct {
	text  string
	quote bool
}

// relevantTerms are the claim's terms that the cited text can hold: a
// term naming the cited file itself, or any path, is where the text is,
// not what it says.
func relevantTerms(c Claim) []term {
	var out []term
	for _, id := range c.Identifiers {
		if strings.Contains(id, "/") || c.Ref.Path != "" && (id == c.Ref.Path || id == path.Base(c.Ref.Path)) {
			continue
		}
		out = append(out, term{text: id})
	}
	for _, q := range c.Quotes {
		out = append(out, term{text: q, quote: true})
	}
	return out
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "`" + s + "`"
	}
	return strings.Join(q, ", ")
}

var (
	spaces   = regexp.MustCompile(`\s+`)
	callArgs = regexp.MustCompile(`\(.*\)$`)
)

// Holds reports whether text holds the term t, white space aside: an
// identifier as written (a call's arguments aside, or the last part of a
// dotted name), a quote case-insensitively.
func Holds(text, t string, quote bool) bool {
	text = spaces.ReplaceAllString(text, " ")
	t = strings.TrimSpace(spaces.ReplaceAllString(t, " "))
	if quote {
		return strings.Contains(strings.ToLower(text), strings.ToLower(t))
	}
	if strings.Contains(text, t) {
		return true
	}
	bare := strings.TrimSpace(callArgs.ReplaceAllString(t, ""))
	if bare != "" && strings.Contains(text, bare) {
		return true
	}
	if i := strings.LastIndexAny(bare, ".:"); i >= 0 && i+1 < len(bare) {
		return strings.Contains(text, bare[i+1:])
	}
	return false
}

// drop removes the failed citations from text: a failed member from its
// bracket, a bracket with no member left with the space before it.
func drop(text string, checks []Checked) string {
	type bracket struct {
		start, end int
		kept       []string
		failed     bool
	}
	var groups []*bracket
	byGroup := map[int]*bracket{}
	for _, c := range checks {
		b := byGroup[c.Group]
		if b == nil {
			b = &bracket{start: c.start, end: c.end}
			byGroup[c.Group] = b
			groups = append(groups, b)
		}
		if c.OK() {
			b.kept = append(b.kept, c.Ref.Raw)
		} else {
			b.failed = true
		}
	}
	slices.Reverse(groups)
	for _, b := range groups {
		if !b.failed {
			continue
		}
		if len(b.kept) > 0 {
			text = text[:b.start] + "[" + strings.Join(b.kept, "; ") + "]" + text[b.end:]
			continue
		}
		start := b.start
		for start > 0 && (text[start-1] == ' ' || text[start-1] == '\t') {
			start--
		}
		text = text[:start] + text[b.end:]
	}
	return text
}

// Sentence tells a person how the answer's citations fared: "" when every
// one held; what failed and was removed otherwise; that nothing is
// verified when the model cited nothing. what names the cited sources
// ("the code", "the history").
func Sentence(res Result, what string) string {
	failed := res.Total - res.Verified
	switch {
	case res.Total == 0:
		return fmt.Sprintf("The model cited nothing of %s, so nothing in this answer is verified.", what)
	case failed > 0 && res.Ungrounded:
		return fmt.Sprintf("Only %d of %d citations held when checked against %s; the %d that failed %s removed, so what %s backed is unverified.",
			res.Verified, res.Total, what, failed, plural(failed, "was", "were"), plural(failed, "it", "they"))
	case failed > 0:
		return fmt.Sprintf("%d of %d citations failed the check against %s and %s removed.", failed, res.Total, what,
			plural(failed, "was", "were"))
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

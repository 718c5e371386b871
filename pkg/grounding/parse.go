// Package grounding checks that what a model wrote rests on what it was
// shown (spec K-11): it finds the citations in an answer —
// `[repo:path:line]`, `[repo:path:start-end]`, `[entries/<id>]`,
// `[documents/<id>#heading]` — and the claim each backs (the identifiers
// in backticks and the quoted text of the words before it), asks the
// answering agent's Verifier for the text each citation points at, and
// keeps a citation only when that text exists and holds its claim. The
// grounding ratio is the share that held; the failed ones are dropped from
// the text.
package grounding

import (
	"regexp"
	"strconv"
	"strings"
)

// Kind says what a citation points at.
type Kind int

// Citation kinds.
const (
	// Code is a line or a line range of a file in a repository.
	Code Kind = iota + 1
	// Entry is a history entry ("entries/<id>").
	Entry
	// Section is a section of a document ("documents/<id>#heading").
	Section
)

// Ref is one citation as written.
type Ref struct {
	Kind Kind
	// Raw is the citation's text inside its brackets (one member of a
	// group "[a; b]").
	Raw string
	// Repo, Path, Start and End locate code: Repo is the name the answer
	// was told to use for the repository.
	Repo       string
	Path       string
	Start, End int
	// ID is an entry's or a document's id; Heading a document section's
	// heading ("" for the whole document).
	ID      string
	Heading string
}

// Claim is a citation with the claim it backs.
type Claim struct {
	Ref Ref
	// Identifiers are the backticked names of the words it backs; Quotes
	// their double-quoted text. The cited text must hold them.
	Identifiers []string
	Quotes      []string
	// Group is the index of the bracket the citation was written in;
	// members of one bracket share their claim, and each must hold one of
	// its identifiers or quotes.
	Group int
	// start and end locate the citation's bracket in the text.
	start, end int
	// member is the citation's place within its bracket.
	member int
}

// bracketPattern finds bracketed text on one line that is no markdown
// link's text.
var bracketPattern = regexp.MustCompile(`\[([^\[\]\n]{1,600})\](?:\(|)`)

// codePattern is "repo:path:line" or "repo:path:start-end".
var codePattern = regexp.MustCompile(`^([^:\s][^:]*):([^:]+):(\d{1,7})(?:\s*[-–]\s*(\d{1,7}))?$`)

// idPattern is an entry's or document's id.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Parse finds the citations in text, each with its claim. Text in code
// spans or fenced blocks is never a citation; brackets that hold no
// citation (a markdown link's text, "[INFERENCE]", an index "a[i]") are
// left alone.
func Parse(text string) []Claim {
	masked := maskCode(text)
	var out []Claim
	claimStart := 0
	group := 0
	for _, m := range bracketPattern.FindAllStringSubmatchIndex(masked, -1) {
		if strings.HasSuffix(masked[m[0]:m[1]], "(") {
			continue // a markdown link
		}
		refs := parseGroup(text[m[2]:m[3]])
		if len(refs) == 0 {
			continue
		}
		from := max(claimStart, sentenceStart(masked, m[0]))
		ids, quotes := claimTerms(text[from:m[0]])
		for i, r := range refs {
			out = append(out, Claim{Ref: r, Identifiers: ids, Quotes: quotes, Group: group, start: m[0], end: m[1], member: i})
		}
		group++
		claimStart = m[1]
	}
	return out
}

// parseGroup parses the citations of one bracket, separated by ";" (or
// "," between citations of code or entries); nil when any member is no
// citation (the bracket is something else).
func parseGroup(s string) []Ref {
	var refs []Ref
	for _, p := range strings.Split(s, ";") {
		r, ok := ParseRef(strings.TrimSpace(p))
		if ok {
			refs = append(refs, r)
			continue
		}
		for _, q := range strings.Split(p, ",") {
			if r, ok = ParseRef(strings.TrimSpace(q)); !ok {
				return nil
			}
			refs = append(refs, r)
		}
	}
	return refs
}

// ParseRef parses one citation's text (without brackets).
func ParseRef(s string) (Ref, bool) {
	if rest, ok := strings.CutPrefix(s, "entries/"); ok {
		if idPattern.MatchString(rest) {
			return Ref{Kind: Entry, Raw: s, ID: rest}, true
		}
		return Ref{}, false
	}
	if rest, ok := strings.CutPrefix(s, "documents/"); ok {
		id, heading, _ := strings.Cut(rest, "#")
		if idPattern.MatchString(id) {
			return Ref{Kind: Section, Raw: s, ID: id, Heading: strings.TrimSpace(heading)}, true
		}
		return Ref{}, false
	}
	m := codePattern.FindStringSubmatch(s)
	if m == nil {
		return Ref{}, false
	}
	start, _ := strconv.Atoi(m[3])
	end := start
	if m[4] != "" {
		end, _ = strconv.Atoi(m[4])
	}
	path := strings.TrimPrefix(strings.TrimSpace(m[2]), "./")
	if start < 1 || end < start || path == "" || strings.ContainsAny(path, " \t") {
		return Ref{}, false
	}
	return Ref{Kind: Code, Raw: s, Repo: strings.TrimSpace(m[1]), Path: path, Start: start, End: end}, true
}

// maskCode replaces code spans and fenced blocks with spaces of the same
// length, so that offsets into the masked text are offsets into text.
func maskCode(text string) string {
	b := []byte(text)
	inFence := false
	lineStart := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '\n' {
			continue
		}
		line := string(b[lineStart:i])
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		if inFence || fence {
			blank(b, lineStart, i)
		} else {
			maskSpans(b, lineStart, i)
		}
		if fence {
			inFence = !inFence
		}
		lineStart = i + 1
	}
	return string(b)
}

// maskSpans blanks the backticked spans of b[from:to].
func maskSpans(b []byte, from, to int) {
	open := -1
	for i := from; i < to; i++ {
		if b[i] != '`' {
			continue
		}
		if open < 0 {
			open = i
			continue
		}
		blank(b, open, i+1)
		open = -1
	}
}

func blank(b []byte, from, to int) {
	for i := from; i < to; i++ {
		if b[i] != '\n' {
			b[i] = ' '
		}
	}
}

// sentenceStart is where the sentence holding offset i of masked text
// begins: after the last ". ", "! ", "? " or line break before it.
func sentenceStart(masked string, i int) int {
	start := 0
	for j := i - 1; j >= 0; j-- {
		c := masked[j]
		if c == '\n' {
			start = j + 1
			break
		}
		if (c == '.' || c == '!' || c == '?') && j+1 < len(masked) && (masked[j+1] == ' ' || masked[j+1] == '\n') && j+1 < i {
			start = j + 1
			break
		}
	}
	return start
}

// Claim terms.
var (
	spanPattern  = regexp.MustCompile("`([^`\n]{1,200})`")
	quotePattern = regexp.MustCompile(`"([^"\n]{3,200})"`)
)

// claimTerms are the backticked identifiers and the quoted text of a
// claim.
func claimTerms(claim string) (ids, quotes []string) {
	for _, m := range spanPattern.FindAllStringSubmatch(claim, -1) {
		if t := strings.TrimSpace(m[1]); t != "" {
			ids = append(ids, t)
		}
	}
	// Quotes inside code spans are code.
	outside := spanPattern.ReplaceAllString(claim, " ")
	for _, m := range quotePattern.FindAllStringSubmatch(outside, -1) {
		if t := strings.TrimSpace(m[1]); t != "" {
			quotes = append(quotes, t)
		}
	}
	return ids, quotes
}

package librarian

import (
	"strings"

	"sylk.dev/sylk/pkg/embed"
)

// maxTokenLen drops longer tokens (hashes, encoded blobs): nobody searches
// for them by name and they bloat the index.
const maxTokenLen = 64

// maxTokenTextBytes caps the token text of one chunk, far below the
// database's limit on a text-search vector.
const maxTokenTextBytes = 256 << 10

// words calls fn for every run of ASCII letters, digits and '_' in s.
// Everything else separates words, so the code-aware tokens only ever hold
// [a-z0-9] and the database parser sees each one as a single word.
func words(s string, fn func(w string)) {
	start := -1
	for i := 0; i < len(s); i++ {
		if isWordByte(s[i]) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			fn(s[start:i])
			start = -1
		}
	}
	if start >= 0 {
		fn(s[start:])
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// identifierTokens returns the search tokens of one word, lower-cased: its
// parts of two or more characters, then the whole word without '_' when it
// has more than one part. "parseHTTPRequest" gives parse, http, request,
// parsehttprequest.
func identifierTokens(w string) []string {
	parts := embed.SplitIdentifier(w)
	out := make([]string, 0, len(parts)+1)
	for _, p := range parts {
		if len(p) >= 2 && len(p) <= maxTokenLen {
			out = append(out, strings.ToLower(p))
		}
	}
	if len(parts) > 1 {
		joined := strings.ToLower(strings.ReplaceAll(w, "_", ""))
		if len(joined) <= maxTokenLen {
			out = append(out, joined)
		}
	} else if len(parts) == 1 && len(parts[0]) == 1 {
		// A one-character word is kept only when it stands alone, never as a
		// fragment of a longer identifier.
		out = append(out, strings.ToLower(parts[0]))
	}
	return out
}

// tokenText is the code-aware token text of s: the tokens of every word,
// each followed by its stem when that differs, space-separated, in order,
// at most maxTokenTextBytes long.
func tokenText(s string) string {
	var b strings.Builder
	full := false
	words(s, func(w string) {
		if full {
			return
		}
		toks := identifierTokens(w)
		for i, t := range toks {
			// The stem follows its token, so "configured" is found by
			// "config" and "parses" by "parse" (stem.go); a joined
			// identifier (the last of several tokens) is a name, not a word.
			if s := lexStem(t); s != t && (len(toks) == 1 || i < len(toks)-1) {
				t += " " + s
			}
			if b.Len()+len(t)+1 > maxTokenTextBytes {
				full = true
				return
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(t)
		}
	})
	return b.String()
}

// tokenSet returns the distinct tokens of s.
func tokenSet(s string) map[string]bool {
	set := map[string]bool{}
	words(s, func(w string) {
		for _, t := range identifierTokens(w) {
			set[t] = true
		}
	})
	return set
}

// stopWords are dropped from queries: they carry the question, not the
// subject. Words that are also common in code (get, set, new, type) are kept.
var stopWords = map[string]bool{
	"a": true, "about": true, "all": true, "am": true, "an": true, "and": true, "any": true, "are": true,
	"as": true, "at": true, "be": true, "been": true, "but": true, "by": true, "can": true, "could": true,
	"did": true, "do": true, "does": true, "doing": true, "done": true, "explain": true, "find": true,
	"for": true, "from": true, "had": true, "has": true, "have": true, "he": true, "her": true, "here": true,
	"him": true, "his": true, "how": true, "i": true, "if": true, "in": true, "into": true, "is": true,
	"it": true, "its": true, "just": true, "let": true, "look": true, "me": true, "my": true, "of": true,
	"on": true, "or": true, "our": true, "please": true, "she": true, "should": true, "show": true,
	"so": true, "some": true, "tell": true, "than": true, "that": true, "the": true, "their": true,
	"them": true, "then": true, "there": true, "these": true, "they": true, "this": true, "those": true,
	"to": true, "us": true, "was": true, "we": true, "were": true, "what": true, "when": true,
	"where": true, "which": true, "who": true, "whom": true, "why": true, "will": true, "with": true,
	"would": true, "you": true, "your": true,
}

// maxQueryTerms bounds the terms of one search.
const maxQueryTerms = 64

// parsedQuery is a search query reduced to what the search needs.
type parsedQuery struct {
	// terms are the distinct lower-case tokens to match, stop words dropped
	// (unless nothing else is left).
	terms []string
	// identifiers are the query's code-like words, as written, matched
	// exactly against chunk content for a ranking boost.
	identifiers []string
	// words are the query's words as written.
	words []string
}

// parseQuery tokenises q the way chunks are tokenised.
func parseQuery(q string) parsedQuery {
	var all, kept, idents []string
	seenAll, seenKept, seenIdent := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var raw []string
	words(q, func(w string) {
		raw = append(raw, w)
		if isCodeLike(w) && !seenIdent[w] && len(w) <= maxTokenLen {
			seenIdent[w] = true
			idents = append(idents, w)
		}
		for _, t := range identifierTokens(w) {
			if !seenAll[t] {
				seenAll[t] = true
				all = append(all, t)
			}
			if !stopWords[t] && !seenKept[t] {
				seenKept[t] = true
				kept = append(kept, t)
			}
		}
	})
	if len(kept) == 0 {
		kept = all
	}
	if len(kept) > maxQueryTerms {
		kept = kept[:maxQueryTerms]
	}
	if len(idents) > maxQueryTerms {
		idents = idents[:maxQueryTerms]
	}
	return parsedQuery{terms: kept, identifiers: idents, words: raw}
}

// isCodeLike reports whether a word looks like an identifier rather than
// prose: it mixes case after its first letter, or holds '_' or a digit
// next to letters.
func isCodeLike(w string) bool {
	if len(w) < 3 {
		return false
	}
	hasLetter, hasMark := false, false
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case isLower(c):
			hasLetter = true
		case isUpper(c):
			hasLetter = true
			if i > 0 {
				hasMark = true
			}
		case c == '_' || isDigit(c):
			hasMark = true
		}
	}
	return hasLetter && hasMark
}

// tsQuery joins terms into an OR text-search query. Terms are already
// [a-z0-9]; anything else is removed again here so that the query text can
// never carry operators.
func tsQuery(terms []string) string {
	clean := make([]string, 0, len(terms))
	for _, t := range terms {
		t = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
				return r
			}
			return -1
		}, t)
		if t != "" {
			clean = append(clean, t)
		}
	}
	return strings.Join(clean, " | ")
}

// questionWords frame a request for a definition ("where is X defined")
// without naming what is looked for.
var questionWords = map[string]bool{
	"defined": true, "define": true, "defines": true, "definition": true, "declared": true, "declaration": true,
	"located": true, "location": true, "implemented": true, "implementation": true, "function": true,
	"method": true, "type": true, "struct": true, "class": true, "code": true, "symbol": true,
}

// maxNavigationalWords bounds the content words of a query that names a
// thing to find rather than describing it.
const maxNavigationalWords = 3

// navigational reports whether the query names what it looks for (at most
// a few words besides stop and question words), so that definitions of its
// words are lifted; longer queries describe, and the identifiers they
// mention are context.
func (pq parsedQuery) navigational() bool {
	n := 0
	for _, w := range pq.words {
		lw := strings.ToLower(w)
		if !stopWords[lw] && !questionWords[lw] {
			n++
		}
	}
	return n <= maxNavigationalWords
}

package librarian

import "strings"

// Lexical stemming. The database's text search runs with the 'simple'
// configuration, which does not stem: "configured" would never match a
// chunk that says "config". Rather than a language configuration (whose
// stems differ from the term filters' and which knows nothing of the
// abbreviations code uses), chunks carry the stem of each token beside the
// token itself (tokenText), and a query term matches either (termGroups).
// Indexes written before stems existed still match the raw words.

// stemAliases map a stem to the abbreviation code spells it with, so that
// the prose word and the identifier part meet.
var stemAliases = map[string]string{
	"configur": "config", "configuration": "config", "initializ": "init", "initialis": "init",
	"authenticat": "auth", "authentic": "auth", "connection": "conn", "argument": "arg",
	"parameter": "param", "messag": "msg", "environment": "env", "directory": "dir", "directori": "dir",
	"repository": "repo", "repositori": "repo", "databas": "db", "transaction": "tx", "statement": "stmt",
	"request": "req", "respons": "resp", "context": "ctx", "specification": "spec", "temporary": "tmp",
	"allocat": "alloc", "information": "info", "implementation": "impl", "execut": "exec",
}

// minStemLen is the shortest stem a suffix may leave: "uses" stays.
const minStemLen = 3

// lexStem reduces a lower-case token to the form its inflections share:
// "parses", "parsed", "parsing" and "parse" give "pars"; "configured",
// "configuration" and "config" give "config". Tokens with digits and short
// tokens are returned as they are.
func lexStem(w string) string {
	if len(w) <= minStemLen || strings.ContainsAny(w, "0123456789_") {
		return w
	}
	if a, ok := stemAliases[w]; ok {
		return a
	}
	s := stripSuffix(w)
	if len(s) > minStemLen+1 && strings.HasSuffix(s, "e") {
		s = s[:len(s)-1]
	}
	if a, ok := stemAliases[s]; ok {
		return a
	}
	return s
}

// stripSuffix removes one inflectional suffix.
func stripSuffix(w string) string {
	cut := func(suf, with string) (string, bool) {
		if strings.HasSuffix(w, suf) && len(w)-len(suf)+len(with) >= minStemLen {
			return w[:len(w)-len(suf)] + with, true
		}
		return w, false
	}
	for _, r := range []struct{ suf, with string }{
		{"ations", ""}, {"ation", ""}, {"ings", ""}, {"ing", ""}, {"ies", "y"}, {"ied", "y"},
		{"sses", "ss"}, {"shes", "sh"}, {"ches", "ch"}, {"xes", "x"}, {"ed", ""},
	} {
		if s, ok := cut(r.suf, r.with); ok {
			return s
		}
	}
	if strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is") {
		if s, ok := cut("s", ""); ok {
			return s
		}
	}
	return w
}

// termGroups pairs each query term with its stem when they differ: a chunk
// matches the term when it holds either.
func termGroups(terms []string) [][]string {
	out := make([][]string, 0, len(terms))
	for _, t := range cleanTerms(terms) {
		if s := lexStem(t); s != t {
			out = append(out, []string{t, s})
			continue
		}
		out = append(out, []string{t})
	}
	return out
}

// groupQuery is the text-search query matching every group (and) or any
// (or); terms are already [a-z0-9_].
func groupQuery(groups [][]string, and bool) string {
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		if len(g) == 1 {
			parts = append(parts, g[0])
			continue
		}
		parts = append(parts, "("+strings.Join(g, " | ")+")")
	}
	if and {
		return strings.Join(parts, " & ")
	}
	return strings.Join(parts, " | ")
}

package librarian

import (
	"strings"
	"time"
)

// intent is what a query is after (F-24); it sets how long an answer stays
// in the intent cache.
type intent string

const (
	intentLocate  intent = "locate"
	intentPattern intent = "pattern"
	intentExplain intent = "explain"
	intentGeneral intent = "general"
)

// intentTTLs are the cache lifetimes of F-24. A locate answer (where is X
// defined?) has none there: it lives until a re-index of a searched
// repository deletes it. It still gets a day, so that answers made
// unreachable otherwise (a repository added to the tenant changes the key
// of tenant-wide searches) do not stay in Redis for ever. The general
// lifetime is -librarian.cache-ttl.
var intentTTLs = map[intent]time.Duration{
	intentLocate:  24 * time.Hour,
	intentPattern: 60 * time.Minute,
	intentExplain: 30 * time.Minute,
	intentGeneral: 15 * time.Minute,
}

// Words that mark a pattern or explanation question.
var (
	patternWords = map[string]bool{"pattern": true, "patterns": true, "example": true, "examples": true,
		"idiom": true, "idioms": true, "convention": true, "conventions": true, "usage": true, "usages": true, "typically": true}
	explainWords = map[string]bool{"explain": true, "explains": true, "why": true, "how": true, "understand": true,
		"works": true, "purpose": true, "meaning": true}
)

// classifyIntent names a query's intent when the caller did not: a query
// that names something locates it, one asking for examples or conventions
// looks for a pattern, one asking how or why wants an explanation, and the
// rest is general.
func classifyIntent(query string) intent {
	var pattern, explain bool
	words(strings.ToLower(query), func(w string) {
		pattern = pattern || patternWords[w]
		explain = explain || explainWords[w]
	})
	switch {
	case pattern:
		return intentPattern
	case explain:
		return intentExplain
	case parseQuery(query).navigational():
		return intentLocate
	}
	return intentGeneral
}

// cacheTTL is how long an answer to sr stays cached (a re-index of a
// searched repository deletes it earlier).
func (s *Service) cacheTTL(sr searchRequest) time.Duration {
	in := sr.intent
	if in == "" {
		in = classifyIntent(sr.query)
	}
	if in == intentGeneral {
		return s.cfg.CacheTTL
	}
	return intentTTLs[in]
}

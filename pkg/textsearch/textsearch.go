// Package textsearch holds the pieces the PostgreSQL full-text searches of the
// knowledge services share: any-word fallback queries, snippet clean-up, page
// sizes and keyset page tokens.
package textsearch

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/pgstore"
)

// HeadlineOptions make ts_headline return short plain-text fragments with
// matches marked « ».
const HeadlineOptions = `StartSel="«", StopSel="»", MinWords=15, MaxWords=40, ShortWord=3, MaxFragments=2, FragmentDelimiter=" … "`

var wordPattern = regexp.MustCompile(`[\p{L}\p{N}]+`)

// QueryProblem says what is wrong with a search query (trimmed) of at
// most maxBytes: missing, too long, or not UTF-8 without NUL; "" when
// nothing is.
func QueryProblem(query string, maxBytes int) string {
	switch {
	case query == "":
		return "required"
	case len(query) > maxBytes:
		return "at most " + strconv.Itoa(maxBytes) + " bytes"
	case strings.ContainsRune(query, 0) || !utf8.ValidString(query):
		return "must be valid UTF-8 without NUL characters"
	}
	return ""
}

// OrQuery turns free text into a to_tsquery expression matching any of its
// words, or "" when the text has fewer than two words (then it would find
// nothing the all-words query did not).
func OrQuery(text string) string {
	words := wordPattern.FindAllString(text, 64)
	if len(words) < 2 {
		return ""
	}
	return strings.Join(words, " | ")
}

// HasWords reports whether text has a letter or digit to search for.
func HasWords(text string) bool { return wordPattern.MatchString(text) }

// CleanSnippet collapses whitespace and bounds the snippet to max characters.
func CleanSnippet(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:max-1])) + "…"
}

// PageSize applies the default to n <= 0 and caps it at max.
func PageSize(n int32, def, max int) int {
	switch {
	case n <= 0:
		return def
	case int(n) > max:
		return max
	}
	return int(n)
}

// Cursor is the keyset position after the last row of a page.
type Cursor struct {
	Created time.Time
	ID      string
}

// ErrBadToken reports a page token this package did not make.
var ErrBadToken = errors.New("invalid page token")

// Token encodes the cursor as an opaque page token.
func (c Cursor) Token() string {
	raw := strconv.FormatInt(c.Created.UnixMicro(), 10) + "/" + c.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseToken decodes a page token; "" means the first page (nil cursor).
func ParseToken(tok string) (*Cursor, error) {
	if tok == "" {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, ErrBadToken
	}
	ts, id, ok := strings.Cut(string(raw), "/")
	if !ok || !ids.Valid(id) {
		return nil, ErrBadToken
	}
	micros, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, ErrBadToken
	}
	t, ok := pgstore.TokenTime(micros)
	if !ok {
		return nil, ErrBadToken
	}
	return &Cursor{Created: t, ID: id}, nil
}

// Clip keeps the head of s within n bytes, marking the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " …"
	return Truncate(s, n-len(mark)) + mark
}

// Truncate bounds s to n bytes without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

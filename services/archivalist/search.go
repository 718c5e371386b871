package archivalist

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sylk.dev/sylk/pkg/ids"
)

// headlineOptions make ts_headline return short plain-text fragments with
// matches marked « ».
const headlineOptions = `StartSel="«", StopSel="»", MinWords=15, MaxWords=40, ShortWord=3, MaxFragments=2, FragmentDelimiter=" … "`

var wordPattern = regexp.MustCompile(`[\p{L}\p{N}]+`)

// orQuery turns free text into a to_tsquery expression matching any of its
// words, or "" when the text has fewer than two words (then it would find
// nothing the AND query did not).
func orQuery(text string) string {
	words := wordPattern.FindAllString(text, 64)
	if len(words) < 2 {
		return ""
	}
	return strings.Join(words, " | ")
}

// cleanSnippet collapses whitespace and bounds the snippet to SnippetChars.
func cleanSnippet(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= SnippetChars {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:SnippetChars-1])) + "…"
}

// pageSize applies the default and the cap.
func pageSize(n int32) int {
	switch {
	case n <= 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	}
	return int(n)
}

// cursor is the keyset position after the last row of a page.
type cursor struct {
	created time.Time
	id      string
}

var errBadToken = errors.New("invalid page token")

func (c cursor) token() string {
	raw := strconv.FormatInt(c.created.UnixMicro(), 10) + "/" + c.id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func parseToken(tok string) (*cursor, error) {
	if tok == "" {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, errBadToken
	}
	ts, id, ok := strings.Cut(string(raw), "/")
	if !ok || !ids.Valid(id) {
		return nil, errBadToken
	}
	micros, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, errBadToken
	}
	return &cursor{created: time.UnixMicro(micros).UTC(), id: id}, nil
}

// truncate bounds s to n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Package expand substitutes variables in configuration templates.
package expand

import "strings"

// Expand replaces $NAME and ${NAME} in s with the value lookup gives for
// NAME ("" when it has none). $$ is a literal $; a $ followed by anything
// else is kept as it is.
func Expand(s string, lookup func(name string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteString(value(lookup, s[i+2:i+2+end]))
			i += 2 + end
		case isNameByte(next):
			j := i + 1
			for j < len(s) && isNameByte(s[j]) {
				j++
			}
			b.WriteString(value(lookup, s[i+1:j]))
			i = j - 1
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func value(lookup func(string) (string, bool), name string) string {
	v, _ := lookup(name)
	return v
}

func isNameByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

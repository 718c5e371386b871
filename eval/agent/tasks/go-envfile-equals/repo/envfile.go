// Package envfile reads KEY=VALUE files such as .env.
package envfile

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Parse reads KEY=VALUE lines. Blank lines and lines starting with # are
// skipped; a value may be wrapped in single or double quotes.
func Parse(r io.Reader) (map[string]string, error) {
	vars := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "=")
		if len(parts) < 2 {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		key := strings.TrimSpace(parts[0])
		if key == "" {
			return nil, fmt.Errorf("line %d: empty key", n)
		}
		vars[key] = unquote(strings.TrimSpace(parts[1]))
	}
	return vars, sc.Err()
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

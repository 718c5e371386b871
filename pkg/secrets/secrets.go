// Package secrets finds secrets in text (keys, tokens, passwords, private
// keys, credentials in URLs) and redacts them, wherever text leaves for a
// store, an index, an event or a model.
package secrets

import (
	"regexp"
	"strings"
)

// privateKeyPattern finds a private key block, which spans lines.
var privateKeyPattern = regexp.MustCompile(`(?i)-----BEGIN\s+(?:RSA|DSA|EC|OPENSSH|PGP)?\s*PRIVATE KEY-----[\s\S]*?(?:-----END\s+(?:RSA|DSA|EC|OPENSSH|PGP)?\s*PRIVATE KEY-----|\z)`)

// secretPatterns find secrets within one line; each whole match is
// replaced by Redacted before the text is stored or embedded.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(?:aws_access_key_id|aws_secret)['":\s]*[=:]\s*['"]?[A-Z0-9]{16,}`),
	regexp.MustCompile(`ghp_[a-zA-Z0-9]{36}`),
	regexp.MustCompile(`sk-ant-[a-zA-Z0-9\-]{80,}`),
	regexp.MustCompile(`sk-[a-zA-Z0-9]{48}`),
	regexp.MustCompile(`(?i)(?:mongodb|postgres|mysql|redis)(?:\+srv)?://[^\s:/@]+:[^\s@]+@`),
	regexp.MustCompile(`(?i)(?:api[_-]?key|apikey)['":\s]*[=:]\s*['"]?[a-zA-Z0-9_\-]{20,}`),
	regexp.MustCompile(`(?i)(?:secret|password|passwd|pwd)['":\s]*[=:]\s*['"][^\s'"]{8,}['"]?`),
	regexp.MustCompile(`(?i)(?:bearer|token)['":\s]*[=:]\s*['"]?[a-zA-Z0-9_\-\.]{20,}`),
	regexp.MustCompile(`(?i)(?:key|secret|token|credential)['":\s]*[=:]\s*['"]?[A-Za-z0-9+/=]{40,}`),
}

// Redacted replaces a secret.
const Redacted = "[REDACTED]"

// secretHints are cheap substrings one of which every line pattern needs;
// only lines holding one, and '=' or ':', are matched against the patterns.
var secretHints = []string{"ghp_", "sk-", "://", "key", "KEY", "Key",
	"secret", "SECRET", "Secret", "passw", "PASSW", "Passw", "pwd", "PWD",
	"token", "TOKEN", "Token", "bearer", "Bearer", "BEARER", "credential", "CREDENTIAL", "Credential", "aws_", "AWS_"}

func hinted(line string) bool {
	if !strings.ContainsAny(line, "=:") {
		return false
	}
	for _, h := range secretHints {
		if strings.Contains(line, h) {
			return true
		}
	}
	return false
}

// Redact replaces every secret in text, keeping its line structure so
// that line numbers stay true.
func Redact(text string) string {
	if strings.Contains(text, "PRIVATE KEY") {
		text = privateKeyPattern.ReplaceAllStringFunc(text, func(m string) string {
			return Redacted + strings.Repeat("\n", strings.Count(m, "\n"))
		})
	}
	var b strings.Builder
	changed := false
	start := 0
	for start <= len(text) {
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		line := text[start:end]
		if hinted(line) {
			orig := line
			for _, re := range secretPatterns {
				line = re.ReplaceAllString(line, Redacted)
			}
			if line != orig && !changed {
				changed = true
				b.Grow(len(text))
				b.WriteString(text[:start])
			}
		}
		if changed {
			b.WriteString(line)
			if end < len(text) {
				b.WriteByte('\n')
			}
		}
		start = end + 1
	}
	if !changed {
		return text
	}
	return b.String()
}

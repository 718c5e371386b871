package secrets

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The benchmarks compare the detector with the hand-written pattern list it
// replaced (kept below, for the comparison only) on a corpus of real Go
// files: this repository's own sources. Run with
//
//	go test -run '^$' -bench . -benchtime 3x ./pkg/secrets
//
// and read MB/s.

// goCorpus reads up to limit bytes of the repository's .go files, one
// string per file, as the index reads them.
func goCorpus(tb testing.TB, limit int) ([]string, int) {
	tb.Helper()
	var files []string
	total := 0
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil || total >= limit {
			return filepath.SkipDir
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "../.." || d.Name() == "gen") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, string(b))
		total += len(b)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files, total
}

func benchCorpus(b *testing.B, redact func(string) string) {
	files, total := goCorpus(b, 8<<20)
	b.SetBytes(int64(total))
	b.ResetTimer()
	for range b.N {
		for _, f := range files {
			redact(f)
		}
	}
}

func BenchmarkRedactGoCorpus(b *testing.B) {
	shared() // build the rules outside the measurement
	benchCorpus(b, Scrub)
}

func BenchmarkLegacyRedactGoCorpus(b *testing.B) { benchCorpus(b, legacyRedact) }

// legacyPrivateKey finds a private key block, which spans lines.
var legacyPrivateKey = regexp.MustCompile(`(?i)-----BEGIN\s+(?:RSA|DSA|EC|OPENSSH|PGP)?\s*PRIVATE KEY-----[\s\S]*?(?:-----END\s+(?:RSA|DSA|EC|OPENSSH|PGP)?\s*PRIVATE KEY-----|\z)`)

// legacyPatterns find secrets within one line; each whole match is
// replaced by legacyRedacted before the text is stored or embedded.
var legacyPatterns = []*regexp.Regexp{
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

// legacyRedacted replaces a secret.
const legacyRedacted = "[REDACTED]"

// legacyHints are cheap substrings one of which every line pattern needs;
// only lines holding one, and '=' or ':', are matched against the patterns.
var legacyHints = []string{"ghp_", "sk-", "://", "key", "KEY", "Key",
	"secret", "SECRET", "Secret", "passw", "PASSW", "Passw", "pwd", "PWD",
	"token", "TOKEN", "Token", "bearer", "Bearer", "BEARER", "credential", "CREDENTIAL", "Credential", "aws_", "AWS_"}

func legacyHinted(line string) bool {
	if !strings.ContainsAny(line, "=:") {
		return false
	}
	for _, h := range legacyHints {
		if strings.Contains(line, h) {
			return true
		}
	}
	return false
}

// Redact replaces every secret in text, keeping its line structure so
// that line numbers stay true.
func legacyRedact(text string) string {
	if strings.Contains(text, "PRIVATE KEY") {
		text = legacyPrivateKey.ReplaceAllStringFunc(text, func(m string) string {
			return legacyRedacted + strings.Repeat("\n", strings.Count(m, "\n"))
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
		if legacyHinted(line) {
			orig := line
			for _, re := range legacyPatterns {
				line = re.ReplaceAllString(line, legacyRedacted)
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

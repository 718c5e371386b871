package review

import (
	"path"
	"regexp"
	"slices"
	"strings"

	"sylk.dev/sylk/pkg/secrets"
)

// The security registry (spec P-09): a change to a matching path, or whose
// added lines match a content rule, is security-sensitive. Such a file is
// never excluded, whatever the exclusion rules say, and is the last one
// truncation drops.

// rule is one entry of the registry.
type rule struct {
	re        *regexp.Regexp
	category  string
	rationale string
}

func newRule(expr, category, rationale string) rule {
	return rule{re: regexp.MustCompile(expr), category: category, rationale: rationale}
}

// pathRules are matched against each segment of a path.
var pathRules = []rule{
	newRule(`(?i)auth`, "authentication", "authentication and authorization logic"),
	newRule(`(?i)crypto`, "cryptography", "cryptographic operations"),
	newRule(`(?i)secret`, "secrets", "secret management"),
	newRule(`(?i)permission`, "authorization", "permission and role logic"),
	newRule(`(?i)(^|[^a-z])acl([^a-z]|$)`, "authorization", "access control lists"),
	newRule(`(?i)\.pem$`, "key material", "certificates"),
	newRule(`(?i)\.key$`, "key material", "private keys"),
	newRule(`(?i)^\.env(\..*)?$`, "secrets", "environment files"),
	newRule(`^\.github$`, "ci", "CI workflows and actions run code"),
	newRule(`^workflows$`, "ci", "CI workflows run code"),
	newRule(`^Jenkinsfile$`, "ci", "CI pipelines run code"),
	newRule(`^\.gitlab-ci\.ya?ml$`, "ci", "CI pipelines run code"),
	newRule(`^Makefile$`, "build", "the build runs code"),
	newRule(`(?i)^Dockerfile`, "container", "container builds: code execution and base images"),
	newRule(`(?i)compose.*\.ya?ml$`, "container", "container orchestration"),
	newRule(`(?i)terraform`, "infrastructure", "infrastructure definitions"),
	newRule(`\.tf$`, "infrastructure", "infrastructure definitions"),
	newRule(`(?i)^helm$`, "infrastructure", "chart templates"),
	newRule(`(?i)^(k8s|kubernetes)$`, "infrastructure", "cluster manifests"),
	newRule(`^package-lock\.json$`, "dependencies", "dependency lock file (supply chain)"),
	newRule(`^yarn\.lock$`, "dependencies", "dependency lock file (supply chain)"),
	newRule(`^pnpm-lock\.yaml$`, "dependencies", "dependency lock file (supply chain)"),
	newRule(`^go\.sum$`, "dependencies", "module checksums (supply chain)"),
	newRule(`^Gemfile(\.lock)?$`, "dependencies", "dependency manifest (supply chain)"),
	newRule(`^poetry\.lock$`, "dependencies", "dependency lock file (supply chain)"),
	newRule(`^Cargo\.lock$`, "dependencies", "dependency lock file (supply chain)"),
	newRule(`^package\.json$`, "dependencies", "scripts and dependencies"),
	newRule(`^go\.mod$`, "dependencies", "module dependencies"),
	newRule(`^SECURITY\.md$`, "policy", "security disclosure policy"),
	newRule(`^CODEOWNERS$`, "policy", "required reviewers"),
}

// contentRules are matched against the lines a change adds.
var contentRules = []rule{
	newRule(`-----BEGIN [A-Z ]*PRIVATE KEY-----`, "key material", "a private key in the change"),
	newRule(`(?i)\b(password|passwd|api[_-]?key|access[_-]?token|client[_-]?secret)\b`, "secrets", "handles credentials"),
	newRule(`\bexec\.Command(Context)?\(|\bsubprocess\.|\bchild_process\b|\bos\.system\(|Runtime\.getRuntime\(\)\.exec`, "command execution", "runs commands"),
	newRule(`(?i)\b(eval|new Function)\s*\(`, "code execution", "evaluates code"),
	newRule(`\bInsecureSkipVerify\b|\bverify\s*=\s*False\b|rejectUnauthorized:\s*false`, "transport security", "turns off certificate checks"),
	newRule(`(?i)"(SELECT|INSERT|UPDATE|DELETE)\b[^"]*"\s*\+`, "injection", "builds SQL from strings"),
}

// Sensitive says whether path is security-sensitive (spec P-09), and why:
// its category and the rule's rationale.
func Sensitive(p string) (category, rationale string, ok bool) {
	for _, seg := range strings.Split(path.Clean(strings.ReplaceAll(p, `\`, "/")), "/") {
		for _, r := range pathRules {
			if r.re.MatchString(seg) {
				return r.category, r.rationale, true
			}
		}
	}
	return "", "", false
}

// sensitiveContent says whether text (a change's added lines) is
// security-sensitive, and why.
func sensitiveContent(text string) (category, rationale string, ok bool) {
	if text == "" {
		return "", "", false
	}
	if secrets.Contains(text) {
		return "secrets", "a credential in the change", true
	}
	for _, r := range contentRules {
		if r.re.MatchString(text) {
			return r.category, r.rationale, true
		}
	}
	return "", "", false
}

// Tiers of the two-tier exclusion (spec P-04), adapted to any repository:
// tier 1 leaves a file's content out (its name, stats and reason stay),
// tier 2 keeps its first hunk only.
const (
	tierFull = iota
	tierSummary
	tierExcluded
)

// Reasons a file is left out (tier 1).
const (
	reasonBinary    = "binary"
	reasonGenerated = "generated"
	reasonVendored  = "vendored"
	reasonLock      = "lock file"
	reasonMinified  = "minified"
	reasonAsset     = "image or font"
	reasonPattern   = "excluded by pattern"
)

var (
	vendoredDir  = regexp.MustCompile(`(^|/)(vendor|node_modules|third_party|bower_components|\.yarn)/`)
	generatedRe  = regexp.MustCompile(`(\.pb\.go|\.pb\.gw\.go|_grpc\.pb\.go|\.pb\.(cc|h)|_pb2(_grpc)?\.py|\.g\.dart|_generated\.[a-z]+|\.generated\.[a-z]+|\.gen\.go)$`)
	generatedDir = regexp.MustCompile(`(^|/)(gen|generated|dist)/`)
	generatedTag = regexp.MustCompile(`(?i)(code generated .* do not edit|@generated|auto-generated|autogenerated file)`)
	lockRe       = regexp.MustCompile(`(?i)(\.lock|-lock\.json|-lock\.yaml|\.lockb)$`)
	minifiedRe   = regexp.MustCompile(`(?i)\.min\.(js|css|mjs)$|\.map$`)
	assetExts    = []string{".png", ".jpg", ".jpeg", ".gif", ".ico", ".webp", ".bmp", ".pdf", ".woff", ".woff2", ".ttf", ".eot", ".otf"}
	summaryExts  = []string{".md", ".markdown", ".rst", ".txt", ".adoc", ".csv", ".tsv", ".svg"}
	summaryDir   = regexp.MustCompile(`(^|/)(testdata|fixtures|__snapshots__|golden)/|\.(golden|snap)$`)
)

// minifiedLine is the line length past which added code reads as minified.
const minifiedLine = 1000

// tierOf is the tier of a file that is not security-sensitive, and for
// tier 1 the reason.
func tierOf(f File, patterns []string) (int, string) {
	p := f.Path
	ext := strings.ToLower(path.Ext(p))
	switch {
	case f.Binary:
		return tierExcluded, reasonBinary
	case matchAny(p, patterns):
		return tierExcluded, reasonPattern
	case vendoredDir.MatchString(p):
		return tierExcluded, reasonVendored
	case generatedRe.MatchString(p) || generatedDir.MatchString(p) || generatedTag.MatchString(firstLines(f, 5)):
		return tierExcluded, reasonGenerated
	case lockRe.MatchString(p):
		return tierExcluded, reasonLock
	case minifiedRe.MatchString(p) || longestAdded(f) > minifiedLine:
		return tierExcluded, reasonMinified
	case slices.Contains(assetExts, ext):
		return tierExcluded, reasonAsset
	case slices.Contains(summaryExts, ext) || summaryDir.MatchString(p):
		return tierSummary, ""
	}
	return tierFull, ""
}

// firstLines is the first n lines the file's first hunk adds or keeps.
func firstLines(f File, n int) string {
	if len(f.Hunks) == 0 {
		return ""
	}
	var b strings.Builder
	for i, l := range f.Hunks[0].Lines {
		if i == n {
			break
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func longestAdded(f File) int {
	n := 0
	for _, h := range f.Hunks {
		for _, l := range h.Lines {
			if strings.HasPrefix(l, "+") {
				n = max(n, len(l))
			}
		}
	}
	return n
}

// matchAny says whether p matches one of the exclusion patterns (spec
// P-11): "*.ext" matches a suffix, "dir/*" a prefix, "*a*b*" the parts in
// order, anything else the whole path. There is no "**" and no negation;
// patterns only add exclusions.
func matchAny(p string, patterns []string) bool {
	for _, pat := range patterns {
		if matchPattern(p, pat) {
			return true
		}
	}
	return false
}

func matchPattern(p, pat string) bool {
	switch {
	case pat == "":
		return false
	case strings.HasPrefix(pat, "*") && strings.HasSuffix(pat, "*") && len(pat) > 1:
		rest := p
		for _, part := range strings.Split(strings.Trim(pat, "*"), "*") {
			i := strings.Index(rest, part)
			if i < 0 {
				return false
			}
			rest = rest[i+len(part):]
		}
		return true
	case strings.HasPrefix(pat, "*"):
		return strings.HasSuffix(p, pat[1:])
	case strings.HasSuffix(pat, "/*"):
		return strings.HasPrefix(p, strings.TrimSuffix(pat, "*"))
	}
	return p == pat
}

// isTest says whether p is a test file.
func isTest(p string) bool {
	base := path.Base(p)
	return strings.HasSuffix(base, "_test.go") || strings.HasPrefix(base, "test_") || strings.HasSuffix(strings.TrimSuffix(base, path.Ext(base)), "_test") ||
		strings.Contains(base, ".test.") || strings.Contains(base, ".spec.") || strings.Contains(p, "/__tests__/")
}

// testSubject is the name a test file tests ("calc" for calc_test.go,
// test_calc.py, calc.test.ts).
func testSubject(p string) string {
	base := path.Base(p)
	base = strings.TrimSuffix(base, path.Ext(base))
	for _, cut := range []string{"_test", ".test", ".spec"} {
		base = strings.TrimSuffix(base, cut)
	}
	return strings.TrimPrefix(base, "test_")
}

// adjacentTest says whether p is a test of one of the changed files
// (spec P-06: such tests are kept before larger changes).
func adjacentTest(p string, changed []string) bool {
	if !isTest(p) {
		return false
	}
	subject := testSubject(p)
	for _, c := range changed {
		if c != p && !isTest(c) && strings.TrimSuffix(path.Base(c), path.Ext(c)) == subject {
			return true
		}
	}
	return false
}

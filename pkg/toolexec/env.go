package toolexec

import (
	"path/filepath"
	"slices"
	"strings"
)

// SecretPatterns are the environment name globs never passed to a tool
// (spec C-24).
var SecretPatterns = []string{
	"*_API_KEY", "*_SECRET", "*_TOKEN", "*_PASSWORD", "AWS_*",
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GITHUB_TOKEN", "NPM_TOKEN",
}

// IsSecretName reports whether an environment variable name matches one of
// the secret patterns or one of extra. Names are compared upper-cased.
func IsSecretName(name string, extra []string) bool {
	up := strings.ToUpper(name)
	for _, p := range slices.Concat(SecretPatterns, extra) {
		if ok, _ := filepath.Match(strings.ToUpper(p), up); ok {
			return true
		}
	}
	return false
}

// StripEnv returns base without the variables whose names are secret, then
// add appended (add wins over base for the same name, and is not filtered:
// the caller chose it).
func StripEnv(base []string, extra []string, add map[string]string) []string {
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || IsSecretName(name, extra) {
			continue
		}
		if _, overridden := add[name]; overridden {
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+add[k])
	}
	return out
}

package toolexec

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// SecretPatterns are the environment name globs never passed to a tool
// (spec C-24).
// ServiceSettingPatterns are always among them, so no configuration can
// pass those on.
var SecretPatterns = slices.Concat([]string{
	"*_API_KEY", "*_SECRET", "*_TOKEN", "*_PASSWORD", "AWS_*",
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GITHUB_TOKEN", "NPM_TOKEN",
	"*_CREDENTIALS", "*_PRIVATE_KEY",
}, ServiceSettingPatterns)

// ServiceSettingPatterns are the environment name globs of the services'
// own settings and of the stores' clients, which read their passwords and
// addresses from the environment (PGPASSWORD, PGPASSFILE, REDISCLI_AUTH,
// ...): no program a service runs needs them, whoever's it is.
var ServiceSettingPatterns = []string{
	"SYLK_*", "*_DSN",
	// libpq's (and pgx's) connection and credential variables.
	"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGPASSFILE",
	"PGSERVICE", "PGSERVICEFILE", "PGSSLKEY", "PGSSLCERT", "PGSSLROOTCERT", "PGOPTIONS",
	"*DATABASE_URL", "POSTGRES*_URL", "REDIS_*", "REDISCLI_AUTH", "NATS_*", "NKEYS_PATH",
}

var serviceSettings = compileSecretPatterns(ServiceSettingPatterns)

// WithoutServiceSettings returns env without the variables named by
// ServiceSettingPatterns: the environment of a program that keeps the
// rest (git fetching from a remote with this process's credentials).
func WithoutServiceSettings(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return serviceSettings.match(strings.ToUpper(name))
	})
}

// IsSecretName reports whether an environment variable name matches one of
// the secret patterns or one of extra. Names are compared upper-cased.
func IsSecretName(name string, extra []string) bool {
	return matcherFor(extra).match(strings.ToUpper(name))
}

// secretMatcher is a compiled set of secret patterns: the common shapes
// ("*_TOKEN", "AWS_*", a plain name) are checked as suffix, prefix or exact
// matches with the same meaning as filepath.Match (a '*' does not cross a
// '/'); any other glob goes through filepath.Match.
type secretMatcher struct {
	exact    map[string]struct{}
	prefixes []string
	suffixes []string
	globs    []string
}

func compileSecretPatterns(patterns []string) *secretMatcher {
	m := &secretMatcher{exact: map[string]struct{}{}}
	for _, p := range patterns {
		p = strings.ToUpper(p)
		rest := p
		switch {
		case strings.HasPrefix(p, "*"):
			rest = p[1:]
		case strings.HasSuffix(p, "*"):
			rest = p[:len(p)-1]
		}
		if strings.ContainsAny(rest, `*?[\`) {
			m.globs = append(m.globs, p)
			continue
		}
		switch {
		case strings.HasPrefix(p, "*"):
			m.suffixes = append(m.suffixes, rest)
		case strings.HasSuffix(p, "*"):
			m.prefixes = append(m.prefixes, rest)
		default:
			m.exact[p] = struct{}{}
		}
	}
	return m
}

// match reports whether the upper-cased name matches a pattern.
func (m *secretMatcher) match(up string) bool {
	if _, ok := m.exact[up]; ok {
		return true
	}
	for _, s := range m.suffixes {
		if strings.HasSuffix(up, s) && !strings.Contains(up[:len(up)-len(s)], "/") {
			return true
		}
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(up, p) && !strings.Contains(up[len(p):], "/") {
			return true
		}
	}
	for _, g := range m.globs {
		if ok, _ := filepath.Match(g, up); ok {
			return true
		}
	}
	return false
}

// matchers caches the compiled pattern set per list of extra patterns (a
// process uses one or two).
var matchers sync.Map // string -> *secretMatcher

func matcherFor(extra []string) *secretMatcher {
	key := strings.Join(extra, "\x00")
	if m, ok := matchers.Load(key); ok {
		return m.(*secretMatcher)
	}
	m, _ := matchers.LoadOrStore(key, compileSecretPatterns(slices.Concat(SecretPatterns, extra)))
	return m.(*secretMatcher)
}

// strippedBase remembers the last base environment and what was left of it
// once stripped: the process environment rarely changes, so most calls
// compare the base with the last one and reuse the result. A different
// base (or set of extra patterns) is stripped again.
var strippedBase struct {
	mu    sync.Mutex
	extra string
	base  []string
	kept  []string
}

// stripBase returns base without malformed entries and secret names. The
// result is shared: callers must not modify it.
func stripBase(base []string, extra []string) []string {
	key := strings.Join(extra, "\x00")
	c := &strippedBase
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base != nil && c.extra == key && slices.Equal(c.base, base) {
		return c.kept
	}
	m := matcherFor(extra)
	kept := make([]string, 0, len(base))
	for _, kv := range base {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || m.match(strings.ToUpper(name)) {
			continue
		}
		kept = append(kept, kv)
	}
	c.extra, c.base, c.kept = key, slices.Clone(base), kept
	return kept
}

// StripEnv returns base without the variables whose names are secret, then
// add appended (add wins over base for the same name, and is not filtered:
// the caller chose it).
func StripEnv(base []string, extra []string, add map[string]string) []string {
	kept := stripBase(base, extra)
	out := make([]string, 0, len(kept)+len(add))
	for _, kv := range kept {
		if len(add) > 0 {
			name, _, _ := strings.Cut(kv, "=")
			if _, overridden := add[name]; overridden {
				continue
			}
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

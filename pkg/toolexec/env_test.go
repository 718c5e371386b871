package toolexec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// globMatch is the reference: the patterns' meaning is filepath.Match on
// upper-cased names.
func globMatch(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := filepath.Match(strings.ToUpper(p), strings.ToUpper(name)); ok {
			return true
		}
	}
	return false
}

func TestSecretMatcherAgreesWithGlobs(t *testing.T) {
	t.Parallel()
	extras := [][]string{
		nil,
		{"SYLK_*", "*_DSN", "*_CREDENTIALS", "*_PRIVATE_KEY"},
		{"*", "A*B", "X?Y", "[QZ]_KEY", "[", `ESC\*`, "*MID*", "lower_*"},
	}
	names := []string{
		"PATH", "HOME", "OPENAI_API_KEY", "my_token", "TOKENIZER", "AWS_REGION", "aws_x", "AWS_", "AWS",
		"SYLK_X", "SYLK", "DB_DSN", "_DSN", "DSN", "A/B_TOKEN", "AWS_A/B", "AB", "AXXB", "XQY", "XY", "Q_KEY",
		"ESC*", "ESCX", "XMIDY", "LOWER_CASE", "lower_case", "GITHUB_TOKEN", "NPM_TOKEN", "a/b", "",
	}
	for _, extra := range extras {
		all := slices.Concat(SecretPatterns, extra)
		for _, n := range names {
			require.Equal(t, globMatch(n, all), IsSecretName(n, extra), "name %q, extra %q", n, extra)
		}
	}
}

func TestStripEnvFollowsTheBase(t *testing.T) {
	t.Parallel()
	extra := []string{"APP_*"}
	base := []string{"PATH=/bin", "MY_TOKEN=t", "APP_DB=d", "LANG=C", "=bad", "noequals"}
	want := []string{"PATH=/bin", "LANG=C"}
	require.Equal(t, want, StripEnv(base, extra, nil))
	require.Equal(t, want, StripEnv(base, extra, nil), "the remembered result is the same")

	// A changed base is stripped again, not served from the last one.
	changed := append(slices.Clone(base), "OTHER=1", "NEW_SECRET=s")
	require.Equal(t, []string{"PATH=/bin", "LANG=C", "OTHER=1"}, StripEnv(changed, extra, nil))
	changed[0] = "PATH=/usr/bin"
	require.Equal(t, []string{"PATH=/usr/bin", "LANG=C", "OTHER=1"}, StripEnv(changed, extra, nil))

	// Other extra patterns are applied, not the remembered ones.
	require.Equal(t, []string{"PATH=/bin", "APP_DB=d"}, StripEnv(base, []string{"LANG"}, nil))

	// add overrides and is appended sorted; the shared result is not changed.
	got := StripEnv(base, extra, map[string]string{"PATH": "/x", "B": "2", "A": "1"})
	require.Equal(t, []string{"LANG=C", "A=1", "B=2", "PATH=/x"}, got)
	got[0] = "LANG=changed"
	require.Equal(t, want, StripEnv(base, extra, nil))
}

func TestStripEnvSeesProcessEnvChanges(t *testing.T) {
	// Not parallel: it changes the process environment.
	t.Setenv("STRIP_TEST_VISIBLE", "v1")
	require.Contains(t, StripEnv(os.Environ(), nil, nil), "STRIP_TEST_VISIBLE=v1")
	t.Setenv("STRIP_TEST_VISIBLE", "v2")
	t.Setenv("STRIP_TEST_TOKEN", "secret")
	t.Setenv("SYLK_STRIP_TEST_SETTING", "s")
	env := StripEnv(os.Environ(), nil, nil)
	require.Contains(t, env, "STRIP_TEST_VISIBLE=v2")
	require.NotContains(t, strings.Join(env, "\n"), "STRIP_TEST_TOKEN")
	require.NotContains(t, strings.Join(env, "\n"), "SYLK_STRIP_TEST_SETTING", "the services' settings are always stripped")
}

func BenchmarkStripEnv(b *testing.B) {
	extra := DefaultConfig().ExtraSecretPatterns
	add := map[string]string{"HOME": "/w", "TMPDIR": "/w/.tmp"}
	for b.Loop() {
		_ = StripEnv(os.Environ(), extra, add)
	}
}

// The stores' clients read passwords and addresses from the environment:
// no tool gets them, and programs that keep the rest of the environment (a
// clone with the remote's credentials) do not get them either.
func TestServiceSettingsAreStripped(t *testing.T) {
	t.Parallel()
	base := []string{"PGPASSWORD=p", "PGPASSFILE=/x/.pgpass", "PGHOST=db", "DATABASE_URL=postgres://u:p@h/d",
		"TEST_DATABASE_URL=postgres://u:p@h/t", "POSTGRESQL_URL=postgres://u:p@h/d", "REDISCLI_AUTH=r",
		"REDIS_URL=redis://:p@h", "REDIS_ADDR=h:6379", "NATS_URL=nats://t@h", "NKEYS_PATH=/n", "SYLK_INTERNAL_KEY=k",
		"APP_DSN=d", "GITHUB_TOKEN=g", "GIT_ASKPASS=/bin/askpass", "PGTZ=UTC", "PGPLOT_DIR=/p", "PATH=/bin"}
	kept := []string{"GIT_ASKPASS=/bin/askpass", "PGTZ=UTC", "PGPLOT_DIR=/p", "PATH=/bin"}
	require.Equal(t, kept, StripEnv(base, nil, nil))
	require.Equal(t, append([]string{"GITHUB_TOKEN=g"}, kept...), WithoutServiceSettings(base))
}

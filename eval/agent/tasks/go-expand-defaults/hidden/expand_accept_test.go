package expand_test

import (
	"testing"

	"example.com/go-expand-defaults"
)

func TestAcceptDefaults(t *testing.T) {
	vars := map[string]string{"HOST": "db", "EMPTY": "", "PORT": "5432"}
	lookup := func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	for in, want := range map[string]string{
		"${HOST:-localhost}:${MISSING:-8080}": "db:8080",
		"${EMPTY:-fallback}":                  "fallback",
		"${GREETING:-hello world}!":           "hello world!",
		"${NOTHING:-}x":                       "x",
		"$HOST ${PORT} $$":                    "db 5432 $",
		"${PORT:-1}":                          "5432",
	} {
		if got := expand.Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q; want %q", in, got, want)
		}
	}
}

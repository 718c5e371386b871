package expand

import "testing"

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestExpand(t *testing.T) {
	lookup := env(map[string]string{"HOST": "db", "PORT": "5432"})
	for in, want := range map[string]string{
		"$HOST:$PORT":        "db:5432",
		"${HOST}_x":          "db_x",
		"cost: $$5":          "cost: $5",
		"$MISSING-":          "-",
		"50$":                "50$",
		"${UNCLOSED":         "${UNCLOSED",
		"https://${HOST}/ok": "https://db/ok",
	} {
		if got := Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q; want %q", in, got, want)
		}
	}
}

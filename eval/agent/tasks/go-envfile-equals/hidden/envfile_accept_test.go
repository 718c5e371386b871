package envfile_test

import (
	"strings"
	"testing"

	"example.com/go-envfile-equals"
)

func TestAcceptValuesKeepEquals(t *testing.T) {
	in := strings.Join([]string{
		"DATABASE_URL=sql://app:secret@db:5432/app?sslmode=disable",
		"TOKEN=\"abc==\"",
		"EMPTY=",
		"PORT=8080",
	}, "\n")
	got, err := envfile.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"DATABASE_URL": "sql://app:secret@db:5432/app?sslmode=disable",
		"TOKEN":        "abc==",
		"EMPTY":        "",
		"PORT":         "8080",
	} {
		if got[key] != want {
			t.Errorf("%s = %q; want %q", key, got[key], want)
		}
	}
	if _, err := envfile.Parse(strings.NewReader("NOVALUE")); err == nil {
		t.Error("a line without = should still be an error")
	}
}

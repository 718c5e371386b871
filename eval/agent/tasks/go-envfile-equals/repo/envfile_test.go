package envfile

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := "# settings\nPORT=8080\n\nNAME = \"my app\"\nMODE='dev'\n"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"PORT": "8080", "NAME": "my app", "MODE": "dev"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %v; want %v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"JUSTAKEY", "=value"} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q) succeeded; want an error", in)
		}
	}
}

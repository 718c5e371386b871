package semver

import "testing"

func TestParse(t *testing.T) {
	v, err := Parse("v1.12.3-rc.1")
	if err != nil {
		t.Fatal(err)
	}
	if v != (Version{1, 12, 3, "rc.1"}) {
		t.Fatalf("Parse = %+v", v)
	}
	if v.String() != "1.12.3-rc.1" {
		t.Fatalf("String() = %q", v.String())
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"1.2", "1.x.3", "", "1.2.-3"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

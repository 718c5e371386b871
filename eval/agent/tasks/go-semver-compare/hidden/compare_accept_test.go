package semver_test

import (
	"testing"

	"example.com/go-semver-compare"
)

func TestAcceptCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"1.9.0", "1.10.0", -1},
		{"2.0.0", "1.99.99", 1},
		{"1.2.10", "1.2.9", 1},
		{"0.1.0", "0.0.9", 1},
		{"1.0.0-rc.1", "1.0.0", -1},
		{"1.0.0", "1.0.0-beta", 1},
		{"1.0.0-alpha", "1.0.0-beta", -1},
		{"1.0.0-rc.1", "0.9.9", 1},
	} {
		a, err := semver.Parse(tc.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := semver.Parse(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Compare(b); got != tc.want {
			t.Errorf("%s.Compare(%s) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

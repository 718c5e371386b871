package testenv

import (
	"flag"
	"io"
	"testing"
)

// FromFlags returns a configuration as its flags set it: their defaults,
// and args on top.
func FromFlags[C any, P interface {
	*C
	RegisterFlags(fs *flag.FlagSet)
}](t testing.TB, args ...string) C {
	t.Helper()
	var c C
	fs := flag.NewFlagSet(t.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	P(&c).RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flags %q: %v", args, err)
	}
	return c
}

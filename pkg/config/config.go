// Package config parses command-line flags and fills the ones left unset from
// SYLK_* environment variables. It is the only code that reads the environment.
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// Validator is implemented by every component configuration.
type Validator interface {
	Validate() error
}

// EnvName is the environment variable that sets flag name: "grpc.listen-address"
// becomes SYLK_GRPC_LISTEN_ADDRESS.
func EnvName(name string) string {
	r := strings.NewReplacer(".", "_", "-", "_")
	return "SYLK_" + strings.ToUpper(r.Replace(name))
}

// Parse parses args into fs, then sets every flag not given on the command line
// from its SYLK_* environment variable. A bad value names the variable.
func Parse(fs *flag.FlagSet, args []string) error {
	return ParseWithLookup(fs, args, os.LookupEnv)
}

// ParseWithLookup is Parse with an injectable environment, for tests.
func ParseWithLookup(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := EnvName(f.Name)
		v, ok := lookup(env)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("invalid value for %s (flag -%s): %w", env, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// Validate runs every validator and joins their errors.
func Validate(vs ...Validator) error {
	var errs []error
	for _, v := range vs {
		if err := v.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

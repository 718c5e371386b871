// Package archtest keeps the import rules of the architecture ("Contracts"
// in docs): a package under pkg/ imports no service and not the gateway; a
// service imports no other service and not the gateway, its tests
// included; generated code (gen/) imports none of our other packages. The
// rules hold for what a package reaches through others too. Its test runs
// in `make lint`.
package archtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Package is what `go list -json` says of a package that the rules read.
type Package struct {
	ImportPath string
	// ForTest names the package whose tests this variant is built for.
	ForTest string
	Imports []string
	// Deps are every package it imports, directly or not.
	Deps  []string
	Error *struct{ Err string }
}

// List lists the packages of patterns in dir and everything they import,
// tests included (`go list -deps -test`).
func List(ctx context.Context, dir string, patterns ...string) ([]Package, error) {
	args := append([]string{"list", "-e", "-deps", "-test", "-json=ImportPath,ForTest,Imports,Deps,Error"}, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	var pkgs []Package
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// A Violation is a package that reaches one the rules keep from it.
type Violation struct {
	// From is the package (its import path within the module), Tests
	// whether only its tests reach To.
	From  string
	Tests bool
	// To is the package it must not reach, Via its own import through
	// which it does (To itself when it imports To directly).
	To, Via string
	Rule    string
}

func (v Violation) String() string {
	from := v.From
	if v.Tests {
		from += " (its tests)"
	}
	via := ""
	if v.Via != v.To {
		via = " through " + v.Via
	}
	return fmt.Sprintf("%s imports %s%s: %s", from, v.To, via, v.Rule)
}

// Check returns every violation among pkgs, the packages of the module
// whose path is module, sorted.
func Check(module string, pkgs []Package) []Violation {
	byPath := map[string]*Package{}
	for i := range pkgs {
		byPath[pkgs[i].ImportPath] = &pkgs[i]
	}
	found := map[[2]string]*Violation{}
	for _, p := range pkgs {
		from, test, ok := ours(module, p)
		if !ok {
			continue
		}
		for _, dep := range p.Deps {
			to, ok := strings.CutPrefix(base(dep), module+"/")
			if !ok {
				continue
			}
			rule := forbidden(from, to)
			if rule == "" {
				continue
			}
			key := [2]string{from, to}
			if v := found[key]; v != nil {
				v.Tests = v.Tests && test
				continue
			}
			found[key] = &Violation{From: from, Tests: test, To: to, Via: via(module, &p, dep, byPath), Rule: rule}
		}
	}
	out := make([]Violation, 0, len(found))
	for _, v := range found {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// ours returns p's path within module, and whether p is a test variant;
// not ok for packages of other modules and for test mains.
func ours(module string, p Package) (path string, test, ok bool) {
	path, ok = strings.CutPrefix(base(p.ImportPath), module+"/")
	if !ok || strings.HasSuffix(path, ".test") {
		return "", false, false
	}
	test = p.ForTest != ""
	if x, cut := strings.CutSuffix(path, "_test"); cut {
		path, test = x, true
	}
	return path, test, true
}

// base drops the " [p.test]" that names a test variant.
func base(importPath string) string {
	p, _, _ := strings.Cut(importPath, " ")
	return p
}

// The rules, as a violation names them.
const (
	RuleGen            = "generated code imports none of our other packages"
	RulePkg            = "a package under pkg/ imports no service and not the gateway"
	RuleServiceGateway = "a service does not import the gateway"
	RuleService        = "a service imports no other service (a test that needs one belongs in e2e/)"
)

// forbidden returns the rule that keeps from (a path within the module)
// from importing to, or "" when it may.
func forbidden(from, to string) string {
	switch {
	case under(from, "gen") && !under(to, "gen"):
		return RuleGen
	case under(from, "pkg") && (under(to, "services") || under(to, "gateway")):
		return RulePkg
	case under(from, "services") && under(to, "gateway"):
		return RuleServiceGateway
	case under(from, "services") && under(to, "services") && service(from) != service(to):
		return RuleService
	}
	return ""
}

// under reports whether path is dir or below it.
func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// service names the service that path (under services/) belongs to.
func service(path string) string {
	parts := strings.SplitN(path, "/", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// via returns the import of p through which it reaches dep.
func via(module string, p *Package, dep string, byPath map[string]*Package) string {
	if slices.Contains(p.Imports, dep) {
		return strings.TrimPrefix(base(dep), module+"/")
	}
	for _, imp := range p.Imports {
		if q := byPath[imp]; q != nil && slices.Contains(q.Deps, dep) {
			return strings.TrimPrefix(base(imp), module+"/")
		}
	}
	return strings.TrimPrefix(base(dep), module+"/")
}

// Errors returns the packages go list could not load, as "path: error".
func Errors(pkgs []Package) []string {
	var out []string
	for _, p := range pkgs {
		if p.Error != nil {
			out = append(out, p.ImportPath+": "+p.Error.Err)
		}
	}
	return out
}

// Module returns the module path of the go.mod in dir.
func Module(dir string) (string, error) {
	b, err := os.ReadFile(dir + "/go.mod")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod names no module", dir)
}

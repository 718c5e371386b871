package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/tooldetect"
	"sylk.dev/sylk/pkg/toolexec"
)

// SecurityFindings names the changed files the security registry marks
// (pkg/review, spec P-09): each is flagged for review.
func SecurityFindings(files []string) []string {
	var out []string
	for _, f := range files {
		if category, _, ok := review.Sensitive(f); ok {
			out = append(out, fmt.Sprintf("%s: security-sensitive path (%s); review required", f, category))
		}
	}
	return out
}

// check is one Inspector or Tester command.
type check struct {
	name    string
	command string
	// listsFiles: the check prints the files it would reformat (gofmt -l).
	listsFiles bool
	// format: a formatter's check, as opposed to a linter's.
	format bool
	// whole: the check's findings count wherever they are (go vet reports
	// type errors a change causes in files it did not touch); other checks
	// count findings in the changed files only, so that what was wrong
	// before the change does not fail it.
	whole bool
}

// inspectorChecks are the formatter and linter checks detected for the
// project (pkg/tooldetect, the Librarian's discovery rules): per language,
// the first installed tool with a project-wide check, the project's own
// (node_modules/.bin) before the worker's PATH; plus the Python and
// JavaScript syntax checks.
func inspectorChecks(dir string) []check {
	facts, _ := tooldetect.ReadFacts(dir)
	res := tooldetect.Discover(facts, func(p string) bool { return programPath(dir, p) != "" })
	var out []check
	for _, t := range res.Runnable(tooldetect.Formatter) {
		out = append(out, check{name: t.ID, command: commandLine(dir, t.Check), format: true,
			listsFiles: t.ID == "gofmt" || t.ID == "goimports"})
	}
	for _, t := range res.Runnable(tooldetect.Linter) {
		out = append(out, check{name: t.ID, command: commandLine(dir, t.Check), whole: t.ID == "go-vet"})
	}
	return append(out, otherInspectorChecks(dir)...)
}

// programPath is how to run program in dir: the project's own copy under
// node_modules/.bin, else the worker's, else "" when neither exists.
func programPath(dir, program string) string {
	if fi, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", program)); err == nil && !fi.IsDir() {
		return "./node_modules/.bin/" + program
	}
	if _, err := exec.LookPath(program); err == nil {
		return program
	}
	return ""
}

// commandLine is args as a command line, its program found by programPath.
// Only words that need it are quoted, so that a plain check runs without
// a shell and is known by its tool (timeouts, parsers, the output cache).
func commandLine(dir string, args []string) string {
	parts := make([]string, len(args))
	for i, a := range args {
		if i == 0 {
			a = programPath(dir, a)
		}
		if a == "" || toolexec.NeedsShell(a) || strings.ContainsAny(a, " \t") {
			a = shellQuote(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// stageRunner runs a stage's command in the workspace.
type stageRunner func(ctx context.Context, command string) (toolexec.Result, error)

// inspect runs the Inspector: detected checks plus the security registry.
// It returns whether it passed and its feedback. Findings are judged on the
// changed files (all files when changed is empty), except a whole check's.
func inspect(ctx context.Context, dir string, run stageRunner, changed []string) (bool, []string, error) {
	inChange := map[string]bool{}
	for _, f := range changed {
		inChange[filepath.ToSlash(filepath.Clean(f))] = true
	}
	judged := func(c check, file string) bool {
		return c.whole || len(inChange) == 0 || inChange[filepath.ToSlash(filepath.Clean(file))]
	}
	var issues []string
	for _, c := range inspectorChecks(dir) {
		r, err := run(ctx, c.command)
		if err != nil {
			return false, nil, err
		}
		switch {
		case c.listsFiles && strings.TrimSpace(r.Stdout) != "":
			for _, f := range strings.Fields(r.Stdout) {
				if judged(c, f) {
					issues = append(issues, fmt.Sprintf("%s: format: not %s-formatted", f, c.name))
				}
			}
		case c.listsFiles && r.ExitCode != 0:
			issues = append(issues, c.name+": "+strings.TrimSpace(r.Stderr))
		case r.ExitCode != 0:
			diags, ok := r.Parsed.([]toolexec.Diagnostic)
			if !ok || len(diags) == 0 {
				if d, parsed := toolexec.ParseGoDiagnostics(r.Stdout, r.Stderr, r.ExitCode); parsed {
					diags, _ = d.([]toolexec.Diagnostic)
				}
			}
			switch {
			case len(diags) > 0:
				for _, d := range diags {
					if judged(c, d.File) {
						issues = append(issues, fmt.Sprintf("%s:%d:%d: %s: %s", d.File, d.Line, d.Column, c.name, d.Message))
					}
				}
			case c.format && !mentionsAny(r.Stdout+r.Stderr, changed):
				// The formatter would change files the change did not touch.
			default:
				issues = append(issues, fmt.Sprintf("%s failed (exit %d): %s", c.name, r.ExitCode, strings.TrimSpace(lastLines(r.Stdout+r.Stderr, 10))))
			}
		}
	}
	// Security findings are warnings for review, not failures.
	var warnings []string
	for _, f := range SecurityFindings(changed) {
		warnings = append(warnings, "warning: "+f)
	}
	return len(issues) == 0, append(issues, warnings...), nil
}

// mentionsAny reports whether out names one of files, or files is empty.
func mentionsAny(out string, files []string) bool {
	if len(files) == 0 {
		return true
	}
	for _, f := range files {
		if strings.Contains(out, filepath.ToSlash(f)) {
			return true
		}
	}
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

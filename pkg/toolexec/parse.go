package toolexec

import (
	"regexp"
	"strconv"
	"strings"
)

// Diagnostic is one file:line:col message of a compiler or checker.
type Diagnostic struct {
	File    string
	Line    int
	Column  int
	Message string
}

var diagLine = regexp.MustCompile(`^(?:vet: )?([^\s:][^:]*\.\w+):(\d+)(?::(\d+))?: (.+)$`)

// ParseGoDiagnostics parses the output of go build and go vet into
// diagnostics. It understands a clean run (no output, exit 0) and output
// made of diagnostics and "#" package headers; anything else is not its.
func ParseGoDiagnostics(stdout, stderr string, exitCode int) (any, bool) {
	var diags []Diagnostic
	for _, l := range splitLines(stdout + stderr) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		m := diagLine.FindStringSubmatch(l)
		if m == nil {
			return nil, false
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		diags = append(diags, Diagnostic{File: m[1], Line: line, Column: col, Message: m[4]})
	}
	if exitCode != 0 && len(diags) == 0 {
		return nil, false
	}
	return diags, true
}

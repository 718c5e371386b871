package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/toolexec"
)

// Pipeline states (ARCHITECTURE.md: sequential Engineer -> Inspector ->
// Tester with feedback to the Engineer).
const (
	pipeRunning    = "running"
	pipeInspecting = "inspecting"
	pipeTesting    = "testing"
	pipeCompleted  = "completed"
	pipeFailed     = "failed"
	defaultLoops   = 3
)

// FailureOptions are what the user is offered when a pipeline ran out of
// loops (spec F-11).
func FailureOptions(node string) []string {
	return []string{
		"raise max_loops and run the node again",
		"/task " + node + " ignore_inspector",
		"/task " + node + " ignore_tester",
		"cancel and escalate to the Architect",
	}
}

// securityPattern is one entry of the security-sensitive path registry
// (spec P-09): a change to a matching path is flagged for review.
type securityPattern struct {
	re       *regexp.Regexp
	category string
}

var securityRegistry = func() []securityPattern {
	add := func(expr, cat string) securityPattern { return securityPattern{regexp.MustCompile(expr), cat} }
	return []securityPattern{
		add(`(?i)auth`, "authentication"), add(`(?i)crypto`, "cryptography"), add(`(?i)secret`, "secrets"),
		add(`(?i)permission`, "authorization"), add(`(?i)(^|[^a-z])acl([^a-z]|$)`, "authorization"),
		add(`(?i)\.pem$`, "key material"), add(`(?i)\.key$`, "key material"), add(`(?i)^\.env(\..*)?$`, "secrets"),
		add(`^\.github$`, "ci"), add(`^workflows$`, "ci"), add(`^Jenkinsfile$`, "ci"), add(`^\.gitlab-ci\.ya?ml$`, "ci"),
		add(`^Makefile$`, "build"), add(`(?i)^Dockerfile`, "container"), add(`(?i)compose.*\.ya?ml$`, "container"),
		add(`(?i)terraform`, "infrastructure"), add(`\.tf$`, "infrastructure"), add(`(?i)^helm$`, "infrastructure"),
		add(`(?i)^(k8s|kubernetes)$`, "infrastructure"),
		add(`^package-lock\.json$`, "dependencies"), add(`^yarn\.lock$`, "dependencies"), add(`^pnpm-lock\.yaml$`, "dependencies"),
		add(`^go\.sum$`, "dependencies"), add(`^Gemfile(\.lock)?$`, "dependencies"), add(`^poetry\.lock$`, "dependencies"),
		add(`^Cargo\.lock$`, "dependencies"), add(`^package\.json$`, "dependencies"), add(`^go\.mod$`, "dependencies"),
		add(`^SECURITY\.md$`, "policy"), add(`^CODEOWNERS$`, "policy"),
	}
}()

// SecurityFindings matches each path segment of the changed files against
// the registry.
func SecurityFindings(files []string) []string {
	var out []string
	for _, f := range files {
		for _, seg := range strings.Split(filepath.ToSlash(f), "/") {
			hit := ""
			for _, p := range securityRegistry {
				if p.re.MatchString(seg) {
					hit = p.category
					break
				}
			}
			if hit != "" {
				out = append(out, fmt.Sprintf("%s: security-sensitive path (%s); review required", f, hit))
				break
			}
		}
	}
	return out
}

// check is one Inspector or Tester command.
type check struct {
	name    string
	command string
}

// inspectorChecks are the formatters, linters and vet-style checks the
// project's markers call for.
func inspectorChecks(dir string) []check {
	var out []check
	if exists(filepath.Join(dir, "go.mod")) {
		out = append(out, check{"gofmt", "gofmt -l ."}, check{"go vet", "go vet ./..."})
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// stageRunner runs a stage's command in the workspace.
type stageRunner func(ctx context.Context, command string) (toolexec.Result, error)

// inspect runs the Inspector: detected checks plus the security registry.
// It returns whether it passed and its feedback.
func inspect(ctx context.Context, dir string, run stageRunner, changed []string) (bool, []string, error) {
	var issues []string
	for _, c := range inspectorChecks(dir) {
		r, err := run(ctx, c.command)
		if err != nil {
			return false, nil, err
		}
		switch {
		case c.name == "gofmt" && strings.TrimSpace(r.Stdout) != "":
			for _, f := range strings.Fields(r.Stdout) {
				issues = append(issues, fmt.Sprintf("%s: format: not gofmt-formatted", f))
			}
		case c.name == "gofmt" && r.ExitCode != 0:
			issues = append(issues, "gofmt: "+strings.TrimSpace(r.Stderr))
		case r.ExitCode != 0:
			if diags, ok := r.Parsed.([]toolexec.Diagnostic); ok && len(diags) > 0 {
				for _, d := range diags {
					issues = append(issues, fmt.Sprintf("%s:%d:%d: %s: %s", d.File, d.Line, d.Column, c.name, d.Message))
				}
			} else {
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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// goTestEvent is one line of go test -json.
type goTestEvent struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

var goFileLine = regexp.MustCompile(`^\s+([\w./-]+\.go):(\d+): (.*)$`)

// ParseGoTestJSON turns go test -json output into a TestResult (spec E-22).
func ParseGoTestJSON(out string, elapsed time.Duration) *orchestratorv1.TestResult {
	res := &orchestratorv1.TestResult{FrameworkId: "go-test", Duration: durationpb.New(elapsed)}
	outputs := map[string]*strings.Builder{}
	var plain strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev goTestEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			plain.WriteString(sc.Text() + "\n")
			continue
		}
		if ev.Test == "" {
			if ev.Action == "output" {
				plain.WriteString(ev.Output)
			}
			continue
		}
		key := ev.Package + "." + ev.Test
		switch ev.Action {
		case "output":
			b := outputs[key]
			if b == nil {
				b = &strings.Builder{}
				outputs[key] = b
			}
			if b.Len() < 16<<10 {
				b.WriteString(ev.Output)
			}
		case "pass":
			res.Passed++
		case "skip":
			res.Skipped++
		case "fail":
			res.Failed++
			f := &orchestratorv1.TestFailure{TestName: ev.Test}
			if b := outputs[key]; b != nil {
				f.StackTrace = b.String()
				for _, l := range strings.Split(b.String(), "\n") {
					if m := goFileLine.FindStringSubmatch(l); m != nil {
						f.FilePath = m[1]
						n, _ := strconv.Atoi(m[2])
						f.Line = int32(n)
						f.Message = strings.TrimSpace(m[3])
						break
					}
				}
			}
			res.Failures = append(res.Failures, f)
		}
	}
	res.Output = truncateString(plain.String(), 16<<10)
	return res
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[len(s)-n:], "")
}

// runTests runs the detected test framework and parses its results. It
// reports ok false (and no result) when no framework was detected.
func runTests(ctx context.Context, dir string, run stageRunner) (*orchestratorv1.TestResult, bool, error) {
	if !exists(filepath.Join(dir, "go.mod")) {
		return nil, false, nil
	}
	start := time.Now()
	r, err := run(ctx, "go test -json -count=1 ./...")
	if err != nil {
		return nil, false, err
	}
	res := ParseGoTestJSON(r.Stdout+r.Stderr, time.Since(start))
	if r.ExitCode != 0 && res.Failed == 0 {
		// A build failure: no test ran.
		res.Failed = 1
		res.Failures = append(res.Failures, &orchestratorv1.TestFailure{TestName: "build", Message: strings.TrimSpace(lastLines(r.Stdout+r.Stderr, 20))})
	}
	return res, true, nil
}

// testFeedback summarises a TestResult for the Engineer.
func testFeedback(r *orchestratorv1.TestResult) []string {
	var out []string
	for _, f := range r.GetFailures() {
		loc := ""
		if f.GetFilePath() != "" {
			loc = fmt.Sprintf(" (%s:%d)", f.GetFilePath(), f.GetLine())
		}
		out = append(out, fmt.Sprintf("test %s failed%s: %s", f.GetTestName(), loc, f.GetMessage()))
	}
	return out
}

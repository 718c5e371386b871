package worker

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/tooldetect"
)

// The Tester runs the test framework the project's markers call for (the
// Librarian's detection rules, pkg/tooldetect, spec E-22) when it is not
// Go, Python or plain node --test, which have runners of their own: the
// JavaScript frameworks, cargo test, RSpec, Minitest, Gradle and Maven.

// frameworkRun is how a detected framework runs over the whole project.
type frameworkRun struct {
	program string // found by programPath: node_modules/.bin, then PATH
	args    []string
}

var frameworkRuns = map[string]frameworkRun{
	"vitest":     {"vitest", []string{"run"}},
	"jest":       {"jest", []string{"--ci"}},
	"mocha":      {"mocha", nil},
	"bun-test":   {"bun", []string{"test"}},
	"cargo-test": {"cargo", []string{"test"}},
	"rspec":      {"rspec", nil},
	"minitest":   {"rake", []string{"test"}},
	"gradle":     {"gradle", []string{"test", "--console=plain"}},
	"maven":      {"mvn", []string{"-B", "test"}},
}

// detectedFramework is the project's first detected test framework that
// has a runner here and is installed, in the rules' priority order.
func detectedFramework(dir string) (id string, command string, ok bool) {
	facts, _ := tooldetect.ReadFacts(dir)
	res := tooldetect.Discover(facts, func(string) bool { return true })
	all := res.TestFrameworks
	for _, t := range res.Alternatives {
		if t.Category == tooldetect.TestFramework {
			all = append(all, t)
		}
	}
	for _, t := range all {
		fr, known := frameworkRuns[t.ID]
		if !known || programPath(dir, fr.program) == "" {
			continue
		}
		return t.ID, commandLine(dir, append([]string{fr.program}, fr.args...)), true
	}
	return "", "", false
}

// runDetectedFramework runs the project's detected framework; detected is
// false when none applies.
func runDetectedFramework(ctx context.Context, dir string, run stageRunner) (*orchestratorv1.TestResult, bool, error) {
	id, command, ok := detectedFramework(dir)
	if !ok {
		return nil, false, nil
	}
	start := time.Now()
	r, err := run(ctx, command)
	if err != nil {
		return nil, false, err
	}
	out := r.Stdout + r.Stderr
	return withBuildFailure(ParseTestSummary(id, out, time.Since(start)), r.ExitCode, out), true, nil
}

var (
	cargoResult  = regexp.MustCompile(`test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored`)
	cargoFailed  = regexp.MustCompile(`(?m)^test (\S+) \.\.\. FAILED$`)
	jestTests    = regexp.MustCompile(`(?m)^Tests:\s+(.*)$`)
	vitestTests  = regexp.MustCompile(`(?m)^\s*Tests\s+(.*)$`)
	mochaCount   = regexp.MustCompile(`(?m)^\s*(\d+) (passing|failing|pending)\b`)
	rspecSummary = regexp.MustCompile(`(\d+) examples?, (\d+) failures?(?:, (\d+) pending)?`)
	minitestSum  = regexp.MustCompile(`(\d+) runs, \d+ assertions, (\d+) failures, (\d+) errors, (\d+) skips`)
	mavenSummary = regexp.MustCompile(`Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+)`)
	bunCount     = regexp.MustCompile(`(?m)^\s*(\d+) (pass|fail|skip)\s*$`)
	countWord    = regexp.MustCompile(`(\d+) (passed|failed|skipped|todo|pending)`)
)

func atoi(s string) int32 {
	n, _ := strconv.Atoi(s)
	return int32(n)
}

// ParseTestSummary reads the pass, fail and skip counts a framework prints
// at the end of a run into a TestResult (spec E-22); failing tests are
// named where the framework lists them (cargo test). Frameworks whose
// summary is not recognised are judged by their exit code (withBuildFailure).
func ParseTestSummary(framework, out string, elapsed time.Duration) *orchestratorv1.TestResult {
	res := &orchestratorv1.TestResult{FrameworkId: framework, Duration: durationpb.New(elapsed), Output: truncateString(out, 16<<10)}
	words := func(line string) {
		for _, m := range countWord.FindAllStringSubmatch(line, -1) {
			switch m[2] {
			case "passed":
				res.Passed += atoi(m[1])
			case "failed":
				res.Failed += atoi(m[1])
			default:
				res.Skipped += atoi(m[1])
			}
		}
	}
	switch framework {
	case "cargo-test":
		for _, m := range cargoResult.FindAllStringSubmatch(out, -1) {
			res.Passed += atoi(m[1])
			res.Failed += atoi(m[2])
			res.Skipped += atoi(m[3])
		}
		for _, m := range cargoFailed.FindAllStringSubmatch(out, -1) {
			res.Failures = append(res.Failures, &orchestratorv1.TestFailure{TestName: m[1], Message: "FAILED"})
		}
	case "jest":
		if m := jestTests.FindAllStringSubmatch(out, -1); len(m) > 0 {
			words(m[len(m)-1][1])
		}
	case "vitest":
		if m := vitestTests.FindAllStringSubmatch(out, -1); len(m) > 0 {
			words(strings.ReplaceAll(m[len(m)-1][1], "|", ","))
		}
	case "mocha":
		for _, m := range mochaCount.FindAllStringSubmatch(out, -1) {
			switch m[2] {
			case "passing":
				res.Passed += atoi(m[1])
			case "failing":
				res.Failed += atoi(m[1])
			default:
				res.Skipped += atoi(m[1])
			}
		}
	case "bun-test":
		for _, m := range bunCount.FindAllStringSubmatch(out, -1) {
			switch m[2] {
			case "pass":
				res.Passed += atoi(m[1])
			case "fail":
				res.Failed += atoi(m[1])
			default:
				res.Skipped += atoi(m[1])
			}
		}
	case "rspec":
		if m := rspecSummary.FindAllStringSubmatch(out, -1); len(m) > 0 {
			last := m[len(m)-1]
			total, failed, pending := atoi(last[1]), atoi(last[2]), atoi(last[3])
			res.Failed, res.Skipped, res.Passed = failed, pending, total-failed-pending
		}
	case "minitest":
		if m := minitestSum.FindAllStringSubmatch(out, -1); len(m) > 0 {
			last := m[len(m)-1]
			runs, failures, errs, skips := atoi(last[1]), atoi(last[2]), atoi(last[3]), atoi(last[4])
			res.Failed, res.Skipped, res.Passed = failures+errs, skips, runs-failures-errs-skips
		}
	case "maven":
		if m := mavenSummary.FindAllStringSubmatch(out, -1); len(m) > 0 {
			last := m[len(m)-1]
			runs, failures, errs, skips := atoi(last[1]), atoi(last[2]), atoi(last[3]), atoi(last[4])
			res.Failed, res.Skipped, res.Passed = failures+errs, skips, runs-failures-errs-skips
		}
	}
	return res
}

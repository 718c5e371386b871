package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

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
		return runOtherTests(ctx, dir, run)
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

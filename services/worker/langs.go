package worker

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// Inspector and Tester for Python and JavaScript projects: used when the
// project's markers say so and the tools exist on the worker (found on its
// PATH once, like the Librarian's tool discovery).

// langTools are the interpreters found on the worker.
type langTools struct {
	// python is the real interpreter (not a version-manager shim, which
	// would need the worker's HOME); pytest whether it can import pytest.
	python string
	pytest bool
	node   string
}

var (
	toolsOnce sync.Once
	toolsDet  langTools
)

// detectTools finds python and node once per process.
func detectTools() langTools {
	toolsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		toolsDet.python = findPython(ctx)
		if toolsDet.python != "" {
			toolsDet.pytest = exec.CommandContext(ctx, toolsDet.python, "-c", "import pytest").Run() == nil
		}
		for _, p := range programs("node") {
			if runnableByTasks(p) {
				toolsDet.node = p
				break
			}
		}
	})
	return toolsDet
}

// findPython is the first real Python interpreter on the PATH that task
// commands can run, "" when there is none.
func findPython(ctx context.Context) string {
	for _, name := range []string{"python3", "python"} {
		for _, p := range programs(name) {
			out, err := exec.CommandContext(ctx, p, "-c", "import sys; print(sys.executable)").Output()
			if exe := strings.TrimSpace(string(out)); err == nil && exe != "" && runnableByTasks(exe) {
				return exe
			}
		}
	}
	return ""
}

// isPython reports a Python project: a packaging marker or a .py file at
// the top or under tests/.
func isPython(dir string) bool {
	for _, m := range []string{"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "tox.ini"} {
		if exists(filepath.Join(dir, m)) {
			return true
		}
	}
	for _, pat := range []string{"*.py", "tests/*.py", "test/*.py"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) > 0 {
			return true
		}
	}
	return false
}

// isNode reports a JavaScript project.
func isNode(dir string) bool {
	if exists(filepath.Join(dir, "package.json")) {
		return true
	}
	for _, pat := range []string{"*.js", "*.mjs", "test/*.js", "test/*.mjs"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) > 0 {
			return true
		}
	}
	return false
}

// pySyntaxCheck parses every Python file (without writing bytecode) and
// prints file:line:col: syntax: message for each error.
const pySyntaxCheck = `import ast, pathlib, sys
bad = 0
for p in sorted(pathlib.Path(".").rglob("*.py")):
    if any(x.startswith(".") or x == "node_modules" for x in p.parts):
        continue
    try:
        ast.parse(p.read_text(encoding="utf-8", errors="replace"), str(p))
    except SyntaxError as e:
        print(f"{p}:{e.lineno}:{e.offset}: syntax: {e.msg}")
        bad = 1
sys.exit(bad)`

// nodeSyntaxCheck runs node --check on every JavaScript file.
const nodeSyntaxCheck = `s=0; for f in $(find . -path ./node_modules -prune -o -path './.*' -prune -o \( -name '*.js' -o -name '*.mjs' -o -name '*.cjs' \) -print); do %s --check "$f" || s=1; done; exit $s`

// otherInspectorChecks are the checks of the Python and JavaScript projects.
func otherInspectorChecks(dir string) []check {
	t := detectTools()
	var out []check
	if t.python != "" && isPython(dir) {
		out = append(out, check{name: "python syntax", command: shellQuote(t.python) + " -B -c " + shellQuote(pySyntaxCheck)})
	}
	if t.node != "" && isNode(dir) {
		out = append(out, check{name: "node --check", command: fmt.Sprintf(nodeSyntaxCheck, shellQuote(t.node))})
	}
	return out
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runOtherTests runs the Python test framework, the project's detected
// framework (frameworks.go) or node --test. It reports detected false when
// none applies.
func runOtherTests(ctx context.Context, dir string, run stageRunner) (*orchestratorv1.TestResult, bool, error) {
	t := detectTools()
	start := time.Now()
	switch {
	case t.python != "" && isPython(dir):
		if t.pytest {
			r, err := run(ctx, shellQuote(t.python)+" -B -m pytest -q -rA -p no:cacheprovider")
			if err != nil {
				return nil, false, err
			}
			return withBuildFailure(ParsePytest(r.Stdout+r.Stderr, time.Since(start)), r.ExitCode, r.Stdout+r.Stderr), true, nil
		}
		r, err := run(ctx, shellQuote(t.python)+" -B -m unittest discover -v")
		if err != nil {
			return nil, false, err
		}
		return withBuildFailure(ParseUnittest(r.Stdout+r.Stderr, time.Since(start)), r.ExitCode, r.Stdout+r.Stderr), true, nil
	}
	// The JavaScript frameworks, cargo test, RSpec, Minitest, Gradle and
	// Maven, when the project's markers call for one that is installed.
	if res, detected, err := runDetectedFramework(ctx, dir, run); detected || err != nil {
		return res, detected, err
	}
	if t.node == "" || !isNode(dir) {
		return nil, false, nil
	}
	r, err := run(ctx, shellQuote(t.node)+" --test --test-reporter=tap")
	if err != nil {
		return nil, false, err
	}
	return withBuildFailure(ParseNodeTAP(r.Stdout+r.Stderr, time.Since(start)), r.ExitCode, r.Stdout+r.Stderr), true, nil
}

// withBuildFailure counts a failed run in which no test failed (a collection
// or syntax error) as one failure.
func withBuildFailure(res *orchestratorv1.TestResult, exit int, out string) *orchestratorv1.TestResult {
	if exit != 0 && res.GetFailed() == 0 {
		res.Failed = 1
		res.Failures = append(res.Failures, &orchestratorv1.TestFailure{TestName: "collection", Message: strings.TrimSpace(lastLines(out, 20))})
	}
	return res
}

var (
	unittestLine  = regexp.MustCompile(`^(\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$`)
	unittestBlock = regexp.MustCompile(`^(FAIL|ERROR): (\w+) \(([\w.]+)\)`)
	pyFileLine    = regexp.MustCompile(`File "([^"]+)", line (\d+)`)
)

// ParseUnittest parses python -m unittest -v output into a TestResult.
func ParseUnittest(out string, elapsed time.Duration) *orchestratorv1.TestResult {
	res := &orchestratorv1.TestResult{FrameworkId: "python-unittest", Duration: durationpb.New(elapsed), Output: truncateString(out, 16<<10)}
	lines := strings.Split(out, "\n")
	for _, l := range lines {
		m := unittestLine.FindStringSubmatch(strings.TrimRight(l, "\r"))
		if m == nil {
			continue
		}
		switch {
		case m[3] == "ok" || m[3] == "expected failure":
			res.Passed++
		case strings.HasPrefix(m[3], "skipped"):
			res.Skipped++
		default:
			res.Failed++
		}
	}
	// Failure blocks: "FAIL: test (mod.Class.test)", a dashed line, the
	// traceback, up to the next "=====" line.
	for i := 0; i < len(lines); i++ {
		m := unittestBlock.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := &orchestratorv1.TestFailure{TestName: m[3]}
		var tb []string
		for j := i + 1; j < len(lines) && !strings.HasPrefix(lines[j], "=====") && !strings.HasPrefix(lines[j], "Ran "); j++ {
			if strings.HasPrefix(lines[j], "-----") && len(tb) == 0 {
				continue
			}
			tb = append(tb, lines[j])
			if fm := pyFileLine.FindStringSubmatch(lines[j]); fm != nil {
				f.FilePath = fm[1]
				n, _ := strconv.Atoi(fm[2])
				f.Line = int32(n)
			}
		}
		for k := len(tb) - 1; k >= 0; k-- {
			if s := strings.TrimSpace(tb[k]); s != "" && !strings.HasPrefix(s, "-----") {
				f.Message = s
				break
			}
		}
		f.StackTrace = strings.TrimSpace(strings.Join(tb, "\n"))
		res.Failures = append(res.Failures, f)
	}
	return res
}

var pytestLine = regexp.MustCompile(`^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+?)(?::(\d+))?(?: - (.*))?$`)

// ParsePytest parses pytest -rA short summary lines into a TestResult.
func ParsePytest(out string, elapsed time.Duration) *orchestratorv1.TestResult {
	res := &orchestratorv1.TestResult{FrameworkId: "pytest", Duration: durationpb.New(elapsed), Output: truncateString(out, 16<<10)}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		m := pytestLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASSED", "XFAIL":
			res.Passed++
		case "SKIPPED":
			res.Skipped++
		default:
			res.Failed++
			f := &orchestratorv1.TestFailure{TestName: m[2], Message: m[4]}
			if file, _, ok := strings.Cut(m[2], "::"); ok {
				f.FilePath = file
			}
			res.Failures = append(res.Failures, f)
		}
	}
	return res
}

var (
	tapResult   = regexp.MustCompile(`^(not )?ok \d+ - (.*?)(\s+# (SKIP|TODO).*)?$`)
	tapLocation = regexp.MustCompile(`^\s+location: '(.+):(\d+):\d+'$`)
)

// ParseNodeTAP parses node --test TAP output (top-level tests) into a
// TestResult.
func ParseNodeTAP(out string, elapsed time.Duration) *orchestratorv1.TestResult {
	res := &orchestratorv1.TestResult{FrameworkId: "node-test", Duration: durationpb.New(elapsed), Output: truncateString(out, 16<<10)}
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		m := tapResult.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		switch {
		case m[4] != "":
			res.Skipped++
		case m[1] == "":
			res.Passed++
		default:
			res.Failed++
			f := &orchestratorv1.TestFailure{TestName: m[2]}
			var yaml []string
			for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "  "); j++ {
				yaml = append(yaml, lines[j])
				if lm := tapLocation.FindStringSubmatch(lines[j]); lm != nil {
					f.FilePath = lm[1]
					n, _ := strconv.Atoi(lm[2])
					f.Line = int32(n)
				}
				if strings.TrimSpace(lines[j]) == "error: |-" {
					var msg []string
					for k := j + 1; k < len(lines) && strings.HasPrefix(lines[k], "    "); k++ {
						if s := strings.TrimSpace(lines[k]); s != "" {
							msg = append(msg, s)
						}
					}
					f.Message = strings.Join(msg, " ")
				} else if v, ok := strings.CutPrefix(strings.TrimSpace(lines[j]), "expected: "); ok {
					f.Expected = v
				} else if v, ok := strings.CutPrefix(strings.TrimSpace(lines[j]), "actual: "); ok {
					f.Actual = v
				}
			}
			f.StackTrace = strings.Join(yaml, "\n")
			res.Failures = append(res.Failures, f)
		}
	}
	return res
}

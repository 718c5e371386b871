package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/tooldetect"
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
	pipeHandedOff  = "handed_off"
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

// pipelineRun is one pipeline node's Engineer -> Inspector -> Tester loop.
type pipelineRun struct {
	s      *Service
	env    *messagev1.Envelope
	task   *messagev1.TaskDispatch
	spec   *orchestratorv1.Node
	dir    string
	wsp    *workspace
	run    stageRunner
	ctl    *taskControl
	res    *messagev1.TaskResult
	report *orchestratorv1.TaskReport
	// last is the last command a stage ran: its output is kept when the
	// stage is interrupted.
	last toolexec.Result
	log  strings.Builder
	// mem is the Engineer's conversation when a language model writes the
	// code, nil otherwise.
	mem *engineerMemory
	// What the pipeline did so far, for a handoff (spec F-23): a line per
	// Engineer turn, the Inspector's findings per inspection and its last
	// verdict, and the Tester's last failures.
	accomplished []string
	findings     [][]string
	inspection   string
	testFailures []string
	// handoff is set when the pipeline handed its state on.
	handoff *orchestratorv1.PipelineHandoff
}

// runPipeline runs Engineer -> Inspector -> Tester, feeding failures back
// to the Engineer, up to max_loops times (spec F-08..F-11). The user may skip
// the Inspector or the Tester, interrupt the running stage or query the
// loop's state while it runs (spec F-13).
func (s *Service) runPipeline(ctx context.Context, env *messagev1.Envelope, spec *orchestratorv1.Node, dir string, wsp *workspace,
	run stageRunner, res *messagev1.TaskResult, report *orchestratorv1.TaskReport, out *taskOutcome) (*orchestratorv1.PipelineStatus, error) {
	pr := &pipelineRun{s: s, env: env, task: env.GetTaskDispatch(), spec: spec, dir: dir, wsp: wsp, ctl: controlOf(ctx, true), res: res, report: report}
	pr.ctl.markPipeline()
	// Overrides given before this attempt are the user's as much as those
	// given while it runs: they show in the status and the report.
	if spec.GetIgnoreInspector() {
		pr.ctl.noteOverride("ignore_inspector")
	}
	if spec.GetIgnoreTester() {
		pr.ctl.noteOverride("ignore_tester")
	}
	if len(spec.GetGuidance()) > 0 {
		pr.ctl.noteOverride("prompt")
	}
	if s.engineerReads(pr.task) {
		pr.mem = &engineerMemory{window: s.engineerWindow()}
	}
	pr.run = func(ctx context.Context, command string) (toolexec.Result, error) {
		r, err := run(ctx, command)
		pr.last = r
		return r, err
	}
	p, err := pr.loop(ctx)
	if err == nil && (p.GetState() == pipeCompleted || p.GetState() == pipeFailed) {
		pr.checkpoint(ctx, p)
	}
	if pr.handoff != nil {
		b, merr := protojson.Marshal(pr.handoff)
		if merr == nil {
			out.meta = mergeMeta(out.meta, map[string]string{MetaHandoff: string(b)})
		}
	}
	if p != nil {
		p.Overrides = pr.ctl.overrides()
		p.Stage = pr.ctl.snapshot().GetStage()
		if len(p.Overrides) > 0 {
			report.Deviations = "user overrides: " + strings.Join(p.Overrides, ", ")
		}
	}
	out.msg = res
	return p, err
}

func (pr *pipelineRun) loop(ctx context.Context) (*orchestratorv1.PipelineStatus, error) {
	maxLoops := pr.spec.GetMaxLoops()
	if maxLoops <= 0 {
		maxLoops = defaultLoops
	}
	p := &orchestratorv1.PipelineStatus{State: pipeRunning, MaxLoops: maxLoops}
	pr.ctl.publish(p)
	if line := briefingLine(pr.spec.GetRetryBriefing()); line != "" {
		fmt.Fprintf(&pr.log, "retry briefing: %s\n", line)
	}
	var edited []string
	if h := pr.spec.GetHandoff(); h != nil {
		// The node's own edits are in the files the old pipeline left.
		fmt.Fprintf(&pr.log, "carrying on from %s (handoff %d: %s)\n", h.GetOldPipelineId(), h.GetHandoffIndex(), h.GetReason())
	} else {
		var err error
		if edited, err = applyEdits(pr.dir, editsOf(pr.spec)); err != nil {
			pr.res.ExitCode, pr.res.Error = 1, err.Error()
			p.State = pipeFailed
			return p, nil
		}
		if len(edited) > 0 {
			pr.accomplished = append(pr.accomplished, "applied the node's edits to "+strings.Join(edited, ", "))
		}
	}
	var generated []string
	var answer *modelAnswer
	var feedback []string
	for p.Loops < maxLoops {
		// The Engineer's next turn: or, when its conversation reached the
		// threshold or the user asked, a fresh pipeline's (spec F-23). A
		// pipeline gets at least one loop, so that a chain of handoffs
		// always moves on.
		if p.Loops > 0 {
			if trigger, usage := pr.handoffDue(feedback); trigger != "" {
				pr.handOff(ctx, p, trigger, usage, feedback, edited, generated, answer)
				return p, nil
			}
		}
		p.Loops++
		p.State = pipeRunning
		pr.ctl.publish(p)
		// Engineer.
		fmt.Fprintf(&pr.log, "loop %d: engineer", p.Loops)
		sctx, done := pr.ctl.stage(ctx, stageEngineer)
		gen, ans, gerr := pr.engineer(sctx, feedback)
		if stop := pr.stopped(ctx, sctx, done, p, stageEngineer); stop {
			return p, nil
		}
		feedback = nil
		switch {
		case gerr != nil:
			feedback = append(feedback, "engineer: "+gerr.Error())
			fmt.Fprintf(&pr.log, " (the model's edits could not be used: %s)", gerr)
			pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: the model's edits could not be used: %s", p.Loops, gerr))
		case ans != nil:
			generated, answer = appendUnique(generated, gen...), ans
			fmt.Fprintf(&pr.log, " (the model wrote %s)", strings.Join(gen, ", "))
			pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: wrote %s: %s", p.Loops, strings.Join(gen, ", "), orNone(ans.Summary)))
		case p.Loops > 1:
			pr.log.WriteString(" (no language model: the feedback cannot be acted on beyond re-running the node's command)")
		}
		pr.log.WriteString("\n")
		if pr.task.GetCommand() != "" && len(feedback) == 0 {
			r, err := pr.run(sctx, pr.task.GetCommand())
			if stop := pr.stopped(ctx, sctx, done, p, stageEngineer); stop {
				return p, nil
			}
			if err != nil {
				done()
				return p, err
			}
			pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: ran %s (exit %d)", p.Loops, pr.task.GetCommand(), r.ExitCode))
			if r.ExitCode != 0 {
				feedback = append(feedback, fmt.Sprintf("engineer command failed (exit %d): %s", r.ExitCode, strings.TrimSpace(lastLines(r.Stdout+r.Stderr, 10))))
			}
		}
		done()
		var changed []string
		if pr.wsp != nil {
			changed, _ = pr.wsp.changedFiles(ctx)
		}
		// Inspector.
		ignoreInsp := pr.spec.GetIgnoreInspector() || pr.ctl.ignored(stageInspector)
		p.InspectorPassed, p.TesterPassed = ignoreInsp, false
		if len(feedback) == 0 && !ignoreInsp {
			p.State = pipeInspecting
			pr.ctl.publish(p)
			sctx, done := pr.ctl.stage(ctx, stageInspector)
			ok, issues, err := inspect(sctx, pr.dir, pr.run, changed)
			if stop := pr.stopped(ctx, sctx, done, p, stageInspector); stop {
				return p, nil
			}
			ignoredNow := errors.Is(context.Cause(sctx), errStageIgnored)
			done()
			switch {
			case ignoredNow:
				p.InspectorPassed = true
				fmt.Fprintf(&pr.log, "loop %d: inspector stopped and ignored by the user\n", p.Loops)
			case err != nil:
				return p, err
			default:
				p.InspectorPassed = ok
				pr.findings, pr.inspection = append(pr.findings, issues), passWord(ok)
				fmt.Fprintf(&pr.log, "loop %d: inspector %s (%d findings)\n", p.Loops, passWord(ok), len(issues))
				if !ok {
					feedback = append(feedback, pr.gateCorrections("inspector", issues, rootCauseOther)...)
				} else if len(issues) > 0 {
					pr.report.Concerns = strings.Join(issues, "; ")
				}
			}
		} else if ignoreInsp {
			pr.inspection = "skipped"
			fmt.Fprintf(&pr.log, "loop %d: inspector skipped (ignore_inspector)\n", p.Loops)
		}
		// Tester.
		ignoreTest := pr.spec.GetIgnoreTester() || pr.ctl.ignored(stageTester)
		if ignoreTest {
			p.TesterPassed = true
			pr.report.Tested = "not tested: ignore_tester"
		}
		if len(feedback) == 0 && !ignoreTest {
			p.State = pipeTesting
			pr.ctl.publish(p)
			sctx, done := pr.ctl.stage(ctx, stageTester)
			tr, detected, err := runTests(sctx, pr.dir, pr.run)
			if stop := pr.stopped(ctx, sctx, done, p, stageTester); stop {
				return p, nil
			}
			ignoredNow := errors.Is(context.Cause(sctx), errStageIgnored)
			done()
			switch {
			case ignoredNow:
				p.TesterPassed = true
				pr.report.Tested = "not tested: the Tester was stopped and ignored by the user"
				fmt.Fprintf(&pr.log, "loop %d: tester stopped and ignored by the user\n", p.Loops)
			case err != nil:
				return p, err
			case !detected:
				p.TesterPassed = true
				pr.report.Tested = "not tested: no test framework detected"
			default:
				p.LastTestResult = tr
				p.TesterPassed = tr.GetFailed() == 0
				pr.report.Tested = fmt.Sprintf("%s: %d passed, %d failed, %d skipped", tr.GetFrameworkId(), tr.GetPassed(), tr.GetFailed(), tr.GetSkipped())
				fmt.Fprintf(&pr.log, "loop %d: tester %s (%s)\n", p.Loops, passWord(p.TesterPassed), pr.report.Tested)
				pr.testFailures = testFeedback(tr)
				feedback = append(feedback, pr.gateCorrections("tester", pr.testFailures, rootCauseTest)...)
			}
		}
		if len(feedback) == 0 {
			p.State = pipeCompleted
			fmt.Fprintf(&pr.log, "pipeline completed after %d loop(s)\n", p.Loops)
			pr.res.Stdout = pr.log.String()
			pr.finishReport(edited, generated, answer)
			pr.ctl.publish(p)
			return p, nil
		}
		p.Feedback = append(p.Feedback, fmt.Sprintf("loop %d: %s", p.Loops, strings.Join(feedback, "\n")))
		pr.ctl.publish(p)
	}
	p.State = pipeFailed
	p.Options = FailureOptions(pr.task.GetNodeId())
	fmt.Fprintf(&pr.log, "pipeline failed after %d loops; options: %s\n", p.Loops, strings.Join(p.Options, " | "))
	pr.res.Stdout = pr.log.String()
	pr.res.ExitCode = 1
	pr.res.Error = fmt.Sprintf("pipeline failed after %d loops: %s", p.Loops, lastLines(p.Feedback[len(p.Feedback)-1], 3))
	pr.finishReport(edited, generated, answer)
	pr.ctl.publish(p)
	return p, nil
}

// stopped ends the pipeline when the user interrupted the stage: the node
// fails with the stage's partial output.
func (pr *pipelineRun) stopped(ctx, sctx context.Context, done func(), p *orchestratorv1.PipelineStatus, stage string) bool {
	if ctx.Err() != nil || !errors.Is(context.Cause(sctx), errInterrupted) {
		return false
	}
	done()
	_, why := pr.ctl.isInterrupted()
	p.State = pipeFailed
	p.Options = FailureOptions(pr.task.GetNodeId())
	fmt.Fprintf(&pr.log, "\nloop %d: %s stage interrupted by the user\n", p.Loops, stage)
	limit := pr.s.cfg.MaxOutputBytes / 2
	partialOut, _ := pr.last.RenderStdout(limit)
	partialErr, _ := pr.last.RenderStderr(limit)
	if partialOut != "" {
		pr.log.WriteString("--- partial output ---\n" + partialOut)
	}
	pr.res.Stdout = pr.log.String()
	pr.res.Stderr = partialErr
	pr.res.ExitCode = -1
	pr.res.Error = interruptedError(stage, why)
	pr.report.Implemented = "interrupted by the user during the " + stage + " stage"
	pr.ctl.publish(p)
	return true
}

func interruptedError(stage, why string) string {
	msg := "interrupted by the user during the " + stage + " stage"
	if why != "" {
		msg += ": " + why
	}
	return msg
}

// finishReport fills the report from what the Engineer did.
func (pr *pipelineRun) finishReport(edited, generated []string, a *modelAnswer) {
	pr.report.Implemented = implementedText(edited, pr.task.GetCommand(), generated, a)
	if a != nil {
		pr.report.Decisions = orNone(a.Decisions)
		if a.Deviations != "" && !strings.EqualFold(a.Deviations, "none") {
			pr.report.Deviations = a.Deviations
		}
		if a.Concerns != "" && !strings.EqualFold(a.Concerns, "none") && pr.report.Concerns == "none" {
			pr.report.Concerns = a.Concerns
		}
	}
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "none"
	}
	return s
}

func appendUnique(list []string, more ...string) []string {
	for _, m := range more {
		found := false
		for _, x := range list {
			if x == m {
				found = true
				break
			}
		}
		if !found {
			list = append(list, m)
		}
	}
	return list
}

// guided is the node's spec with the guidance the user gave while the task
// runs added to what it was dispatched with.
func (pr *pipelineRun) guided() *orchestratorv1.Node {
	live := pr.ctl.userGuidance()
	if len(live) == 0 {
		return pr.spec
	}
	spec := proto.Clone(pr.spec).(*orchestratorv1.Node)
	for _, g := range live {
		if !slices.Contains(spec.Guidance, g) {
			spec.Guidance = append(spec.Guidance, g)
		}
	}
	return spec
}

package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

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

// pipelineRun is one pipeline node's Engineer -> Inspector -> Tester loop.
type pipelineRun struct {
	*taskRun
	// run runs a stage's command, keeping the last one's result.
	run stageRunner
	ctl *taskControl
	// last is the last command a stage ran: its output is kept when the
	// stage is interrupted.
	last toolexec.Result
	log  strings.Builder
	// agent is the Engineer when a language model writes the code, nil
	// otherwise; window is its model's context window in tokens, and turns
	// counts the times it was given the task or feedback.
	agent  *taskAgent
	window int
	turns  int
	// What the loop carries from one stage and one loop to the next: the
	// node's own edits, the files the model wrote and its last answer, and
	// the feedback for the Engineer's next turn.
	edited, generated []string
	answer            *modelAnswer
	feedback          []string
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
func (s *Service) runPipeline(ctx context.Context, t *taskRun) (*orchestratorv1.PipelineStatus, error) {
	pr := &pipelineRun{taskRun: t, ctl: controlOf(ctx, true)}
	pr.ctl.markPipeline()
	// Overrides given before this attempt are the user's as much as those
	// given while it runs: they show in the status and the report.
	if t.spec.GetIgnoreInspector() {
		pr.ctl.noteOverride("ignore_inspector")
	}
	if t.spec.GetIgnoreTester() {
		pr.ctl.noteOverride("ignore_tester")
	}
	if len(t.spec.GetGuidance()) > 0 {
		pr.ctl.noteOverride("prompt")
	}
	if s.engineerReads(t.spec) {
		a, err := t.newAgent(ctx, dagRoleEngineer, pr.handoffHook)
		if err != nil {
			return nil, err
		}
		defer a.close()
		pr.agent, pr.window = a, s.engineerWindow()
		t.agent = a
	}
	pr.run = func(ctx context.Context, command string) (toolexec.Result, error) {
		r, err := t.runCmd(ctx, command)
		pr.last = r
		return r, err
	}
	p, err := pr.loop(ctx)
	if err == nil && (p.GetState() == pipeCompleted || p.GetState() == pipeFailed) {
		pr.checkpoint(ctx, p)
	}
	t.res.Handoff = pr.handoff
	if p != nil {
		p.Overrides = pr.ctl.overrides()
		p.Stage = pr.ctl.snapshot().GetStage()
		if len(p.Overrides) > 0 {
			t.report.Deviations = "user overrides: " + strings.Join(p.Overrides, ", ")
		}
	}
	return p, err
}

// loop runs the pipeline's loops until the Inspector and the Tester have
// nothing more to say, the loops run out, the user stops a stage, or the
// pipeline hands off.
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
	if !pr.applyNodeEdits(p) {
		return p, nil
	}
	for p.Loops < maxLoops {
		// The Engineer's next turn: or, when its conversation reached the
		// threshold or the user asked, a fresh pipeline's (spec F-23). A
		// pipeline gets at least one loop, so that a chain of handoffs
		// always moves on.
		if p.Loops > 0 {
			if trigger, usage := pr.handoffDue(); trigger != "" {
				pr.handOff(ctx, p, trigger, usage, pr.feedback, pr.edited, pr.generated, pr.answer)
				return p, nil
			}
		}
		p.Loops++
		p.State = pipeRunning
		pr.ctl.publish(p)
		for _, stage := range []func(context.Context, *orchestratorv1.PipelineStatus) (bool, error){
			pr.engineerStage, pr.inspectorStage, pr.testerStage,
		} {
			if stop, err := stage(ctx, p); stop || err != nil {
				return p, err
			}
		}
		if len(pr.feedback) == 0 {
			p.State = pipeCompleted
			fmt.Fprintf(&pr.log, "pipeline completed after %d loop(s)\n", p.Loops)
			pr.res.Stdout = pr.log.String()
			pr.finishReport(pr.edited, pr.generated, pr.answer)
			pr.ctl.publish(p)
			return p, nil
		}
		p.Feedback = append(p.Feedback, fmt.Sprintf("loop %d: %s", p.Loops, strings.Join(pr.feedback, "\n")))
		pr.ctl.publish(p)
	}
	p.State = pipeFailed
	p.Options = FailureOptions(pr.d.GetNodeId())
	fmt.Fprintf(&pr.log, "pipeline failed after %d loops; options: %s\n", p.Loops, strings.Join(p.Options, " | "))
	pr.res.Stdout = pr.log.String()
	pr.res.ExitCode = 1
	pr.res.Error = fmt.Sprintf("pipeline failed after %d loops: %s", p.Loops, lastLines(p.Feedback[len(p.Feedback)-1], 3))
	pr.finishReport(pr.edited, pr.generated, pr.answer)
	pr.ctl.publish(p)
	return p, nil
}

// applyNodeEdits writes the node's own edits before the first loop (a
// pipeline carrying on from a handoff has them in the files the old one
// left). It reports false when they could not be written: the pipeline
// then failed.
func (pr *pipelineRun) applyNodeEdits(p *orchestratorv1.PipelineStatus) bool {
	if h := pr.spec.GetHandoff(); h != nil {
		fmt.Fprintf(&pr.log, "carrying on from %s (handoff %d: %s)\n", h.GetOldPipelineId(), h.GetHandoffIndex(), h.GetReason())
		return true
	}
	edited, err := applyEdits(pr.dir, editsOf(pr.spec))
	if err != nil {
		pr.res.ExitCode, pr.res.Error = 1, err.Error()
		p.State = pipeFailed
		return false
	}
	pr.edited = edited
	if len(edited) > 0 {
		pr.accomplished = append(pr.accomplished, "applied the node's edits to "+strings.Join(edited, ", "))
	}
	return true
}

// engineerStage takes the Engineer's turn on the feedback of the loop
// before, then runs the node's command. stop ends the pipeline (the user
// interrupted the stage).
func (pr *pipelineRun) engineerStage(ctx context.Context, p *orchestratorv1.PipelineStatus) (stop bool, err error) {
	fmt.Fprintf(&pr.log, "loop %d: engineer", p.Loops)
	sctx, done := pr.ctl.stage(ctx, stageEngineer)
	gen, ans, gerr := pr.engineer(sctx, pr.feedback)
	if pr.stopped(ctx, sctx, done, p, stageEngineer) {
		return true, nil
	}
	if errors.Is(gerr, errHandoffDue) {
		done()
		pr.generated = appendUnique(pr.generated, gen...)
		pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: wrote %s before the handoff", p.Loops, orNone(strings.Join(gen, ", "))))
		pr.log.WriteString("\n")
		trigger, usage := pr.handoffDue()
		pr.handOff(ctx, p, cmp.Or(trigger, triggerContext), usage, pr.feedback, pr.edited, pr.generated, pr.answer)
		return true, nil
	}
	pr.feedback = nil
	switch {
	case gerr != nil:
		pr.feedback = append(pr.feedback, "engineer: "+gerr.Error())
		fmt.Fprintf(&pr.log, " (the model's edits could not be used: %s)", gerr)
		pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: the model's edits could not be used: %s", p.Loops, gerr))
	case ans != nil:
		pr.generated, pr.answer = appendUnique(pr.generated, gen...), ans
		fmt.Fprintf(&pr.log, " (the model wrote %s)", strings.Join(gen, ", "))
		pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: wrote %s: %s", p.Loops, strings.Join(gen, ", "), orNone(ans.Summary)))
	case p.Loops > 1:
		pr.log.WriteString(" (no language model: the feedback cannot be acted on beyond re-running the node's command)")
	}
	pr.log.WriteString("\n")
	if command := pr.spec.GetCommand(); command != "" && len(pr.feedback) == 0 {
		r, err := pr.run(sctx, command)
		if pr.stopped(ctx, sctx, done, p, stageEngineer) {
			return true, nil
		}
		if err != nil {
			done()
			return false, err
		}
		pr.accomplished = append(pr.accomplished, fmt.Sprintf("loop %d: ran %s (exit %d)", p.Loops, command, r.ExitCode))
		if r.ExitCode != 0 {
			pr.feedback = append(pr.feedback, fmt.Sprintf("engineer command failed (exit %d): %s", r.ExitCode, strings.TrimSpace(lastLines(r.Stdout+r.Stderr, 10))))
		}
	}
	done()
	return false, nil
}

// inspectorStage inspects the Engineer's changes unless the Engineer's
// turn already failed or the user skips the Inspector; its failures, past
// the validation gate, are the Engineer's next feedback.
func (pr *pipelineRun) inspectorStage(ctx context.Context, p *orchestratorv1.PipelineStatus) (stop bool, err error) {
	var changed []string
	if pr.wsp != nil {
		changed, _ = pr.wsp.changedFiles(ctx)
	}
	ignore := pr.spec.GetIgnoreInspector() || pr.ctl.ignored(stageInspector)
	p.InspectorPassed, p.TesterPassed = ignore, false
	if ignore {
		pr.inspection = "skipped"
		fmt.Fprintf(&pr.log, "loop %d: inspector skipped (ignore_inspector)\n", p.Loops)
		return false, nil
	}
	if len(pr.feedback) > 0 {
		return false, nil
	}
	p.State = pipeInspecting
	pr.ctl.publish(p)
	sctx, done := pr.ctl.stage(ctx, stageInspector)
	ok, issues, err := inspect(sctx, pr.dir, pr.run, changed)
	var rv *orchestratorv1.Review
	if err == nil && ok && sctx.Err() == nil {
		// The model reviews what the linters passed (review.go).
		rv = pr.review(sctx, p.Loops)
	}
	if pr.stopped(ctx, sctx, done, p, stageInspector) {
		return true, nil
	}
	ignoredNow := errors.Is(context.Cause(sctx), errStageIgnored)
	done()
	switch {
	case ignoredNow:
		p.InspectorPassed = true
		fmt.Fprintf(&pr.log, "loop %d: inspector stopped and ignored by the user\n", p.Loops)
	case err != nil:
		return false, err
	default:
		blocking, others := pr.takeReview(ctx, rv, p.Loops)
		passed := ok && len(blocking) == 0
		p.InspectorPassed = passed
		pr.findings, pr.inspection = append(pr.findings, slices.Concat(issues, blocking, others)), passWord(passed)
		fmt.Fprintf(&pr.log, "loop %d: inspector %s (%d findings)\n", p.Loops, passWord(passed), len(issues)+len(blocking)+len(others))
		if ok && len(issues)+len(others) > 0 {
			pr.report.Concerns = strings.Join(slices.Concat(issues, others), "; ")
		}
		switch {
		case !ok:
			pr.feedback = append(pr.feedback, pr.gateCorrections("inspector", issues, rootCauseOther)...)
		case len(blocking) > 0:
			pr.feedback = append(pr.feedback, pr.gateCorrections("inspector", blocking, rootCauseOther)...)
		}
	}
	return false, nil
}

// testerStage runs the tests unless an earlier stage failed or the user
// skips the Tester; their failures, past the validation gate, are the
// Engineer's next feedback.
func (pr *pipelineRun) testerStage(ctx context.Context, p *orchestratorv1.PipelineStatus) (stop bool, err error) {
	ignore := pr.spec.GetIgnoreTester() || pr.ctl.ignored(stageTester)
	if ignore {
		p.TesterPassed = true
		pr.report.Tested = "not tested: ignore_tester"
	}
	if len(pr.feedback) > 0 || ignore {
		return false, nil
	}
	p.State = pipeTesting
	pr.ctl.publish(p)
	sctx, done := pr.ctl.stage(ctx, stageTester)
	tr, detected, err := runTests(sctx, pr.dir, pr.run)
	if pr.stopped(ctx, sctx, done, p, stageTester) {
		return true, nil
	}
	ignoredNow := errors.Is(context.Cause(sctx), errStageIgnored)
	done()
	switch {
	case ignoredNow:
		p.TesterPassed = true
		pr.report.Tested = "not tested: the Tester was stopped and ignored by the user"
		fmt.Fprintf(&pr.log, "loop %d: tester stopped and ignored by the user\n", p.Loops)
	case err != nil:
		return false, err
	case !detected:
		p.TesterPassed = true
		pr.report.Tested = "not tested: no test framework detected"
	default:
		p.LastTestResult = tr
		p.TesterPassed = tr.GetFailed() == 0
		pr.report.Tested = fmt.Sprintf("%s: %d passed, %d failed, %d skipped", tr.GetFrameworkId(), tr.GetPassed(), tr.GetFailed(), tr.GetSkipped())
		fmt.Fprintf(&pr.log, "loop %d: tester %s (%s)\n", p.Loops, passWord(p.TesterPassed), pr.report.Tested)
		pr.testFailures = testFeedback(tr)
		pr.feedback = append(pr.feedback, pr.gateCorrections("tester", pr.testFailures, rootCauseTest)...)
	}
	return false, nil
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
	p.Options = FailureOptions(pr.d.GetNodeId())
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
	pr.report.Implemented = implementedText(edited, pr.spec.GetCommand(), generated, a)
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

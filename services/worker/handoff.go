package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/textsearch"
)

// Memory management of the Engineer (spec F-21, F-23). A pipeline's
// Engineer keeps one conversation across its loops (its agent loop: the
// task, its tool calls and their results, then each loop's feedback), with
// old tool results masked. Once a turn's prompt fills its context window to
// the handoff threshold (-worker.handoff-at, 95%), or when the user asks, it
// ends the pipeline with the state of all three stages instead. The
// Orchestrator closes the pipeline, stores the state in the Archivalist and
// starts a fresh pipeline of the same node from it and from the old
// pipeline's files.

// Handoff triggers, for the metric and the reason.
const (
	triggerContext  = "context"
	triggerUser     = "user"
	triggerShutdown = "shutdown"
	reasonUser      = "user_request"
	// reasonShutdown: the worker is stopping (drain.go), and the pipeline
	// carries on in a fresh one elsewhere rather than start again.
	reasonShutdown = "worker_shutdown"
)

// Bounds of what a handoff carries: the newest entries of each list, each
// entry cut to its byte bound.
const (
	maxHandoffItems     = 50
	maxHandoffItemBytes = 1000
	maxHandoffOutput    = 4 << 10
)

// engineerWindow is the context window the Engineer's handoff threshold
// applies to: -worker.engineer-context-tokens, else the model catalogue's
// for the default provider's resolution of -worker.engineer-model.
func (s *Service) engineerWindow() int {
	if s.cfg.EngineerContextTokens > 0 {
		return s.cfg.EngineerContextTokens
	}
	if g, ok := s.model.(*gate.Gate); ok {
		p := g.Providers().Default()
		m, _ := llm.LookupModel(p.Name(), p.Resolve(s.cfg.EngineerModel))
		return m.MaxContext
	}
	return llm.DefaultMaxContext
}

// contextUsage is the share of the Engineer's window its last turn's prompt
// filled.
func (pr *pipelineRun) contextUsage() float64 {
	if pr.agent == nil || pr.window <= 0 {
		return 0
	}
	return float64(pr.agent.lastInput()) / float64(pr.window)
}

// errHandoffDue ends the Engineer's turn to hand the pipeline off.
var errHandoffDue = errors.New("handoff due")

// handoffHook stops the Engineer's loop for a handoff: when its last
// turn's prompt filled its context window to the threshold, or the user
// asked. It lets a fresh pipeline make a few calls first, so that a chain of
// handoffs always moves on.
func (pr *pipelineRun) handoffHook(res agent.Result, _ llm.Usage) string {
	if res.ToolCalls < minCallsBeforeHandoff {
		return ""
	}
	if trigger, _ := pr.handoffDue(); trigger != "" {
		return "handoff"
	}
	return ""
}

// minCallsBeforeHandoff is how many tool calls a pipeline's Engineer makes
// before it may hand off.
const minCallsBeforeHandoff = 3

// engineer takes the Engineer's turn: the task first, then each loop's
// feedback and the user's new guidance, in one conversation. Without a
// model it does nothing.
func (pr *pipelineRun) engineer(ctx context.Context, feedback []string) ([]string, *modelAnswer, error) {
	if pr.agent == nil {
		return nil, nil, nil
	}
	var msg string
	if pr.turns == 0 {
		msg = pr.brief(ctx)
	} else {
		msg = feedbackTurn(feedback, pr.agent.help.unseen())
	}
	pr.turns++
	before := pr.agent.writtenCount()
	res, err := pr.agent.run(ctx, msg)
	if err != nil {
		return nil, nil, fmt.Errorf("the model call failed: %w", err)
	}
	written := pr.agent.writtenSince(before)
	if res.Stop == agent.StopHook {
		return written, answerOf(pr.agent.finishedReport()), errHandoffDue
	}
	if res.Stop != agent.StopFinished {
		return written, nil, fmt.Errorf("the engineer stopped before finishing: %s (%s)", res.Stop, res.Detail)
	}
	return written, answerOf(pr.agent.finishedReport()), nil
}

// handoffDue says whether the pipeline hands off before the Engineer's
// next turn, and why, with the share of the window that turn would fill.
func (pr *pipelineRun) handoffDue() (trigger string, usage float64) {
	usage = pr.contextUsage()
	switch {
	case pr.ctl.handoffAsked():
		return triggerUser, usage
	case pr.s.stopping.Load():
		return triggerShutdown, usage
	case usage >= pr.s.cfg.HandoffAt:
		return triggerContext, usage
	}
	return "", usage
}

// handOff ends the pipeline with its state for a fresh one.
func (pr *pipelineRun) handOff(ctx context.Context, p *orchestratorv1.PipelineStatus, trigger string, usage float64, feedback, edited, generated []string, answer *modelAnswer) {
	h := pr.bundle(ctx, p, trigger, usage, feedback, answer)
	pr.handoff = h
	pr.s.metrics.handoffs.WithLabelValues(trigger).Inc()
	p.State = pipeHandedOff
	why := "the user asked for a handoff"
	switch trigger {
	case triggerContext:
		why = fmt.Sprintf("the Engineer's conversation fills %.0f%% of its %d-token context window", 100*usage, pr.window)
	case triggerShutdown:
		why = "the worker is stopping"
	}
	fmt.Fprintf(&pr.log, "loop %d: %s: handing the pipeline's state to a fresh pipeline (handoff %d)\n", p.Loops, why, h.GetHandoffIndex())
	pr.res.Stdout = pr.log.String()
	pr.finishReport(edited, generated, answer)
	pr.report.Implemented = fmt.Sprintf("handed off to a fresh pipeline after %d loop(s) (%s); so far: %s", p.Loops, h.GetReason(), pr.report.Implemented)
	pr.ctl.publish(p)
}

// bundle gathers the three stages' state (spec F-23 PipelineHandoff),
// carrying on the lists of the handoff this pipeline started from.
func (pr *pipelineRun) bundle(ctx context.Context, p *orchestratorv1.PipelineStatus, trigger string, usage float64, feedback []string, answer *modelAnswer) *orchestratorv1.PipelineHandoff {
	prev := pr.spec.GetHandoff()
	reason := reasonUser
	switch trigger {
	case triggerContext:
		reason = fmt.Sprintf("engineer_context_%d%%", int(math.Round(100*pr.s.cfg.HandoffAt)))
	case triggerShutdown:
		reason = reasonShutdown
	}
	var changed []string
	if pr.wsp != nil {
		changed, _ = pr.wsp.changedFiles(ctx)
	}
	original := pr.spec.GetPrompt()
	if original == "" {
		original = pr.spec.GetCommand()
	}
	remaining := slices.Clone(feedback)
	if d := pr.spec.GetDoneWhen(); d != "" {
		remaining = append(remaining, "done when: "+d)
	}
	var notes []string
	notes = append(notes, prev.GetEngineer().GetContextNotes()...)
	if answer != nil {
		for _, n := range []struct{ name, text string }{{"decisions", answer.Decisions}, {"deviations", answer.Deviations}, {"concerns", answer.Concerns}} {
			if t := strings.TrimSpace(n.text); t != "" && !strings.EqualFold(t, "none") {
				notes = append(notes, n.name+": "+t)
			}
		}
	}
	for _, g := range pr.guided().GetGuidance() {
		notes = appendUnique(notes, "the user's guidance: "+g)
	}
	in, t := pr.inspectorState(), pr.testerState(p, changed)
	h := &orchestratorv1.PipelineHandoff{
		OldPipelineId:       pipeline.ID(pr.d.GetRunId(), pr.d.GetNodeId(), pr.d.GetAttempt()),
		SessionId:           pr.d.GetSessionId(),
		RunId:               pr.d.GetRunId(),
		NodeId:              pr.d.GetNodeId(),
		Reason:              reason,
		HandoffIndex:        prev.GetHandoffIndex() + 1,
		ContextUsage:        usage,
		ContextWindowTokens: int64(pr.windowTokens()),
		Engineer: &orchestratorv1.EngineerHandoff{
			OriginalPrompt: textsearch.Clip(original, 4*maxHandoffItemBytes),
			Accomplished:   append(slices.Clone(prev.GetEngineer().GetAccomplished()), pr.accomplished...),
			FilesChanged:   changed,
			Remaining:      remaining,
			ContextNotes:   notes,
		},
		Inspector:  in,
		Tester:     t,
		CreateTime: timestamppb.Now(),
	}
	for _, l := range []*[]string{&h.Engineer.Accomplished, &h.Engineer.FilesChanged, &h.Engineer.Remaining, &h.Engineer.ContextNotes} {
		*l = boundList(*l)
	}
	return h
}

// inspectorState is the Inspector's part of a pipeline's state, carrying on
// the fixes of the handoff this pipeline started from.
func (pr *pipelineRun) inspectorState() *orchestratorv1.InspectorHandoff {
	in := &orchestratorv1.InspectorHandoff{ValidationState: "not_run",
		FixesCompleted: slices.Clone(pr.spec.GetHandoff().GetInspector().GetFixesCompleted())}
	if pr.inspection != "" {
		in.ValidationState = pr.inspection
	}
	if len(pr.findings) > 0 {
		for _, c := range inspectorChecks(pr.dir) {
			in.ChecksPerformed = append(in.ChecksPerformed, c.name)
		}
		last := pr.findings[len(pr.findings)-1]
		in.FixesRemaining = slices.Clone(last)
		for _, f := range pr.findings[:len(pr.findings)-1] {
			for _, x := range f {
				if !slices.Contains(last, x) {
					in.FixesCompleted = appendUnique(in.FixesCompleted, x)
				}
			}
		}
	}
	for _, l := range []*[]string{&in.ChecksPerformed, &in.FixesCompleted, &in.FixesRemaining} {
		*l = boundList(*l)
	}
	return in
}

// testerState is the Tester's part of a pipeline's state; changed are the
// files the pipeline changed.
func (pr *pipelineRun) testerState(p *orchestratorv1.PipelineStatus, changed []string) *orchestratorv1.TesterHandoff {
	tests, coverage := testsOf(changed)
	t := &orchestratorv1.TesterHandoff{TestsCreated: tests, FailureDescs: slices.Clone(pr.testFailures), CoverageNeeded: coverage}
	if r := p.GetLastTestResult(); r != nil {
		t.TestResults = proto.Clone(r).(*orchestratorv1.TestResult)
		t.TestResults.Output = truncateString(t.TestResults.GetOutput(), maxHandoffOutput)
	}
	for _, l := range []*[]string{&t.TestsCreated, &t.FailureDescs, &t.CoverageNeeded} {
		*l = boundList(*l)
	}
	return t
}

func (pr *pipelineRun) windowTokens() int {
	if pr.agent == nil {
		return 0
	}
	return pr.window
}

// boundList keeps the newest maxHandoffItems entries, each cut to
// maxHandoffItemBytes.
func boundList(l []string) []string {
	if len(l) > maxHandoffItems {
		l = l[len(l)-maxHandoffItems:]
	}
	for i, x := range l {
		l[i] = textsearch.Clip(x, maxHandoffItemBytes)
	}
	return l
}

// testsOf splits changed files into tests and the source files with no
// changed test in their directory.
func testsOf(changed []string) (tests, untested []string) {
	dirs := map[string]bool{}
	for _, f := range changed {
		if isTestFile(f) {
			tests = append(tests, f)
			dirs[path.Dir(f)] = true
		}
	}
	for _, f := range changed {
		if !isTestFile(f) && isSource(f) && !dirs[path.Dir(f)] {
			untested = append(untested, f)
		}
	}
	return tests, untested
}

func isTestFile(f string) bool {
	base := path.Base(f)
	ext := path.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	switch {
	case strings.HasSuffix(stem, "_test"), strings.HasPrefix(stem, "test_"),
		strings.HasSuffix(stem, ".test"), strings.HasSuffix(stem, ".spec"):
		return true
	}
	for _, d := range strings.Split(path.Dir(f), "/") {
		if d == "tests" || d == "test" || d == "__tests__" {
			return true
		}
	}
	return false
}

func isSource(f string) bool {
	switch path.Ext(f) {
	case ".go", ".py", ".js", ".jsx", ".ts", ".tsx", ".rs", ".java", ".kt", ".rb", ".c", ".cc", ".cpp", ".h", ".cs", ".php", ".swift":
		return true
	}
	return false
}

// handoffSection tells the Engineer of a fresh pipeline what the one before
// it did.
func handoffSection(h *orchestratorv1.PipelineHandoff) string {
	if h == nil {
		return ""
	}
	return "\n## You carry on from an earlier pipeline of this task\n\n" +
		"The files below already hold its changes. Do not redo what it accomplished; finish what remains.\n\n" +
		strings.Replace(strings.ReplaceAll(pipeline.HandoffText(h), "\n## ", "\n#### "), "# Pipeline handoff", "### Pipeline handoff", 1)
}

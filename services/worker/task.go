package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/toolexec"
)

// maxPatchBytes bounds a patch carried in a result.
const maxPatchBytes = 256 << 10

// UpstreamDirEnv names the directory holding one file per dependency, named
// after it, with its stdout.
const UpstreamDirEnv = "SYLK_UPSTREAM_DIR"

// dagRoleEngineer is the role that runs pipelines.
const dagRoleEngineer = "engineer"

// taskRun is one dispatch as it runs: its directory, its commands'
// environment, and the result and report it fills.
type taskRun struct {
	s    *Service
	d    *taskv1.TaskDispatch
	spec *orchestratorv1.Node
	role string
	res  *taskv1.TaskResult
	// report is the structured report (spec H-06); pipe, the pipeline's
	// status for a pipeline node.
	report *orchestratorv1.TaskReport
	pipe   *orchestratorv1.PipelineStatus
	// scope is whose directories and caches the task uses (scratchPool).
	scope string
	// ws is the task directory; dir is where its commands run: ws, or the
	// checkout of the run's repository in it (wsp).
	ws, dir  string
	wsp      *workspace
	vars     map[string]string
	writable []string
	// limit is the most output of each stream the result carries.
	limit   int
	timeout time.Duration
	// agent is the node's agent once one worked on it.
	agent *taskAgent
	// cleanup undoes what prepare set up, last first.
	cleanup []func()
}

// taskOutcome is a TaskResult plus the tool result it was rendered from.
type taskOutcome struct {
	msg  *taskv1.TaskResult
	tool *toolexec.Result
	// retry is set when the task could not run yet (no subprocess slot) and
	// should go back to the queue.
	retry bool
}

// runTask runs a dispatch: in a fresh workspace (a clone of the run's
// repository at its starting commit when there is one), the node's edits
// and command, the whole Engineer -> Inspector -> Tester pipeline for
// pipeline nodes, or a run's session-level check. It reports cancelled
// when ctx ended before the task did.
func (s *Service) runTask(ctx context.Context, role string, d *taskv1.TaskDispatch) (taskOutcome, bool) {
	t := s.newTaskRun(role, d)
	if t.nothingToRun() {
		return t.noModel(), false
	}
	failure, cancelled := t.prepare(ctx)
	defer t.close()
	switch {
	case cancelled:
		return taskOutcome{}, true
	case failure != "":
		return t.fail(failure)
	case d.GetSessionCheck() != nil:
		return s.sessionCheck(ctx, t, d.GetSessionCheck().GetResultPatch())
	case d.GetReview() != nil:
		return s.reviewTask(ctx, t) // reviewtask.go
	}
	out, cancelled, ended := t.execute(ctx)
	if ended {
		if t.agent != nil && out.msg != nil {
			// What the agent did before the task failed is shown too.
			out.msg.Report = t.report
		}
		return out, cancelled
	}
	t.collectChanges(ctx)
	t.res.NoChangesReason = t.noChangesReason()
	t.res.Report, t.res.Pipeline = t.report, t.pipe
	return out, false
}

// noChangesReason says why a task that was asked to change the code (an
// Engineer's prompt) changed nothing, or "" when it changed something, was
// not asked to, or failed. A prompt no model acted on counts for every
// role: nothing happened.
func (t *taskRun) noChangesReason() string {
	if t.spec.GetPrompt() == "" || t.res.GetExitCode() != 0 || t.res.GetError() != "" || t.res.GetPatch() != "" {
		return ""
	}
	switch {
	case t.agent == nil && t.spec.GetCommand() == "" && len(t.spec.GetEdits()) == 0:
		return NoModelReason
	case t.agent == nil || t.role != dagRoleEngineer:
		return ""
	case t.wsp == nil && len(t.agent.writtenSince(0)) > 0:
		// Without a repository there is no patch: the files written count.
		return ""
	}
	return stopWords(t.agent.result(), t.agent.finishedReport())
}

// newTaskRun starts the result of dispatch d: every result names the
// dispatch and echoes its fence.
func (s *Service) newTaskRun(role string, d *taskv1.TaskDispatch) *taskRun {
	limit := s.cfg.MaxOutputBytes
	if l := d.GetOutputLimitBytes(); l > 0 && l < int64(limit) {
		limit = int(l)
	}
	var timeout time.Duration
	if t := d.GetTimeout(); t != nil && t.AsDuration() > 0 {
		timeout = t.AsDuration()
	}
	spec := d.GetNode()
	if spec == nil {
		spec = &orchestratorv1.Node{}
	}
	return &taskRun{s: s, d: d, spec: spec, role: role, res: s.newResult(d), limit: limit, timeout: timeout,
		// Directories are reused only among the tasks of one user (scratchPool).
		scope: d.GetTenantId() + "\x00" + d.GetUserId(),
		report: &orchestratorv1.TaskReport{Decisions: "none", Deviations: "none", Concerns: "none", Tested: "not tested",
			Briefing: briefingLine(spec.GetRetryBriefing())}}
}

// nothingToRun says whether the dispatch asks for nothing the worker can
// do: a prompt only, and no language model to act on it.
func (t *taskRun) nothingToRun() bool {
	// A pipeline of a prompt alone would only run the Inspector and the
	// Tester over the unchanged code, loop after loop; a pipeline with no
	// prompt is asked for just that, its checks.
	if t.spec.GetPipeline() && (t.spec.GetPrompt() == "" || t.spec.GetHandoff() != nil) {
		return false
	}
	return t.spec.GetCommand() == "" && len(t.spec.GetEdits()) == 0 && !t.s.agentReads(t.spec) && t.d.GetSessionCheck() == nil &&
		t.d.GetReview() == nil
}

// noModel is the outcome of a prompt-only node no model acts on: it
// changed nothing (NO_CHANGES), and says why.
func (t *taskRun) noModel() taskOutcome {
	t.res.Stdout = NoModelOutput
	t.res.NoChangesReason = NoModelReason
	t.res.Report = &orchestratorv1.TaskReport{Implemented: "nothing: " + NoModelOutput, Tested: "not tested", Decisions: "none",
		Deviations: "none", Concerns: "no language model is configured"}
	return taskOutcome{msg: t.res}
}

// fail ends the task with an error that is not its command's.
func (t *taskRun) fail(msg string) (taskOutcome, bool) {
	t.res.ExitCode = -1
	t.res.Error = msg
	return taskOutcome{msg: t.res}, false
}

// prepare makes the task's directory, its dependencies' outputs, its
// environment and, for a run with a repository, its checkout. It returns
// why the task cannot run, or cancelled when ctx ended meanwhile.
func (t *taskRun) prepare(ctx context.Context) (failure string, cancelled bool) {
	ws, err := t.s.scratch.get(t.scope)
	if err != nil {
		t.s.log.ErrorContext(ctx, "create task workspace", logx.Err(err))
		if ws != "" {
			removeWorkspace(ws)
		}
		return "could not create the task workspace", false
	}
	t.cleanup = append(t.cleanup, func() { t.s.scratch.put(t.scope, ws) })
	t.ws, t.dir = ws, ws
	t.vars = map[string]string{"HOME": ws, "TMPDIR": filepath.Join(ws, ".tmp")}
	if err := t.writeUpstream(); err != nil {
		return "could not create the task workspace", false
	}
	t.toolEnv(ctx)
	// A review task reads its repository itself (reviewtask.go).
	if t.d.GetRepository() == "" || t.d.GetReview() != nil {
		return "", false
	}
	return t.checkout(ctx)
}

// writeUpstream gives the task its dependencies' outputs (spec F-04): one
// file per dependency.
func (t *taskRun) writeUpstream() error {
	up := t.d.GetUpstreamOutputs()
	if len(up) == 0 {
		return nil
	}
	updir := filepath.Join(t.ws, ".upstream")
	if err := t.s.scratch.mkdir(t.scope, updir); err != nil {
		return err
	}
	for id, out := range up {
		if err := os.WriteFile(filepath.Join(updir, filepath.Base(filepath.Clean("/"+id))), []byte(out), 0o600); err != nil {
			return err
		}
	}
	t.vars[UpstreamDirEnv] = updir
	return nil
}

// toolEnv adds the worker's tool settings and the user's Go caches to the
// task's environment.
func (t *taskRun) toolEnv(ctx context.Context) {
	for k, v := range t.s.toolEnv {
		t.vars[k] = v
	}
	gocache, gomodcache, err := t.s.userCaches(t.d.GetTenantId(), t.d.GetUserId())
	if err != nil {
		// Go then caches under the task's HOME, for this task only.
		t.s.log.WarnContext(ctx, "create the user's tool caches", logx.Err(err))
		return
	}
	t.vars["GOCACHE"], t.vars["GOMODCACHE"] = gocache, gomodcache
	t.writable = []string{gocache, gomodcache}
}

// checkout clones the run's repository at its starting commit into the
// task directory, with the git guard on the task's PATH, and applies the
// patch a handed-off pipeline left.
func (t *taskRun) checkout(ctx context.Context) (failure string, cancelled bool) {
	wsp, err := openWorkspace(ctx, t.s.log, t.ws, t.d.GetRepository(), t.d.GetBaseCommit(), toolexec.GitEnv(t.s.cfg.Tools.ExtraSecretPatterns),
		func(cmd *exec.Cmd) error { return t.s.exec.StartIn(cmd, t.ws) })
	if err != nil {
		if ctx.Err() != nil {
			return "", true
		}
		t.s.log.WarnContext(ctx, "prepare repository workspace", logx.Err(err))
		return "could not prepare the repository workspace: " + err.Error(), false
	}
	t.cleanup = append(t.cleanup, wsp.close)
	t.wsp, t.dir = wsp, wsp.dir
	t.vars["PATH"] = wsp.guardDir() + string(os.PathListSeparator) + os.Getenv("PATH")
	t.vars["GIT_EXEC_PATH"] = wsp.execPath()
	// Commits the agent makes itself have an author, whatever the host.
	for _, k := range []string{"GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"} {
		t.vars[k] = "Sylk Engineer"
	}
	for _, k := range []string{"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"} {
		t.vars[k] = "engineer@sylk.invalid"
	}
	if deps := t.d.GetDependencyPatches(); len(deps) > 0 {
		if err := wsp.applyDependencies(ctx, deps); err != nil {
			return err.Error(), false
		}
	}
	if sp := t.d.GetStartPatch(); sp != "" {
		// A pipeline carrying on from a handoff starts from the old
		// pipeline's files (spec F-23).
		if err := wsp.applyPatch(ctx, sp); err != nil {
			return "could not apply the handed-off pipeline's changes: " + err.Error(), false
		}
	}
	return "", false
}

// close gives back what prepare set up.
func (t *taskRun) close() {
	for i := len(t.cleanup) - 1; i >= 0; i-- {
		t.cleanup[i]()
	}
	t.cleanup = nil
}

// runCmd runs one of the task's commands in its directory.
func (t *taskRun) runCmd(ctx context.Context, command string) (toolexec.Result, error) {
	return t.s.exec.Execute(ctx, toolexec.Invocation{Command: command, WorkingDir: t.dir, Workspace: t.ws, Env: t.vars,
		Writable: t.writable, CacheScope: t.scope,
		Class: toolexec.ClassPipeline, Priority: int(t.d.GetPriority()), Timeout: t.timeout})
}

// execute runs the node: its pipeline, or its edits, the Engineer's code
// and its command. ended is set when the outcome stands as it is (the task
// could not go on, or was cancelled).
func (t *taskRun) execute(ctx context.Context) (out taskOutcome, cancelled, ended bool) {
	out = taskOutcome{msg: t.res}
	start := time.Now()
	var answer *modelAnswer
	defer func() {
		if t.agent != nil {
			t.agent.report(t.report)
		}
	}()
	if t.spec.GetPipeline() && t.role == dagRoleEngineer {
		pipe, err := t.s.runPipeline(ctx, t)
		if err != nil {
			out, cancelled = t.s.stepError(ctx, err, t.res)
			return out, cancelled, true
		}
		t.pipe = pipe
	} else if answer, cancelled, ended = t.runNode(ctx, &out, start); ended {
		return out, cancelled, true
	}
	t.res.Duration = durationpb.New(time.Since(start))
	switch {
	case answer != nil:
		t.report.Decisions = orNone(answer.Decisions)
		t.report.Deviations = orNone(answer.Deviations)
		t.report.Concerns = orNone(answer.Concerns)
	case t.spec.GetPrompt() != "" && t.pipe == nil && t.agent == nil:
		t.report.Concerns = "the prompt was not acted on: " + NoModelOutput
		if t.spec.GetCommand() == "" && t.res.GetStdout() == "" {
			t.res.Stdout = NoModelOutput
		}
	}
	return out, false, false
}

// runNode runs a node that is not a pipeline: its edits, the Engineer's
// code when a model writes it, then its command.
func (t *taskRun) runNode(ctx context.Context, out *taskOutcome, start time.Time) (answer *modelAnswer, cancelled, ended bool) {
	edited, err := applyEdits(t.dir, editsOf(t.spec))
	if err != nil {
		*out, _ = t.fail(err.Error())
		return nil, false, true
	}
	ctl := controlOf(ctx, false)
	var generated []string
	if t.s.agentReads(t.spec) {
		sctx, done := ctl.stage(ctx, agentStage(t.role))
		generated, answer, err = t.runAgent(sctx)
		interrupted := errors.Is(context.Cause(sctx), errInterrupted)
		done()
		switch {
		case ctx.Err() != nil:
			*out = taskOutcome{}
			return nil, true, true
		case interrupted:
			_, why := ctl.isInterrupted()
			*out, _ = t.fail(interruptedError(agentStage(t.role), why))
			return nil, false, true
		case err != nil:
			*out, _ = t.fail(t.role + ": " + err.Error())
			return nil, false, true
		}
	}
	t.report.Implemented = implementedText(edited, t.spec.GetCommand(), generated, answer)
	if t.spec.GetCommand() != "" {
		cancelled, ended = t.runCommand(ctx, ctl, out, start)
	}
	return answer, cancelled, ended
}

// agentStage is the stage a role's agent runs as.
func agentStage(role string) string {
	switch role {
	case roleTester:
		return stageTester
	case roleInspector:
		return stageInspector
	}
	return stageEngineer
}

// brief is the agent's first message: the task, and for the Engineer the
// failures recorded on its files (pastfailures.go).
func (t *taskRun) brief(ctx context.Context) string {
	b := taskBrief(t.d, t.spec)
	if t.role == dagRoleEngineer {
		b += t.s.pastFailures(ctx, t.d, t.spec, t.role)
	}
	return b
}

// runAgent lets the role's agent carry out the node's prompt. It returns
// the files it wrote and its report; an error when it could not finish.
func (t *taskRun) runAgent(ctx context.Context) ([]string, *modelAnswer, error) {
	a, err := t.newAgent(ctx, t.role, nil)
	if err != nil {
		return nil, nil, err
	}
	t.agent = a
	t.cleanup = append(t.cleanup, a.close)
	res, err := a.run(ctx, t.brief(ctx))
	if err != nil {
		return a.writtenSince(0), nil, fmt.Errorf("the model call failed: %w", err)
	}
	if res.Stop != agent.StopFinished && len(a.writtenSince(0)) == 0 && t.role != dagRoleEngineer {
		return nil, nil, fmt.Errorf("the %s stopped before finishing: %s (%s)", t.role, res.Stop, res.Detail)
	}
	return a.writtenSince(0), answerOf(a.finishedReport()), nil
}

// runCommand runs the node's command as its command stage. A command the
// user interrupted fails the node with its partial output; one the
// Orchestrator cancelled keeps what it printed (spec C-32).
func (t *taskRun) runCommand(ctx context.Context, ctl *taskControl, out *taskOutcome, start time.Time) (cancelled, ended bool) {
	sctx, done := ctl.stage(ctx, stageCommand)
	r, err := t.runCmd(sctx, t.spec.GetCommand())
	interrupted := errors.Is(context.Cause(sctx), errInterrupted)
	done()
	switch {
	case ctx.Err() != nil && err == nil:
		fillResult(t.res, &r, t.limit)
		t.res.Duration = durationpb.New(time.Since(start))
		out.tool = &r
		return true, true
	case ctx.Err() != nil:
		*out = taskOutcome{}
		return true, true
	case interrupted:
		// The partial output is kept (spec F-13).
		fillResult(t.res, &r, t.limit)
		_, why := ctl.isInterrupted()
		t.res.ExitCode, t.res.Error = -1, interruptedError(stageCommand, why)
		out.tool = &r
		t.report.Implemented = t.res.Error
	case err != nil:
		*out, cancelled = t.s.stepError(ctx, err, t.res)
		return cancelled, true
	default:
		fillResult(t.res, &r, t.limit)
		out.tool = &r
	}
	return false, false
}

// collectChanges reports what a task changed in the run's repository: its
// changed files and security findings in the report, its changes committed
// as the result's patch when it succeeded, and every git call it made.
func (t *taskRun) collectChanges(ctx context.Context) {
	if t.wsp == nil {
		return
	}
	// Nothing the task left running may change the checkout while the
	// worker's own git reads it.
	toolexec.SweepOrphans()
	files, err := t.wsp.changedFiles(ctx)
	if err == nil {
		t.report.FilesChanged = files
		f := SecurityFindings(files)
		if h := t.wsp.hidden; len(h) > 0 {
			f = append(f, fmt.Sprintf("not in the patch, hidden by ignore rules the task wrote: %s", strings.Join(h[:min(len(h), 20)], ", ")))
		}
		if c := t.report.Concerns; len(f) > 0 && c != "" && c != "none" {
			// Added to what the stages found (the review's concerns),
			// once: the Inspector's warnings name the same paths.
			f = slices.DeleteFunc(f, func(x string) bool { return strings.Contains(c, x) })
			f = append([]string{c}, f...)
		}
		if len(f) > 0 {
			t.report.Concerns = strings.Join(f, "; ")
		}
	}
	if t.res.GetExitCode() == 0 && t.res.GetError() == "" {
		// The files are staged already: no second pass over them.
		patch, cerr := "", err
		if err == nil {
			patch, cerr = t.wsp.commit(ctx, conventionalMessage(t.d.GetNodeId(), t.spec.GetName()), files)
		}
		switch {
		case cerr != nil:
			t.res.ExitCode, t.res.Error = -1, "could not commit the task's changes: "+cerr.Error()
		case len(patch) > maxPatchBytes:
			t.res.ExitCode, t.res.Error = -1, fmt.Sprintf("the task's patch of %d bytes exceeds the limit of %d", len(patch), maxPatchBytes)
		default:
			t.res.Patch = patch
		}
	}
	t.res.GitAudit = append(t.wsp.audit.list(), t.wsp.agentCalls()...)
}

// stepError maps an executor error: no slot (back to the queue), a
// cancellation, or a command that could not start.
func (s *Service) stepError(ctx context.Context, err error, res *taskv1.TaskResult) (taskOutcome, bool) {
	switch {
	case errors.Is(err, toolexec.ErrPoolTimeout):
		return taskOutcome{retry: true}, false
	case ctx.Err() != nil:
		return taskOutcome{}, true
	}
	s.log.ErrorContext(ctx, "start task command", logx.Err(err))
	res.ExitCode = -1
	res.Error = "could not start the command"
	return taskOutcome{msg: res}, false
}

func fillResult(res *taskv1.TaskResult, r *toolexec.Result, limit int) {
	res.ExitCode = int32(r.ExitCode)
	res.TimedOut = r.TimedOut
	if r.TimedOut {
		res.Error = fmt.Sprintf("timed out after %s (stopped with %s)", r.Timeout, r.KillSignal)
	}
	res.Stdout, res.StdoutTruncated = r.RenderStdout(limit)
	res.Stderr, res.StderrTruncated = r.RenderStderr(limit)
}

func editsOf(n *orchestratorv1.Node) map[string]string {
	if len(n.GetEdits()) == 0 {
		return nil
	}
	out := make(map[string]string, len(n.GetEdits()))
	for _, e := range n.GetEdits() {
		out[e.GetPath()] = e.GetContent()
	}
	return out
}

func implementedText(edited []string, command string, generated []string, a *modelAnswer) string {
	var parts []string
	if len(edited) > 0 {
		parts = append(parts, "wrote "+strings.Join(edited, ", "))
	}
	switch {
	case a != nil && len(generated) > 0:
		parts = append(parts, "the model wrote "+strings.Join(generated, ", ")+": "+orNone(a.Summary))
	case a != nil:
		parts = append(parts, "the model changed no file: "+orNone(a.Summary))
	case len(generated) > 0:
		parts = append(parts, "the model wrote "+strings.Join(generated, ", ")+" and did not finish")
	}
	if command != "" {
		parts = append(parts, "ran `"+command+"`")
	}
	if a == nil && len(generated) == 0 && len(parts) == 0 {
		parts = append(parts, "nothing")
	}
	return strings.Join(parts, "; ")
}

func passWord(ok bool) string {
	if ok {
		return "passed"
	}
	return "failed"
}

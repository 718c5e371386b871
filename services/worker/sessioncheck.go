package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/pipeline"
)

// sessionCheck runs the session-level Inspector and, when it passes, the
// session-level Tester over a run's merged result: the run's starting commit
// with its result patch applied. Its result carries a SessionCheck.
func (s *Service) sessionCheck(ctx context.Context, t *taskRun, resultPatch string) (taskOutcome, bool) {
	chk := &orchestratorv1.SessionCheck{WorkerId: s.cfg.ID}
	res, wsp, dir, run := t.res, t.wsp, t.dir, stageRunner(t.runCmd)
	finish := func() (taskOutcome, bool) {
		if ctx.Err() != nil {
			return taskOutcome{}, true
		}
		res.SessionCheck = chk
		res.Stdout = chk.GetDetail()
		if chk.GetState() != pipeline.CheckPassed {
			res.ExitCode = 1
			res.Error = "session check " + chk.GetState() + ": " + chk.GetDetail()
		}
		return taskOutcome{msg: res}, false
	}
	if wsp == nil {
		chk.State, chk.Detail = pipeline.CheckError, "a session check needs the run's repository"
		return finish()
	}
	if strings.TrimSpace(resultPatch) != "" {
		pf := filepath.Join(wsp.root, ".tmp", "result.patch")
		if err := os.WriteFile(pf, []byte(resultPatch), 0o600); err != nil {
			chk.State, chk.Detail = pipeline.CheckError, "could not write the result patch"
			return finish()
		}
		if _, err := wsp.run(ctx, "apply", "--index", "--binary", pf); err != nil {
			chk.State, chk.Detail = pipeline.CheckError, "the result patch does not apply: "+err.Error()
			return finish()
		}
	}
	changed, _ := wsp.changedFiles(ctx)
	ok, findings, err := inspect(ctx, dir, run, changed)
	if err != nil {
		chk.State, chk.Detail = pipeline.CheckError, "the inspection could not run: "+err.Error()
		return finish()
	}
	chk.InspectorPassed, chk.Findings = ok, findings
	if !ok {
		chk.State = pipeline.CheckFailed
		chk.Detail = fmt.Sprintf("session inspection failed with %d finding(s)", countErrors(findings))
		return finish()
	}
	tr, detected, err := runTests(ctx, dir, run)
	switch {
	case err != nil:
		chk.State, chk.Detail = pipeline.CheckError, "the tests could not run: "+err.Error()
	case !detected:
		chk.TesterPassed = true
		chk.State, chk.Detail = pipeline.CheckPassed, "session inspection passed; no test framework detected"
	default:
		chk.TestResult = tr
		chk.TesterPassed = tr.GetFailed() == 0
		chk.State = pipeline.CheckPassed
		if !chk.TesterPassed {
			chk.State = pipeline.CheckFailed
		}
		chk.Detail = fmt.Sprintf("session inspection passed; session tests (%s): %d passed, %d failed, %d skipped",
			tr.GetFrameworkId(), tr.GetPassed(), tr.GetFailed(), tr.GetSkipped())
	}
	if res.Duration == nil {
		res.Duration = durationpb.New(0)
	}
	return finish()
}

// countErrors counts the findings that are not warnings.
func countErrors(findings []string) int {
	n := 0
	for _, f := range findings {
		if !strings.HasPrefix(f, "warning: ") {
			n++
		}
	}
	return n
}

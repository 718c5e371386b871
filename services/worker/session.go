package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// Session-check states (spec F-06, level 2).
const (
	CheckPending = "pending"
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckError   = "error"
)

// sessionCheck runs the session-level Inspector and, when it passes, the
// session-level Tester over a run's merged result: the run's starting commit
// with its result patch applied. Its result carries a SessionCheck.
func (s *Service) sessionCheck(ctx context.Context, wsp *workspace, dir string, meta map[string]string, run stageRunner, res *messagev1.TaskResult) (taskOutcome, bool) {
	chk := &orchestratorv1.SessionCheck{WorkerId: s.cfg.ID}
	finish := func() (taskOutcome, bool) {
		if ctx.Err() != nil {
			return taskOutcome{}, true
		}
		b, _ := protojson.Marshal(chk)
		res.Stdout = chk.GetDetail()
		if chk.GetState() != CheckPassed {
			res.ExitCode = 1
			res.Error = "session check " + chk.GetState() + ": " + chk.GetDetail()
		}
		return taskOutcome{msg: res, meta: map[string]string{MetaSessionCheck: string(b)}}, false
	}
	if wsp == nil {
		chk.State, chk.Detail = CheckError, "a session check needs the run's repository"
		return finish()
	}
	if patch := meta[MetaResultPatch]; strings.TrimSpace(patch) != "" {
		pf := filepath.Join(wsp.root, ".tmp", "result.patch")
		if err := os.WriteFile(pf, []byte(patch), 0o600); err != nil {
			chk.State, chk.Detail = CheckError, "could not write the result patch"
			return finish()
		}
		if _, err := wsp.run(ctx, "apply", "--index", "--binary", pf); err != nil {
			chk.State, chk.Detail = CheckError, "the result patch does not apply: "+err.Error()
			return finish()
		}
	}
	changed, _ := wsp.changedFiles(ctx)
	ok, findings, err := inspect(ctx, dir, run, changed)
	if err != nil {
		chk.State, chk.Detail = CheckError, "the inspection could not run: "+err.Error()
		return finish()
	}
	chk.InspectorPassed, chk.Findings = ok, findings
	if !ok {
		chk.State = CheckFailed
		chk.Detail = fmt.Sprintf("session inspection failed with %d finding(s)", countErrors(findings))
		return finish()
	}
	tr, detected, err := runTests(ctx, dir, run)
	switch {
	case err != nil:
		chk.State, chk.Detail = CheckError, "the tests could not run: "+err.Error()
	case !detected:
		chk.TesterPassed = true
		chk.State, chk.Detail = CheckPassed, "session inspection passed; no test framework detected"
	default:
		chk.TestResult = tr
		chk.TesterPassed = tr.GetFailed() == 0
		chk.State = CheckPassed
		if !chk.TesterPassed {
			chk.State = CheckFailed
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

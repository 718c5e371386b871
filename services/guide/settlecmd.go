package guide

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
)

// settleUsage is the /settle command's usage line.
const settleUsage = "/settle [run] [keep|rollback|retry|default]"

// settleActions maps the /settle spelling of a choice (spec B-37).
var settleActions = map[string]orchestratorv1.SettleAction{
	"keep":     orchestratorv1.SettleAction_SETTLE_ACTION_KEEP,
	"rollback": orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK,
	"retry":    orchestratorv1.SettleAction_SETTLE_ACTION_RETRY,
}

// settleWords describes each choice.
var settleWords = map[orchestratorv1.SettleAction]string{
	orchestratorv1.SettleAction_SETTLE_ACTION_KEEP:     "keep: merge the succeeded work into the run's result patch and go on by hand",
	orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK: "rollback: discard the succeeded work from the run's result",
	orchestratorv1.SettleAction_SETTLE_ACTION_RETRY:    "retry: run the failed nodes again from the failure",
}

func settleName(a orchestratorv1.SettleAction) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "SETTLE_ACTION_"))
}

// settleCommand shows or makes the choice for a failed or cancelled run of
// the session (spec B-37, B-39): "/settle" lists the choices of the newest
// such run with the default for how it failed; "/settle [run] <choice>"
// makes one ("default" takes the default).
func (s *Service) settleCommand(ctx context.Context, env *commandEnv, args []string) (commandResult, error) {
	if s.orchestrator == nil {
		return commandResult{reply: "The orchestrator is not configured, so there are no runs to settle."}, nil
	}
	run, choice, usage := settleArgs(args)
	if usage != "" {
		return commandResult{reply: usage}, nil
	}
	cctx, cancel := s.peerContext(ctx, env.owner)
	defer cancel()
	if run == "" {
		var err error
		if run, err = s.settleableRun(cctx, env.session.ID); err != nil {
			return s.settleFailed(ctx, err, "list runs")
		}
		if run == "" {
			return commandResult{reply: "This session has no failed or cancelled run to settle."}, nil
		}
	}
	if !strings.HasPrefix(run, "runs/") {
		run = "runs/" + run
	}
	got, err := s.orchestrator.GetRun(cctx, &orchestratorv1.GetRunRequest{Name: run})
	if err != nil {
		return s.settleFailed(ctx, err, "get run")
	}
	r := got.GetRun()
	pf := r.GetPartialFailure()
	if choice == "" {
		if st := r.GetState(); st != orchestratorv1.RunState_RUN_STATE_FAILED && st != orchestratorv1.RunState_RUN_STATE_CANCELLED {
			return commandResult{reply: fmt.Sprintf("%s is %s: only a failed or cancelled run has partial work to settle.", r.GetName(), stateWord(r))}, nil
		}
		return commandResult{reply: settleChoices(r, pf)}, nil
	}
	act := settleActions[choice]
	if choice == "default" {
		if pf == nil {
			return commandResult{reply: fmt.Sprintf("%s has no default: it did not fail (%s). Choose: /settle %s keep|rollback",
				r.GetName(), stateWord(r), strings.TrimPrefix(r.GetName(), "runs/"))}, nil
		}
		act = pf.GetDefaultAction()
	}
	resp, err := s.orchestrator.SettleRun(cctx, &orchestratorv1.SettleRunRequest{Name: r.GetName(), Action: act})
	if err != nil {
		return s.settleFailed(ctx, err, "settle run")
	}
	return commandResult{reply: settledReply(r, act, resp.GetReceipt())}, nil
}

// settleArgs reads "/settle [run] [choice]": usage is the reply to
// arguments that are neither.
func settleArgs(args []string) (run, choice, usage string) {
	for _, a := range args {
		w := strings.ToLower(a)
		if _, ok := settleActions[w]; ok || w == "default" {
			if choice != "" {
				return "", "", "one choice at a time; usage: " + settleUsage
			}
			choice = w
			continue
		}
		if run != "" {
			return "", "", "usage: " + settleUsage
		}
		run = a
	}
	return run, choice, ""
}

// settleableRun is the session's newest failed or cancelled run, "" when
// it has none.
func (s *Service) settleableRun(ctx context.Context, sessionID string) (string, error) {
	resp, err := s.orchestrator.ListRuns(ctx, &orchestratorv1.ListRunsRequest{SessionId: sessionID, PageSize: 20})
	if err != nil {
		return "", err
	}
	for _, x := range resp.GetRuns() {
		if st := x.GetState(); st == orchestratorv1.RunState_RUN_STATE_FAILED || st == orchestratorv1.RunState_RUN_STATE_CANCELLED {
			return x.GetName(), nil
		}
	}
	return "", nil
}

// settleFailed replies with the orchestrator's refusal, or says it did not
// answer.
func (s *Service) settleFailed(ctx context.Context, err error, what string) (commandResult, error) {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied:
		return commandResult{reply: "/settle: " + status.Convert(err).Message()}, nil
	}
	s.log.WarnContext(ctx, what, logx.Err(err))
	return commandResult{reply: "The orchestrator did not answer; try /settle again shortly."}, nil
}

// settledReply tells what settling r with act did.
func settledReply(r *orchestratorv1.Run, act orchestratorv1.SettleAction, rc *orchestratorv1.SettleReceipt) string {
	if act == orchestratorv1.SettleAction_SETTLE_ACTION_RETRY {
		return fmt.Sprintf("%s settled (retry): %s run again; watch it with /tasks", r.GetName(), strings.Join(rc.GetRetriedNodes(), ", "))
	}
	reply := fmt.Sprintf("%s settled (%s): %d node(s) kept, %d discarded, %d unfinished; the result patch changes %d file(s)",
		r.GetName(), settleName(act), len(rc.GetKeptNodes()), len(rc.GetDiscardedNodes()), len(rc.GetUnfinishedNodes()), rc.GetFilesChanged())
	if len(rc.GetConflicts()) > 0 {
		reply += "\nnot merged (conflicts): " + strings.Join(rc.GetConflicts(), ", ")
	}
	return reply + "\n" + rc.GetNote()
}

func stateWord(r *orchestratorv1.Run) string {
	return strings.ToLower(strings.TrimPrefix(r.GetState().String(), "RUN_STATE_"))
}

// settleChoices lists a run's choices, the default first when it failed.
func settleChoices(r *orchestratorv1.Run, pf *orchestratorv1.PartialFailure) string {
	id := strings.TrimPrefix(r.GetName(), "runs/")
	var b strings.Builder
	fmt.Fprintf(&b, "%s is %s.", r.GetName(), stateWord(r))
	if pf != nil {
		fmt.Fprintf(&b, " Failed: %s (%s).\nDefault: %s, because %s.", strings.Join(pf.GetFailedNodes(), ", "), pf.GetErrorTier(),
			settleName(pf.GetDefaultAction()), pf.GetReason())
	}
	b.WriteString("\nChoices:")
	for _, a := range []orchestratorv1.SettleAction{orchestratorv1.SettleAction_SETTLE_ACTION_RETRY,
		orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK, orchestratorv1.SettleAction_SETTLE_ACTION_KEEP} {
		if a == orchestratorv1.SettleAction_SETTLE_ACTION_RETRY && pf == nil {
			continue
		}
		fmt.Fprintf(&b, "\n- /settle %s %s (%s)", id, settleName(a), settleWords[a])
	}
	if pf != nil {
		fmt.Fprintf(&b, "\n- /settle %s default", id)
	}
	return b.String()
}

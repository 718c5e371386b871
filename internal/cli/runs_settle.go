package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// settleActions are the words sylk runs settle takes.
var settleActions = map[string]orchestratorv1.SettleAction{
	"keep":     orchestratorv1.SettleAction_SETTLE_ACTION_KEEP,
	"rollback": orchestratorv1.SettleAction_SETTLE_ACTION_ROLLBACK,
	"retry":    orchestratorv1.SettleAction_SETTLE_ACTION_RETRY,
}

// runRunsSettle settles a failed or cancelled run's partial work.
func runRunsSettle(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs settle", "RUN keep|rollback|retry|default [flags]",
		"Settles a failed or cancelled run's partial work: keep merges its succeeded steps' changes\n"+
			"into the run's result patch, rollback discards them, retry runs the failed steps again,\n"+
			"default takes the run's suggestion (by the failure's error tier). Prints the receipt.\n"+
			"Without an action, prints the run's choices.")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 && len(pos) != 2 {
		fs.Usage()
		return usageErrorf("sylk runs settle needs a run and an action")
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	name := runName(pos[0])
	if len(pos) == 1 {
		return e.printSettleChoices(ctx, c, name)
	}
	action, ok := settleActions[strings.ToLower(pos[1])]
	if !ok && strings.ToLower(pos[1]) != "default" {
		return usageErrorf("sylk runs settle: unknown action %q (keep, rollback, retry or default)", pos[1])
	}
	if !ok {
		run, _, err := getRun(ctx, c, name)
		if err != nil {
			return err
		}
		if action = run.GetPartialFailure().GetDefaultAction(); action == orchestratorv1.SettleAction_SETTLE_ACTION_UNSPECIFIED {
			return fmt.Errorf("run %s suggests no action (is it failed or cancelled?)", name)
		}
	}
	var resp orchestratorv1.SettleRunResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/"+name+":settle", &orchestratorv1.SettleRunRequest{Action: action}, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	e.renderReceipt(name, resp.GetReceipt())
	return nil
}

// printSettleChoices shows a run's failed steps and suggested action.
func (e *env) printSettleChoices(ctx context.Context, c *client, name string) error {
	run, raw, err := getRun(ctx, c, name)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	pf := run.GetPartialFailure()
	if pf == nil {
		fmt.Fprintf(e.out, "%s %s: nothing to settle.\n", name, runState(run.GetState()))
		return nil
	}
	fmt.Fprintf(e.out, "%s %s: failed steps %s (%s).\n", name, runState(run.GetState()),
		strings.Join(pf.GetFailedNodes(), ", "), firstNonEmpty(pf.GetErrorTier(), "unknown tier"))
	fmt.Fprintf(e.out, "Suggested: sylk runs settle %s %s\n", name, settleWord(pf.GetDefaultAction()))
	return nil
}

func (e *env) renderReceipt(name string, r *orchestratorv1.SettleReceipt) {
	fmt.Fprintf(e.out, "Settled %s: %s.\n", name, settleWord(r.GetAction()))
	for _, part := range []struct {
		label string
		nodes []string
	}{
		{"kept", r.GetKeptNodes()}, {"discarded", r.GetDiscardedNodes()},
		{"unfinished", r.GetUnfinishedNodes()}, {"retried", r.GetRetriedNodes()}, {"conflicts", r.GetConflicts()},
	} {
		if len(part.nodes) > 0 {
			fmt.Fprintf(e.out, "  %-10s %s\n", part.label+":", strings.Join(part.nodes, ", "))
		}
	}
	if r.GetFilesChanged() > 0 {
		fmt.Fprintf(e.out, "  files changed: %d\n", r.GetFilesChanged())
	}
	if r.GetNote() != "" {
		fmt.Fprintf(e.out, "  %s\n", r.GetNote())
	}
}

func settleWord(a orchestratorv1.SettleAction) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "SETTLE_ACTION_"))
}

// runRunsPause and runRunsResume pause and resume a run or one step.
func runRunsPause(ctx context.Context, e *env, args []string) error {
	return e.pauseResume(ctx, args, "pause", "Pauses a run (or one step with --node): no new step starts until it is resumed.")
}

func runRunsResume(ctx context.Context, e *env, args []string) error {
	return e.pauseResume(ctx, args, "resume", "Resumes a paused run (or one step with --node).")
}

func (e *env) pauseResume(ctx context.Context, args []string, verb, help string) error {
	fs := e.flags("sylk runs "+verb, "RUN [flags]", help)
	node := fs.String("node", "", "only this step")
	pos, err := parseN(fs, args, 1, "a run")
	if err != nil {
		return err
	}
	name := runName(pos[0])
	var body proto.Message = &orchestratorv1.PauseRunRequest{NodeId: *node}
	if verb == "resume" {
		body = &orchestratorv1.ResumeRunRequest{NodeId: *node}
	}
	// PauseRunResponse and ResumeRunResponse carry the run as GetRunResponse does.
	var resp orchestratorv1.GetRunResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/"+name+":"+verb, body, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "%s %s\n", name, runState(resp.GetRun().GetState()))
	return nil
}

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

// runRunsPause and runRunsResume pause and resume a run, one step, or every
// run of a session.
func runRunsPause(ctx context.Context, e *env, args []string) error {
	return e.pauseResume(ctx, args, "pause",
		"Pauses a run (or one step with --node, or every run of a session with --session):\n"+
			"no new step starts until it is resumed.")
}

func runRunsResume(ctx context.Context, e *env, args []string) error {
	return e.pauseResume(ctx, args, "resume",
		"Resumes a paused run (or one step with --node, or every paused run of a session with --session).")
}

func (e *env) pauseResume(ctx context.Context, args []string, verb, help string) error {
	fs := e.flags("sylk runs "+verb, "RUN | --session SESSION [flags]", help)
	node := fs.String("node", "", "only this step")
	session := fs.String("session", "", verb+" every run of this session instead")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *session != "" && len(pos) == 0 && *node == "" {
		return e.sessionRuns(ctx, *session, verb)
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErrorf("sylk runs %s needs a run, or --session (without --node)", verb)
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

// runRunsTask steers one task of a run: query it, prompt it, retry it, ...
func runRunsTask(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs task", "RUN NODE ACTION [flags]",
		"Acts on one task of a run. ACTION is query, prompt (with --message), interrupt, ignore_inspector,\n"+
			"ignore_tester, retry, skip, escalate or handoff.")
	message := fs.String("message", "", "with prompt: what to tell the task's agent")
	pos, err := parseN(fs, args, 3, "a run, a node and an action")
	if err != nil {
		return err
	}
	action, ok := orchestratorv1.TaskActionType_value["TASK_ACTION_TYPE_"+strings.ToUpper(pos[2])]
	if !ok {
		return usageErrorf("sylk runs task: unknown action %q", pos[2])
	}
	name := runName(pos[0])
	req := &orchestratorv1.TaskActionRequest{NodeId: pos[1], Action: orchestratorv1.TaskActionType(action), Message: *message}
	var resp orchestratorv1.TaskActionResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/"+name+":taskAction", req, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "%s %s: %s\n", name, resp.GetNodeId(), strings.ToLower(strings.TrimPrefix(resp.GetNodeState().String(), "NODE_STATE_")))
	if resp.GetDetail() != "" {
		fmt.Fprintf(e.out, "  %s\n", resp.GetDetail())
	}
	return nil
}

// sessionRunsDone is what each verb on a session's runs prints per run.
var sessionRunsDone = map[string]string{"cancel": "Cancelled", "pause": "Paused", "resume": "Resumed"}

// sessionRuns cancels, pauses or resumes every run of a session.
func (e *env) sessionRuns(ctx context.Context, session, verb string) error {
	name := sessionName(session)
	// The three requests carry only the session, from the path; their
	// answers list the runs that changed, as CancelSessionRunsResponse does.
	var resp orchestratorv1.CancelSessionRunsResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/"+name+"/runs:"+verb, &orchestratorv1.CancelSessionRunsRequest{}, &resp); done {
		return err
	}
	if len(resp.GetRuns()) == 0 {
		fmt.Fprintf(e.out, "No runs of %s to %s.\n", name, verb)
	}
	for _, r := range resp.GetRuns() {
		fmt.Fprintf(e.out, "%s %s.\n", sessionRunsDone[verb], r)
	}
	return nil
}

package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// runPollInterval is how often watch asks for a run's state.
const runPollInterval = 500 * time.Millisecond

func runCommands() []command {
	return []command{
		{name: "create", summary: "start a run of a DAG described in JSON", run: runRunsCreate},
		{name: "list", summary: "list runs", run: runRunsList},
		{name: "show", summary: "show a run and its steps", run: runRunsShow},
		{name: "watch", summary: "follow a run's steps until it ends (exit 7 when it fails)", run: runRunsWatch},
		{name: "logs", summary: "print the output of a run's steps", run: runRunsLogs},
		{name: "cancel", summary: "cancel a run, or one of its steps", run: runRunsCancel},
		{name: "pause", summary: "pause a run, or one of its steps", run: runRunsPause},
		{name: "resume", summary: "resume a paused run, or one of its steps", run: runRunsResume},
		{name: "decisions", summary: "print a run's decision log", run: runRunsDecisions},
		{name: "bundle", summary: "download a delivered run's branch (or its patch)", run: runRunsBundle},
		{name: "task", summary: "act on one task of a run (query, prompt, retry, skip, ...)", run: runRunsTask},
		{name: "settle", summary: "keep, roll back or retry a failed run's partial work", run: runRunsSettle},
	}
}

func runName(s string) string {
	if strings.HasPrefix(s, "runs/") {
		return s
	}
	return "runs/" + s
}

func runRunsList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs list", "[flags]", "Lists runs, newest first.")
	session := fs.String("session", "", "only this session's runs")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	q := url.Values{"pageSize": {"100"}}
	if *session != "" {
		q.Set("sessionId", strings.TrimPrefix(*session, "sessions/"))
	}
	var resp orchestratorv1.ListRunsResponse
	raw, err := c.call(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), nil, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	if len(resp.GetRuns()) == 0 {
		fmt.Fprintln(e.out, "No runs.")
	}
	for _, r := range resp.GetRuns() {
		fmt.Fprintf(e.out, "%s  %-10s %d steps  %s\n", r.GetName(), runState(r.GetState()), max(len(r.GetNodes()), len(r.GetDag().GetNodes())), r.GetPlan())
	}
	return nil
}

// getRun reads a run; raw is the answer as it came.
func getRun(ctx context.Context, c *client, name string) (*orchestratorv1.Run, []byte, error) {
	var resp orchestratorv1.GetRunResponse
	raw, err := c.call(ctx, http.MethodGet, "/v1/"+name, nil, &resp)
	return resp.GetRun(), raw, err
}

func runRunsShow(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs show", "RUN [flags]", "Shows a run and the state of each step.")
	pos, err := parseN(fs, args, 1, "a run")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	run, raw, err := getRun(ctx, c, runName(pos[0]))
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	fmt.Fprintf(e.out, "%s  %s\n", run.GetName(), runState(run.GetState()))
	for _, n := range run.GetNodes() {
		fmt.Fprintln(e.out, "  "+nodeLine(n))
	}
	return nil
}

// runRunsWatch follows a run until it ends; the exit status says how.
func runRunsWatch(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs watch", "RUN [flags]",
		"Prints each step's state as it changes until the run ends. Exits 0 when the run\n"+
			"succeeded (or had nothing to change), 7 when it failed or was cancelled.\n"+
			"With --json, each state of the run is printed as one JSON line.")
	fs.DurationVar(&e.opts.timeout, "timeout", 0, "how long to watch (0 watches until the end)")
	pos, err := parseN(fs, args, 1, "a run")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, e.opts.timeout)
	defer cancel()
	return e.watchRun(ctx, c, runName(pos[0]))
}

// watchRun polls the run, printing what changed, until it ends.
func (e *env) watchRun(ctx context.Context, c *client, name string) error {
	seen := map[string]string{}
	lastState := ""
	tick := time.NewTicker(runPollInterval)
	defer tick.Stop()
	for {
		run, raw, err := getRun(ctx, c, name)
		if err != nil {
			return err
		}
		if e.opts.json {
			e.printJSON(raw)
		} else {
			lastState = e.printChanges(run, seen, lastState)
		}
		if runEnded(run.GetState()) {
			return runOutcome(run)
		}
		select {
		case <-ctx.Done():
			return ctxError(ctx)
		case <-tick.C:
		}
	}
}

// printChanges prints the run's state and each step's when they changed.
func (e *env) printChanges(run *orchestratorv1.Run, seen map[string]string, last string) string {
	if s := runState(run.GetState()); s != last {
		fmt.Fprintf(e.out, "%s %s\n", run.GetName(), s)
		last = s
	}
	for _, n := range run.GetNodes() {
		line := nodeLine(n)
		if seen[n.GetNodeId()] != line {
			seen[n.GetNodeId()] = line
			fmt.Fprintln(e.out, "  "+line)
		}
	}
	return last
}

func runEnded(s orchestratorv1.RunState) bool {
	switch s {
	case orchestratorv1.RunState_RUN_STATE_SUCCEEDED, orchestratorv1.RunState_RUN_STATE_FAILED,
		orchestratorv1.RunState_RUN_STATE_CANCELLED, orchestratorv1.RunState_RUN_STATE_NO_CHANGES:
		return true
	}
	return false
}

// runOutcome is nil for a run that succeeded or had nothing to change, an
// ExitFailed error otherwise.
func runOutcome(run *orchestratorv1.Run) error {
	switch run.GetState() {
	case orchestratorv1.RunState_RUN_STATE_FAILED, orchestratorv1.RunState_RUN_STATE_CANCELLED:
		return &Error{Code: ExitFailed, Err: fmt.Errorf("run %s %s", run.GetName(), runState(run.GetState()))}
	}
	return nil
}

// runRunsLogs prints each step's output.
func runRunsLogs(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs logs", "RUN [flags]", "Prints the output (standard output, then standard error) of a run's steps.")
	node := fs.String("node", "", "only this step")
	pos, err := parseN(fs, args, 1, "a run")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	run, raw, err := getRun(ctx, c, runName(pos[0]))
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	found := false
	for _, n := range run.GetNodes() {
		if *node != "" && n.GetNodeId() != *node {
			continue
		}
		found = true
		fmt.Fprintf(e.out, "== %s ==\n", nodeLine(n))
		if n.GetStdout() != "" {
			fmt.Fprint(e.out, ensureNewline(n.GetStdout()))
		}
		if n.GetStderr() != "" {
			fmt.Fprintf(e.out, "-- stderr --\n%s", ensureNewline(n.GetStderr()))
		}
		if n.GetOutputTruncated() {
			fmt.Fprintln(e.out, "(output truncated)")
		}
	}
	if !found && *node != "" {
		return &Error{Code: ExitNotFound, Err: fmt.Errorf("run %s has no step %q", run.GetName(), *node)}
	}
	return nil
}

func runRunsCancel(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs cancel", "RUN | --session SESSION [flags]", "Cancels a run, or one step of it with --node, or every run of a session.")
	node := fs.String("node", "", "cancel only this step")
	session := fs.String("session", "", "cancel every run of this session instead")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *session != "" && len(pos) == 0 {
		return e.sessionRuns(ctx, *session, "cancel")
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErrorf("sylk runs cancel needs a run, or --session")
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	var resp orchestratorv1.CancelRunResponse
	name := runName(pos[0])
	raw, err := c.call(ctx, http.MethodPost, "/v1/"+name+":cancel", &orchestratorv1.CancelRunRequest{NodeId: *node}, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	fmt.Fprintf(e.out, "%s %s\n", name, runState(resp.GetRun().GetState()))
	return nil
}

// nodeLine is "id  state  (exit 1, 2.1s) error".
func nodeLine(n *orchestratorv1.NodeStatus) string {
	s := fmt.Sprintf("%-12s %s", n.GetNodeId(), strings.ToLower(strings.TrimPrefix(n.GetState().String(), "NODE_STATE_")))
	var extra []string
	if n.GetAttempt() > 1 {
		extra = append(extra, fmt.Sprintf("attempt %d", n.GetAttempt()))
	}
	if n.GetExitCode() != 0 {
		extra = append(extra, fmt.Sprintf("exit %d", n.GetExitCode()))
	}
	if d := n.GetDuration().AsDuration(); d > 0 {
		extra = append(extra, d.Round(time.Millisecond).String())
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	if n.GetError() != "" {
		s += ": " + oneLine(n.GetError())
	}
	return s
}

func runState(s orchestratorv1.RunState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RUN_STATE_"))
}

func ensureNewline(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

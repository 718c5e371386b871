package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

// runSessionsContext prints a session's working context.
func runSessionsContext(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions context", "[SESSION] [flags]",
		"Shows a session's working context (default: the current one): its task, step and objective,\n"+
			"the steps done and next, blockers, the files it touched and what the user wants and rejects.")
	name, err := e.sessionFromArgs(fs, args)
	if err != nil {
		return err
	}
	var resp guidev1.GetSessionContextResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/"+name+"/context", nil, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "%s  context version %d\n", name, resp.GetVersion())
	if !e.renderContext(resp.GetContext()) {
		fmt.Fprintln(e.out, "  (empty)")
	}
	return nil
}

// runSessionsSnapshot prints what suspending a session froze.
func runSessionsSnapshot(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions snapshot", "[SESSION] [flags]",
		"Shows the latest snapshot of a session (default: the current one), taken when it was suspended:\n"+
			"its context, pending questions and requests, and its runs. A session never suspended has none (exit 4).")
	name, err := e.sessionFromArgs(fs, args)
	if err != nil {
		return err
	}
	var resp guidev1.GetSessionSnapshotResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/"+name+"/snapshot", nil, &resp); done {
		return err
	}
	e.renderSnapshot(resp.GetSnapshot())
	return nil
}

// sessionFromArgs parses [SESSION] and returns it, or the current session
// of the stored configuration.
func (e *env) sessionFromArgs(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) > 1 {
		fs.Usage()
		return "", usageErrorf("%s takes at most one session", fs.Name())
	}
	if _, err := e.connect(); err != nil {
		return "", err
	}
	return e.sessionArg(pos)
}

// renderContext prints the context's fields that are set, indented, and
// reports whether it printed any.
func (e *env) renderContext(c *guidev1.SessionContext) bool {
	printed := false
	field := func(label, value string) {
		if value != "" {
			fmt.Fprintf(e.out, "  %-18s %s\n", label+":", oneLine(value))
			printed = true
		}
	}
	list := func(label string, values []string) {
		if len(values) > 0 {
			field(label, strings.Join(values, ", "))
		}
	}
	field("task", c.GetCurrentTask())
	field("step", c.GetCurrentStep())
	field("objective", c.GetCurrentObjective())
	list("steps done", c.GetCompletedSteps())
	list("next steps", c.GetNextSteps())
	list("blockers", c.GetBlockers())
	list("files modified", c.GetModifiedFiles())
	list("files created", c.GetCreatedFiles())
	list("files read", c.GetReadFiles())
	list("the user wants", c.GetUserWants())
	list("the user rejects", c.GetUserRejects())
	if len(c.GetExtra().GetFields()) > 0 {
		extra, err := protojson.Marshal(c.GetExtra())
		if err == nil {
			field("extra", string(extra))
		}
	}
	return printed
}

// renderSnapshot prints a snapshot: the session, when it was taken and
// restored, its context, what was pending and its runs.
func (e *env) renderSnapshot(s *guidev1.SessionSnapshot) {
	e.renderSession(s.GetSession())
	fmt.Fprintf(e.out, "  taken:      %s\n", s.GetCreateTime().AsTime().Local().Format(time.DateTime))
	if s.GetRestoreTime() != nil {
		fmt.Fprintf(e.out, "  restored:   %s\n", s.GetRestoreTime().AsTime().Local().Format(time.DateTime))
	}
	fmt.Fprintf(e.out, "Context (version %d):\n", s.GetContextVersion())
	if !e.renderContext(s.GetContext()) {
		fmt.Fprintln(e.out, "  (empty)")
	}
	for _, q := range s.GetPendingClarifications() {
		fmt.Fprintf(e.out, "Question from %s: %s\n", orDash(q.GetRequestingAgent()), oneLine(q.GetQuestion()))
		if len(q.GetOptions()) > 0 {
			fmt.Fprintf(e.out, "  options: %s\n", strings.Join(q.GetOptions(), " | "))
		}
	}
	for _, r := range s.GetPendingRequests() {
		fmt.Fprintf(e.out, "Request to %s: %s\n", r.GetTarget(), oneLine(r.GetMessage()))
	}
	e.renderSnapshotRuns(s)
}

// renderSnapshotRuns prints each run of a snapshot with its unfinished
// steps, or why the runs could not be read.
func (e *env) renderSnapshotRuns(s *guidev1.SessionSnapshot) {
	if s.GetDagError() != "" {
		fmt.Fprintf(e.out, "Runs: not read: %s\n", oneLine(s.GetDagError()))
	}
	for _, d := range s.GetDags() {
		fmt.Fprintf(e.out, "Run %s %s\n", d.GetRun(), strings.ToLower(strings.TrimPrefix(d.GetState(), "RUN_STATE_")))
		if len(d.GetPendingNodes()) > 0 {
			pending := slices.Clone(d.GetPendingNodes())
			slices.Sort(pending)
			fmt.Fprintf(e.out, "  unfinished: %s\n", strings.Join(pending, ", "))
		}
		if d.GetTruncated() {
			fmt.Fprintln(e.out, "  (some steps left out)")
		}
	}
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
)

func planCommands() []command {
	return []command{
		{name: "create", summary: "have the Architect draft a plan for a change", run: runPlansCreate},
		{name: "list", summary: "list the plans of a session", run: runPlansList},
		{name: "show", summary: "show a plan and its steps", run: runPlansShow},
		{name: "approve", summary: "approve a plan, which starts its run", run: runPlansApprove},
		{name: "revise", summary: "ask for a new version of a plan", run: runPlansRevise},
		{name: "reject", summary: "reject a plan", run: runPlansReject},
	}
}

// planFlags adds --session, which a plan ID (not a full name) needs.
func (e *env) planFlags(name, usage, help string) (*string, *flag.FlagSet) {
	fs := e.flags(name, usage, help)
	return fs.String("session", "", "the session (default: the current one)"), fs
}

// planName turns an ID or a name into "sessions/{s}/plans/{p}".
func (e *env) planName(id, session string) (string, error) {
	if strings.HasPrefix(id, "sessions/") {
		return id, nil
	}
	if session == "" {
		session = e.cfg.Session
	}
	if session == "" {
		return "", usageErrorf("plan %q: give its full name (sessions/…/plans/…) or --session", id)
	}
	return sessionName(session) + "/plans/" + id, nil
}

func runPlansList(ctx context.Context, e *env, args []string) error {
	session, fs := e.planFlags("sylk plans list", "[flags]", "Lists the plans of a session, newest first.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	name := *session
	if name == "" {
		name = e.cfg.Session
	}
	if name == "" {
		return usageErrorf("no current session: give --session")
	}
	var resp architectv1.ListPlansResponse
	raw, err := c.call(ctx, http.MethodGet, "/v1/"+sessionName(name)+"/plans?pageSize=100", nil, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	if len(resp.GetPlans()) == 0 {
		fmt.Fprintln(e.out, "No plans in this session.")
	}
	for _, p := range resp.GetPlans() {
		fmt.Fprintf(e.out, "%s  %-18s v%d  %s\n", p.GetName(), planState(p), p.GetVersion(), firstNonEmpty(p.GetTitle(), p.GetRequest()))
	}
	return nil
}

func runPlansShow(ctx context.Context, e *env, args []string) error {
	session, fs := e.planFlags("sylk plans show", "PLAN [flags]", "Shows a plan: its request, state and steps.")
	return e.planCall(ctx, fs, args, session, http.MethodGet, "", nil, func(raw []byte) error {
		var resp architectv1.GetPlanResponse
		if err := unmarshal.Unmarshal(raw, &resp); err != nil {
			return err
		}
		e.renderPlan(resp.GetPlan())
		return nil
	})
}

func runPlansApprove(ctx context.Context, e *env, args []string) error {
	session, fs := e.planFlags("sylk plans approve", "PLAN [flags]",
		"Approves a plan: its run starts. With --watch the run is followed to its end\n"+
			"(exit 7 when it fails).")
	conc := fs.Int("max-concurrency", 0, "steps run at once (0: the server's default)")
	watch := fs.Bool("watch", false, "follow the run until it ends")
	var run string
	err := e.planCall(ctx, fs, args, session, http.MethodPost, ":approve",
		func() (proto.Message, error) {
			return &architectv1.ApprovePlanRequest{MaxConcurrency: int32(*conc)}, nil
		}, func(raw []byte) error {
			var resp architectv1.ApprovePlanResponse
			if err := unmarshal.Unmarshal(raw, &resp); err != nil {
				return err
			}
			run = resp.GetRun().GetName()
			fmt.Fprintf(e.out, "Approved %s; run %s started.\n", resp.GetPlan().GetName(), run)
			return nil
		})
	if err != nil || !*watch || run == "" {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	return e.watchRun(ctx, c, run)
}

func runPlansRevise(ctx context.Context, e *env, args []string) error {
	session, fs := e.planFlags("sylk plans revise", `PLAN --feedback "WHAT TO CHANGE" [flags]`,
		"Asks the Architect for a new version of a plan, with feedback.")
	feedback := fs.String("feedback", "", "what to change (required)")
	return e.planCall(ctx, fs, args, session, http.MethodPost, ":revise", func() (proto.Message, error) {
		if strings.TrimSpace(*feedback) == "" {
			return nil, usageErrorf("sylk plans revise needs --feedback")
		}
		return &architectv1.RevisePlanRequest{Feedback: *feedback}, nil
	}, func(raw []byte) error {
		var resp architectv1.RevisePlanResponse
		if err := unmarshal.Unmarshal(raw, &resp); err != nil {
			return err
		}
		e.renderPlan(resp.GetPlan())
		return nil
	})
}

func runPlansReject(ctx context.Context, e *env, args []string) error {
	session, fs := e.planFlags("sylk plans reject", "PLAN [flags]", "Rejects a plan.")
	reason := fs.String("reason", "", "why, for the record")
	return e.planCall(ctx, fs, args, session, http.MethodPost, ":reject", func() (proto.Message, error) {
		return &architectv1.RejectPlanRequest{Reason: *reason}, nil
	}, func([]byte) error {
		fmt.Fprintln(e.out, "Rejected.")
		return nil
	})
}

// planCall parses PLAN, calls method on the plan (with suffix, such as
// ":approve") with the body built once the flags are parsed (nil: none),
// and prints the answer: raw under --json, through show otherwise.
func (e *env) planCall(ctx context.Context, fs *flag.FlagSet, args []string, session *string, method, suffix string,
	build func() (proto.Message, error), show func([]byte) error) error {
	pos, err := parseN(fs, args, 1, "a plan")
	if err != nil {
		return err
	}
	var body proto.Message
	if build != nil {
		if body, err = build(); err != nil {
			return err
		}
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	name, err := e.planName(pos[0], *session)
	if err != nil {
		return err
	}
	raw, err := c.call(ctx, method, "/v1/"+name+suffix, body, nil)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	return show(raw)
}

func (e *env) renderPlan(p *architectv1.Plan) {
	fmt.Fprintf(e.out, "%s  %s  version %d\n", p.GetName(), planState(p), p.GetVersion())
	if p.GetTitle() != "" {
		fmt.Fprintf(e.out, "  title:   %s\n", p.GetTitle())
	}
	fmt.Fprintf(e.out, "  request: %s\n", p.GetRequest())
	if p.GetRun() != "" {
		fmt.Fprintf(e.out, "  run:     %s\n", p.GetRun())
	}
	if p.GetRejectReason() != "" {
		fmt.Fprintf(e.out, "  rejected: %s\n", p.GetRejectReason())
	}
	fmt.Fprintln(e.out, "  steps:")
	for _, n := range p.GetDag().GetNodes() {
		what := firstNonEmpty(n.GetName(), n.GetCommand(), n.GetPrompt())
		fmt.Fprintf(e.out, "    %-12s %s", n.GetId(), oneLine(what))
		if len(n.GetDependsOn()) > 0 {
			fmt.Fprintf(e.out, "  (after %s)", strings.Join(n.GetDependsOn(), ", "))
		}
		fmt.Fprintln(e.out)
	}
	if p.GetState() == architectv1.PlanState_PLAN_STATE_AWAITING_APPROVAL {
		fmt.Fprintf(e.out, "Approve with: sylk plans approve %s\n", p.GetName())
	}
}

func planState(p *architectv1.Plan) string {
	return strings.ToLower(strings.TrimPrefix(p.GetState().String(), "PLAN_STATE_"))
}

// oneLine is s's first line, cut to 100 characters.
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > 100 {
		return string(r[:99]) + "…"
	}
	return s
}

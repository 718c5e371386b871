package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// runPlansCreate has the Architect draft a plan in a session.
func runPlansCreate(ctx context.Context, e *env, args []string) error {
	session, fs := e.planFlags("sylk plans create", `"REQUEST" [flags]`,
		"Has the Architect draft a plan for a change in the session (the current one, or a new\n"+
			"one), on the session's repository. Nothing runs until it is approved (sylk plans approve).")
	repo := fs.String("repo", "", "the repository to work on (set on the session)")
	var constraints, criteria stringList
	fs.Var(&constraints, "constraint", "what the result must respect (repeatable)")
	fs.Var(&criteria, "criterion", "how to tell it is done (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	request := strings.TrimSpace(strings.Join(pos, " "))
	if request == "" {
		fs.Usage()
		return usageErrorf("sylk plans create needs a request")
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	parent, err := e.session(ctx, c, *session)
	if err != nil {
		return err
	}
	if *repo != "" {
		if _, err := setSessionRepo(ctx, c, parent, *repo); err != nil {
			return err
		}
	}
	req := &architectv1.CreatePlanRequest{Request: request, KeyConstraints: constraints, SuccessCriteria: criteria}
	var resp architectv1.CreatePlanResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/"+parent+"/plans", req, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	e.renderPlan(resp.GetPlan())
	return nil
}

// runRunsCreate starts a run from a JSON description: the body of POST
// /v1/runs (a DAG and its options).
func runRunsCreate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs create", "FILE|- [flags]",
		"Starts a run from a JSON file (\"-\": standard input) holding what POST /v1/runs takes:\n"+
			`{"dag": {"nodes": [{"id": "a", "command": "echo a"}]}, "repository": "...", "maxConcurrency": 2}`+"\n"+
			"With --watch it follows the run to its end (exit 7 when it fails).")
	watch := fs.Bool("watch", false, "follow the run until it ends")
	pos, err := parseN(fs, args, 1, "a file (or - for standard input)")
	if err != nil {
		return err
	}
	text, err := e.readInput(pos[0])
	if err != nil {
		return err
	}
	req := &orchestratorv1.CreateRunRequest{}
	if err := protojson.Unmarshal([]byte(text), req); err != nil {
		return usageErrorf("sylk runs create: %s is not a run: %v", pos[0], err)
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	var resp orchestratorv1.CreateRunResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/runs", req, &resp)
	if err != nil || (e.opts.json && !*watch) {
		e.printIf(raw, err)
		return err
	}
	name := resp.GetRun().GetName()
	if !*watch {
		fmt.Fprintf(e.out, "%s %s\n", name, runState(resp.GetRun().GetState()))
		return nil
	}
	return e.watchRun(ctx, c, name)
}

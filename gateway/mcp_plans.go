package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/timestamppb"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// The plan and run tools: the Architect drafts a plan, the caller reads
// and approves it, the Orchestrator runs it. Drafting and approving change
// something, so a viewer may not.

func (m *mcpServer) addPlanTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "create_plan", Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false)},
		Description: "Draft a plan for a change to a repository: the tasks (a DAG) the agents would run. " +
			"Nothing runs until approve_plan."}, m.createPlan)
	mcp.AddTool(s, &mcp.Tool{Name: "get_plan", Annotations: readOnlyTool,
		Description: "Read a plan: its state, tasks and, once approved, its run."}, m.getPlan)
	mcp.AddTool(s, &mcp.Tool{Name: "approve_plan", Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false), DestructiveHint: new(false)},
		Description: "Approve a plan awaiting approval: the agents start working on it as a run (follow it with run_status)."}, m.approvePlan)
	mcp.AddTool(s, &mcp.Tool{Name: "revise_plan", Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false), DestructiveHint: new(false)},
		Description: "Ask the Architect for a new version of a plan awaiting approval, with feedback " +
			"(\"remove step 2\", \"also update the README\"); the plan keeps every version."}, m.revisePlan)
	mcp.AddTool(s, &mcp.Tool{Name: "reject_plan", Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false), DestructiveHint: new(true)},
		Description: "Reject a plan awaiting approval, with a reason: it will not run."}, m.rejectPlan)
	mcp.AddTool(s, &mcp.Tool{Name: "run_status", Annotations: readOnlyTool,
		Description: "A run's status: its state and each task's state, attempt and error."}, m.runStatus)
	mcp.AddTool(s, &mcp.Tool{Name: "cancel_run", Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false), DestructiveHint: new(true)},
		Description: "Cancel a run, or one task of it (node): running tasks are stopped, pending ones never start."}, m.cancelRun)
}

// CreatePlanInput is create_plan's input.
type CreatePlanInput struct {
	Request         string   `json:"request" jsonschema:"what should be done, in plain language"`
	Session         string   `json:"session,omitempty" jsonschema:"the session to plan in (sessions/{id} or its id); a new session when empty"`
	Repository      string   `json:"repository,omitempty" jsonschema:"for a new session: the repository to change (repositories/{id} or its id)"`
	KeyConstraints  []string `json:"keyConstraints,omitempty" jsonschema:"what the result must respect"`
	SuccessCriteria []string `json:"successCriteria,omitempty" jsonschema:"how to tell it is done"`
}

// PlanNode is one task of a plan.
type PlanNode struct {
	ID        string   `json:"id"`
	Name      string   `json:"name,omitempty"`
	Role      string   `json:"role,omitempty"`
	DependsOn []string `json:"dependsOn,omitempty"`
	Command   string   `json:"command,omitempty"`
	Prompt    string   `json:"prompt,omitempty"`
}

// PlanOutput is a plan.
type PlanOutput struct {
	Name         string     `json:"name"`
	Title        string     `json:"title,omitempty"`
	State        string     `json:"state"`
	Version      int32      `json:"version"`
	Request      string     `json:"request,omitempty"`
	Planner      string     `json:"planner,omitempty"`
	Repository   string     `json:"repository,omitempty"`
	Run          string     `json:"run,omitempty"`
	RejectReason string     `json:"rejectReason,omitempty"`
	Nodes        []PlanNode `json:"nodes"`
}

func (m *mcpServer) createPlan(ctx context.Context, req *mcp.CallToolRequest, in CreatePlanInput) (*mcp.CallToolResult, PlanOutput, error) {
	var out PlanOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "architect", ready: m.plans != nil, writes: "create_plan"})
	defer done()
	if err != nil {
		return nil, out, err
	}
	session, err := m.askSession(ctx, resourceName("sessions", in.Session), in.Repository)
	if err != nil {
		return nil, out, err
	}
	resp, err := m.plans.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: session, Request: in.Request,
		KeyConstraints: in.KeyConstraints, SuccessCriteria: in.SuccessCriteria})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = planOutput(resp.GetPlan())
	return textResult(planText(out) + "\nStart it with approve_plan."), out, nil
}

// PlanInput names a plan.
type PlanInput struct {
	Plan string `json:"plan" jsonschema:"the plan's name (sessions/{s}/plans/{p})"`
}

func (m *mcpServer) getPlan(ctx context.Context, req *mcp.CallToolRequest, in PlanInput) (*mcp.CallToolResult, PlanOutput, error) {
	var out PlanOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "architect", ready: m.plans != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.plans.GetPlan(ctx, &architectv1.GetPlanRequest{Name: in.Plan})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = planOutput(resp.GetPlan())
	return textResult(planText(out)), out, nil
}

// ApprovePlanInput is approve_plan's input.
type ApprovePlanInput struct {
	Plan           string `json:"plan" jsonschema:"the plan's name (sessions/{s}/plans/{p})"`
	MaxConcurrency int32  `json:"maxConcurrency,omitempty" jsonschema:"tasks running at once (the session's limit when 0)"`
}

// ApprovePlanOutput is approve_plan's answer.
type ApprovePlanOutput struct {
	Plan PlanOutput `json:"plan"`
	Run  RunOutput  `json:"run"`
}

func (m *mcpServer) approvePlan(ctx context.Context, req *mcp.CallToolRequest, in ApprovePlanInput) (*mcp.CallToolResult, ApprovePlanOutput, error) {
	var out ApprovePlanOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "architect", ready: m.plans != nil, writes: "approve_plan"})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.plans.ApprovePlan(ctx, &architectv1.ApprovePlanRequest{Name: in.Plan, MaxConcurrency: in.MaxConcurrency})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = ApprovePlanOutput{Plan: planOutput(resp.GetPlan()), Run: runOutput(resp.GetRun())}
	return textResult(fmt.Sprintf("Approved %s; run %s is %s. Follow it with run_status.", out.Plan.Name, out.Run.Name, out.Run.State)), out, nil
}

// RevisePlanInput is revise_plan's input.
type RevisePlanInput struct {
	Plan     string `json:"plan" jsonschema:"the plan's name (sessions/{s}/plans/{p})"`
	Feedback string `json:"feedback" jsonschema:"what to change, in plain language"`
}

func (m *mcpServer) revisePlan(ctx context.Context, req *mcp.CallToolRequest, in RevisePlanInput) (*mcp.CallToolResult, PlanOutput, error) {
	var out PlanOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "architect", ready: m.plans != nil, writes: "revise_plan"})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.plans.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: in.Plan, Feedback: in.Feedback})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = planOutput(resp.GetPlan())
	return textResult(planText(out) + "\nApprove it with approve_plan, or revise it again."), out, nil
}

// RejectPlanInput is reject_plan's input.
type RejectPlanInput struct {
	Plan   string `json:"plan" jsonschema:"the plan's name (sessions/{s}/plans/{p})"`
	Reason string `json:"reason,omitempty" jsonschema:"why, for the record"`
}

func (m *mcpServer) rejectPlan(ctx context.Context, req *mcp.CallToolRequest, in RejectPlanInput) (*mcp.CallToolResult, PlanOutput, error) {
	var out PlanOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "architect", ready: m.plans != nil, writes: "reject_plan"})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.plans.RejectPlan(ctx, &architectv1.RejectPlanRequest{Name: in.Plan, Reason: in.Reason})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = planOutput(resp.GetPlan())
	return textResult(fmt.Sprintf("Rejected %s.", out.Name)), out, nil
}

// RunInput names a run.
type RunInput struct {
	Run string `json:"run" jsonschema:"the run (runs/{id} or its id)"`
}

// RunNode is one task's status in a run.
type RunNode struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Attempt  int32  `json:"attempt,omitempty"`
	ExitCode int32  `json:"exitCode,omitempty"`
	Error    string `json:"error,omitempty"`
}

// RunOutput is a run's status.
type RunOutput struct {
	Name           string    `json:"name"`
	State          string    `json:"state"`
	Plan           string    `json:"plan,omitempty"`
	Session        string    `json:"session,omitempty"`
	Repository     string    `json:"repository,omitempty"`
	Nodes          []RunNode `json:"nodes"`
	SessionCheck   string    `json:"sessionCheck,omitempty"`
	MergeConflicts []string  `json:"mergeConflicts,omitempty"`
	CreateTime     string    `json:"createTime,omitempty"`
	StartTime      string    `json:"startTime,omitempty"`
	EndTime        string    `json:"endTime,omitempty"`
}

func (m *mcpServer) runStatus(ctx context.Context, req *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunOutput, error) {
	var out RunOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "orchestrator", ready: m.workflows != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.workflows.GetRun(ctx, &orchestratorv1.GetRunRequest{Name: resourceName("runs", in.Run)})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = runOutput(resp.GetRun())
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s: %s", out.Name, out.State)
	if out.SessionCheck != "" {
		fmt.Fprintf(&b, " (session check %s)", out.SessionCheck)
	}
	for _, n := range out.Nodes {
		fmt.Fprintf(&b, "\n- %s: %s (attempt %d)", n.ID, n.State, n.Attempt)
		if n.Error != "" {
			fmt.Fprintf(&b, ": %s", n.Error)
		}
	}
	return textResult(b.String()), out, nil
}

// CancelRunInput is cancel_run's input.
type CancelRunInput struct {
	Run  string `json:"run" jsonschema:"the run (runs/{id} or its id)"`
	Node string `json:"node,omitempty" jsonschema:"only this task of the run; the whole run when empty"`
}

func (m *mcpServer) cancelRun(ctx context.Context, req *mcp.CallToolRequest, in CancelRunInput) (*mcp.CallToolResult, RunOutput, error) {
	var out RunOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "orchestrator", ready: m.workflows != nil, writes: "cancel_run"})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.workflows.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: resourceName("runs", in.Run), NodeId: in.Node})
	if err != nil {
		return nil, out, toolError(err)
	}
	out = runOutput(resp.GetRun())
	what := "run " + out.Name
	if in.Node != "" {
		what = "task " + in.Node + " of " + out.Name
	}
	return textResult(fmt.Sprintf("Cancelled %s; the run is %s.", what, out.State)), out, nil
}

func planOutput(p *architectv1.Plan) PlanOutput {
	out := PlanOutput{Name: p.GetName(), Title: p.GetTitle(), State: p.GetState().String(), Version: p.GetVersion(),
		Request: p.GetRequest(), Planner: p.GetPlanner(), Repository: p.GetRepository(), Run: p.GetRun(),
		RejectReason: p.GetRejectReason(), Nodes: []PlanNode{}}
	for _, n := range p.GetDag().GetNodes() {
		out.Nodes = append(out.Nodes, PlanNode{ID: n.GetId(), Name: n.GetName(), Role: n.GetRole(), DependsOn: n.GetDependsOn(),
			Command: n.GetCommand(), Prompt: n.GetPrompt()})
	}
	return out
}

func planText(p PlanOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Plan %s (version %d, %s): %s", p.Name, p.Version, p.State, p.Title)
	for _, n := range p.Nodes {
		fmt.Fprintf(&b, "\n- %s", n.ID)
		if n.Name != "" {
			fmt.Fprintf(&b, " %s", n.Name)
		}
		if len(n.DependsOn) > 0 {
			fmt.Fprintf(&b, " (after %s)", strings.Join(n.DependsOn, ", "))
		}
	}
	if p.Run != "" {
		fmt.Fprintf(&b, "\nRun: %s", p.Run)
	}
	return b.String()
}

func runOutput(r *orchestratorv1.Run) RunOutput {
	out := RunOutput{Name: r.GetName(), State: r.GetState().String(), Plan: r.GetPlan(), Repository: r.GetRepository(),
		SessionCheck: r.GetSessionCheck().GetState(), MergeConflicts: r.GetMergeConflicts(), Nodes: []RunNode{},
		CreateTime: timeText(r.GetCreateTime()), StartTime: timeText(r.GetStartTime()), EndTime: timeText(r.GetEndTime())}
	if r.GetSessionId() != "" {
		out.Session = resourceName("sessions", r.GetSessionId())
	}
	for _, n := range r.GetNodes() {
		out.Nodes = append(out.Nodes, RunNode{ID: n.GetNodeId(), State: n.GetState().String(), Attempt: n.GetAttempt(),
			ExitCode: n.GetExitCode(), Error: n.GetError()})
	}
	return out
}

// timeText renders a timestamp as RFC 3339 ("" when unset).
func timeText(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339Nano)
}

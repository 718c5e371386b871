package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

func TestSelectiveContextReachesTheTask(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	rc := &orchestratorv1.RunContext{
		Plan:    "# Plan\n\n## Phase 1A\n\nintro\n\n### Step 1A.1: parser\n\nwrite the parser\n\n### Step 1A.2: printer\n\nwrite the printer\n\n## Phase 2B\n\n### Step 2B.1: cli\n\nwire the cli\n",
		Design:  "# Design\n\n## Component lexer\n\ntokens\n\n## Component auth-flow\n\nsessions and tokens\n\n```\n## not a heading\n```\n\n## Component storage\n\ntables\n",
		Spec:    "# Spec\n\nThe whole spec.\n",
		Prd:     "# PRD\n\n## Problem Statement\n\nparsing is slow\n\n## Goals\n\n- fast\n\n## Non-goals\n\n- pretty\n",
		Project: "Goals: ship v1. Dependencies: done 3, blocked 1.",
	}
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Context: rc, Dag: dagOf(
		&orchestratorv1.Node{Id: "a", Command: "true", Sources: []string{"Plan 1A.1, Design auth-flow, Spec 3"}, DoneWhen: "parser tests pass"},
		&orchestratorv1.Node{Id: "b", Command: "true", Sources: []string{"Plan Step 1A.9"}},
	)})
	require.True(t, proto.Equal(rc, h.get(t, ctx, run.GetName()).GetContext()))
	specs := map[string]*orchestratorv1.Node{}
	for _, env := range h.tasks(t, "engineer", 2) {
		n := env.GetNode()
		specs[n.GetId()] = n
	}
	a := specs["a"].GetTaskContext()
	require.Contains(t, a, "### Step 1A.1: parser\n\nwrite the parser")
	require.NotContains(t, a, "Step 1A.2")
	require.NotContains(t, a, "2B.1")
	require.Contains(t, a, "## Component auth-flow\n\nsessions and tokens\n\n```\n## not a heading\n```")
	require.NotContains(t, a, "lexer")
	require.NotContains(t, a, "storage")
	require.Contains(t, a, "The whole spec.")
	require.Contains(t, a, "parsing is slow")
	require.Contains(t, a, "- fast")
	require.NotContains(t, a, "Non-goals")
	require.Contains(t, a, "Goals: ship v1.")
	require.Equal(t, "parser tests pass", specs["a"].GetDoneWhen())
	// 1A.9 is not in the plan: its phase 1A is given instead.
	b := specs["b"].GetTaskContext()
	require.Contains(t, b, "## Phase 1A")
	require.Contains(t, b, "Step 1A.2: printer")
	require.NotContains(t, b, "Phase 2B")
	require.Contains(t, b, "tables", "no design citation: the whole design")
	// The submitted DAG stays as it was.
	require.Empty(t, h.get(t, ctx, run.GetName()).GetDag().GetNodes()[0].GetTaskContext())
}

// The run's intent reaches every task, so that the pipeline can check its
// corrections against it (spec A-12).
func TestRunIntentReachesTheTask(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	criteria := []*messagev1.SuccessCriterion{
		{Criterion: "the button is in the header", Source: messagev1.CriterionSource_CRITERION_SOURCE_EXPLICIT},
		{Criterion: "session termination", Source: messagev1.CriterionSource_CRITERION_SOURCE_INFERRED,
			Priority: messagev1.ExpectationPriority_EXPECTATION_PRIORITY_REQUIRED, InferredFrom: "academic:authentication/logout"},
	}
	h.create(t, ctx, &orchestratorv1.CreateRunRequest{
		Context: &orchestratorv1.RunContext{KeyConstraints: []string{"skip confirmation"}, SuccessCriteria: criteria},
		Dag:     dagOf(&orchestratorv1.Node{Id: "a", Command: "true", KeyConstraints: []string{"ignored: output only"}})})
	n := h.tasks(t, "engineer", 1)[0].GetNode()
	require.Equal(t, []string{"skip confirmation"}, n.GetKeyConstraints())
	require.Len(t, n.GetSuccessCriteria(), 2)
	require.True(t, proto.Equal(criteria[1], n.GetSuccessCriteria()[1]))

	_, err := h.svc.CreateRun(ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(&orchestratorv1.Node{Id: "a", Command: "true"}),
		Context: &orchestratorv1.RunContext{KeyConstraints: make([]string, 101)}})
	require.ErrorContains(t, err, "context.key_constraints: 101 entries exceed the limit of 100")
}

// Every task's context is drawn from the same documents: citations are
// looked up once per run, so a run whose tasks cite many steps of a long
// plan is created at once, and documents or citations past the limits are
// refused.
func TestContextCitationsAreBounded(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	// A plan of 100,000 lines, and tasks that each cite 100 steps it does
	// not have (each falling back through 7 parents).
	plan := strings.Repeat("a\n", 100_000)
	cite := "Plan " + strings.TrimSuffix(strings.Repeat("1.", 8), ".")
	sources := []string{strings.TrimSuffix(strings.Repeat(cite+",", 100), ",")}
	var nodes []*orchestratorv1.Node
	for i := range 20 {
		nodes = append(nodes, &orchestratorv1.Node{Id: fmt.Sprintf("n%d", i), Command: "true", Sources: sources})
	}
	start := time.Now()
	h.create(t, ctx, &orchestratorv1.CreateRunRequest{Context: &orchestratorv1.RunContext{Plan: plan}, Dag: dagOf(nodes...)})
	require.Less(t, time.Since(start), 10*time.Second, "citations looked up once per run")

	var many []string
	for i := range 1001 {
		many = append(many, fmt.Sprintf("Design d%d", i))
	}
	for _, req := range []*orchestratorv1.CreateRunRequest{
		{Context: &orchestratorv1.RunContext{Spec: strings.Repeat("x", 256<<10+1)}, Dag: dagOf(cmd("a", "true"))},
		{Context: &orchestratorv1.RunContext{Design: "# d1"}, Dag: dagOf(&orchestratorv1.Node{Id: "a", Command: "true", Sources: many})},
		{Context: &orchestratorv1.RunContext{Plan: "# 1"}, Dag: dagOf(&orchestratorv1.Node{Id: "a", Command: "true",
			Sources: []string{"Plan " + strings.Repeat("1", 129)}})},
	} {
		_, err := h.svc.CreateRun(ctx, req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	}
}

func TestSectionExtraction(t *testing.T) {
	doc := "# A\n\n## Step 1.1 x\n\none\n\n### sub\n\ntwo\n\n## Step 1.2\n\nthree\n"
	s, ok := orchestrator.Section(doc, "1.1")
	require.True(t, ok)
	require.Equal(t, "## Step 1.1 x\n\none\n\n### sub\n\ntwo", s)
	_, ok = orchestrator.Section(doc, "9.9")
	require.False(t, ok)
	refs := orchestrator.ParseReferences([]string{"Plan Step 1A.1, Design Component auth-flow", "Spec 4.2", "Plan 2B.3"})
	require.Equal(t, []string{"1A.1", "2B.3"}, refs.Plan)
	require.Equal(t, []string{"auth-flow"}, refs.Design)
}

func TestEscalateAsksTheArchitect(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	h.startWorker(t, 1)
	ctx := userCtx("t1")
	session := ids.New()
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{SessionId: session, Dag: dagOf(cmd("broken", "exit 3"))})
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	r := action(t, h, ctx, &orchestratorv1.TaskActionRequest{Session: "sessions/" + session, NodeId: "broken",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_ESCALATE, Message: "the approach is wrong"})
	require.Contains(t, r.GetDetail(), "Architect")
	esc := h.event(t, "t1", session, eventv1.EventType_EVENT_TYPE_NODE_ESCALATED)
	require.Equal(t, "broken", esc.GetNode().GetNode())
	require.Equal(t, run.GetName(), esc.GetNode().GetRun())
	text := inboxMessage(t, h, topology.AgentArchitect).GetUserInput().GetText()
	require.Contains(t, text, "Corrective plan needed: task broken of "+run.GetName())
	require.Contains(t, text, "The user says: the approach is wrong")
	_, err := h.svc.TaskAction(ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "broken", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY, MaxLoops: 99})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

// Escalating a node of a run without a session is refused, and refused
// before anything changes: the running node is not cancelled.
func TestEscalateWithoutASessionLeavesTheNodeRunning(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: dagOf(cmd("slow", "sleep 60"), cmd("after", "true", "slow"))})
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_DISPATCHED, nodesByID(run)["slow"].GetState())
	_, err := h.svc.TaskAction(ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "slow",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_ESCALATE})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "has no session")
	got := h.get(t, ctx, run.GetName())
	require.Equal(t, orchestratorv1.RunState_RUN_STATE_RUNNING, got.GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_DISPATCHED, nodesByID(got)["slow"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_PENDING, nodesByID(got)["after"].GetState())
}

// Re-running a failed node under fail_fast brings back the nodes fail_fast
// cancelled because of it (its dependent and an independent node), while a
// node the user cancelled stays cancelled.
func TestRetryRevivesNodesFailFastCancelled(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{MaxConcurrency: 1, Dag: &orchestratorv1.Dag{
		Nodes:  []*orchestratorv1.Node{cmd("a", "x"), cmd("b", "x", "a"), cmd("c", "x"), cmd("u", "x")},
		Policy: &orchestratorv1.Policy{FailFast: true},
	}})
	require.Equal(t, "a", h.tasks(t, "engineer", 1)[0].GetNodeId())
	_, err := h.svc.CancelRun(ctx, &orchestratorv1.CancelRunRequest{Name: run.GetName(), NodeId: "u"})
	require.NoError(t, err)
	h.sendResult(t, "t1", run.GetId(), "a", 1, 1, "", "rr-a1")
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n := nodesByID(got)
	for _, id := range []string{"b", "c", "u"} {
		require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n[id].GetState(), id)
	}

	action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "a", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY})
	n = nodesByID(h.get(t, ctx, run.GetName()))
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["u"].GetState(), "the user's cancellation stands")
	require.NotEqual(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["b"].GetState())
	require.NotEqual(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["c"].GetState())
	a := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "a", a.GetNodeId())
	require.Equal(t, int32(2), a.GetAttempt())
	h.sendResult(t, "t1", run.GetId(), "a", 2, 0, "", "rr-a2")
	done := map[string]bool{}
	for len(done) < 2 {
		d := h.tasks(t, "engineer", 1)[0]
		require.Contains(t, []string{"b", "c"}, d.GetNodeId())
		done[d.GetNodeId()] = true
		h.sendResult(t, "t1", run.GetId(), d.GetNodeId(), d.GetAttempt(), 0, "", "rr-"+d.GetNodeId())
	}
	require.Eventually(t, func() bool {
		g := h.get(t, ctx, run.GetName())
		n = nodesByID(g)
		return terminal(g.GetState()) && n["b"].GetState() == orchestratorv1.NodeState_NODE_STATE_SUCCEEDED &&
			n["c"].GetState() == orchestratorv1.NodeState_NODE_STATE_SUCCEEDED
	}, waitFor, 20*time.Millisecond, "nodes: %v", n)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_CANCELLED, n["u"].GetState())
}

// Under fail_fast with two failed nodes, retrying one runs it and what
// depends on it, while fail_fast keeps cancelling the rest as long as the
// other stays failed; retrying the other then finishes the run.
func TestRetryUnderFailFastWithTwoFailures(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{MaxConcurrency: 2, Dag: &orchestratorv1.Dag{
		Nodes:  []*orchestratorv1.Node{cmd("a", "x"), cmd("d", "x"), cmd("b", "x", "a"), cmd("c", "x", "d")},
		Policy: &orchestratorv1.Policy{FailFast: true},
	}})
	first := h.tasks(t, "engineer", 2)
	require.ElementsMatch(t, []string{"a", "d"}, []string{first[0].GetNodeId(), first[1].GetNodeId()})
	h.sendResult(t, "t1", run.GetId(), "a", 1, 1, "", "ff2-a1")
	h.sendResult(t, "t1", run.GetId(), "d", 1, 1, "", "ff2-d1")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)

	action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "a", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY})
	a := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "a", a.GetNodeId(), "the retried node runs though d stays failed")
	require.Equal(t, int32(2), a.GetAttempt())
	h.sendResult(t, "t1", run.GetId(), "a", 2, 0, "", "ff2-a2")
	b := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "b", b.GetNodeId(), "what depends on the retried node runs too")
	h.sendResult(t, "t1", run.GetId(), "b", b.GetAttempt(), 0, "", "ff2-b")
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	n := nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["b"].GetState())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_FAILED, n["d"].GetState())
	require.NotEqual(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["c"].GetState(), "c waits on the failed d")

	action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "d", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY})
	d := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "d", d.GetNodeId())
	h.sendResult(t, "t1", run.GetId(), "d", d.GetAttempt(), 0, "", "ff2-d2")
	c := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "c", c.GetNodeId())
	h.sendResult(t, "t1", run.GetId(), "c", c.GetAttempt(), 0, "", "ff2-c")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
}

// /task <node> prompt (spec F-13): a pending node starts with the user's
// guidance, a failed node runs again with it, and a finished one refuses it.
func TestPromptGivesTheEngineerGuidance(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{Dag: &orchestratorv1.Dag{
		Nodes: []*orchestratorv1.Node{cmd("a", "x"), {Id: "b", Command: "x", Prompt: "write the parser", DependsOn: []string{"a"}}},
	}})
	_, err := h.svc.TaskAction(ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "b", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, Message: "  "})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "prompt needs a message")
	resp := action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "b",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, Message: "Focus on error handling first"})
	require.Contains(t, resp.GetDetail(), "starts with the guidance")

	a := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "a", a.GetNodeId())
	h.sendResult(t, "t1", run.GetId(), "a", a.GetAttempt(), 0, "", "pr-a")
	env := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "b", env.GetNodeId())
	require.Equal(t, []string{"Focus on error handling first"}, env.GetNode().GetGuidance())

	h.sendResult(t, "t1", run.GetId(), "b", env.GetAttempt(), 1, "", "pr-b1")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	resp = action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "b",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, Message: "keep the public API"})
	require.Contains(t, resp.GetDetail(), "runs again with the guidance")
	env = h.tasks(t, "engineer", 1)[0]
	require.Equal(t, int32(2), env.GetAttempt())
	require.Equal(t, []string{"Focus on error handling first", "keep the public API"}, env.GetNode().GetGuidance())
	h.sendResult(t, "t1", run.GetId(), "b", 2, 0, "", "pr-b2")
	h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)

	_, err = h.svc.TaskAction(ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "b", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, Message: "more"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Equal(t, orchestrator.ReasonNodeEnded, apierr.Reason(err))

	// Another tenant sees neither the run's nodes nor its decisions.
	_, err = h.svc.TaskAction(userCtx("t2"), &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "b",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Equal(t, "RUN_NOT_FOUND", apierr.Reason(err))
	_, err = h.svc.ListDecisions(userCtx("t2"), &orchestratorv1.ListDecisionsRequest{Name: run.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = h.svc.TaskAction(ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "nope", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY})
	require.Equal(t, "NODE_NOT_FOUND", apierr.Reason(err))
}

// Skipping a failed node (spec H-01: retry or skip) lets what depends on
// it run, and the run succeed; the node stays SKIPPED with the reason.
func TestSkipGoesOnWithoutAFailedNode(t *testing.T) {
	t.Parallel()
	h, _ := newOrchestrator(t, nil, nil)
	ctx := userCtx("t1")
	run := h.create(t, ctx, &orchestratorv1.CreateRunRequest{MaxConcurrency: 1, Dag: &orchestratorv1.Dag{
		Nodes: []*orchestratorv1.Node{cmd("a", "x"), cmd("b", "x", "a"), cmd("c", "x", "b")},
	}})
	a := h.tasks(t, "engineer", 1)[0]
	require.Equal(t, "a", a.GetNodeId())
	h.sendResult(t, "t1", run.GetId(), "a", 1, 1, "", "sk-a1")
	got := h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_FAILED)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SKIPPED, nodesByID(got)["b"].GetState())

	_, err := h.svc.TaskAction(ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "b", Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_SKIP})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "b was skipped by the failure, not failed")
	resp := action(t, h, ctx, &orchestratorv1.TaskActionRequest{Name: run.GetName(), NodeId: "a",
		Action: orchestratorv1.TaskActionType_TASK_ACTION_TYPE_SKIP, Message: "done by hand"})
	require.Contains(t, resp.GetDetail(), "goes on without the node")
	for _, id := range []string{"b", "c"} {
		d := h.tasks(t, "engineer", 1)[0]
		require.Equal(t, id, d.GetNodeId())
		h.sendResult(t, "t1", run.GetId(), id, d.GetAttempt(), 0, "", "sk-"+id)
	}
	got = h.waitState(t, ctx, run.GetName(), orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	n := nodesByID(got)
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SKIPPED, n["a"].GetState())
	require.Equal(t, "skipped by the user: done by hand", n["a"].GetError())
	require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n["c"].GetState())
}

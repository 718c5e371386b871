package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// scriptGate is an LLM gate whose only provider is the OpenAI-compatible
// client talking to a script server. The Inspector's reviews find nothing
// unless a script given says otherwise.
func scriptGate(t *testing.T, scripts ...scriptmodel.Script) (*gate.Gate, *scriptmodel.Server) {
	t.Helper()
	srv, err := scriptmodel.New(append(scripts, review.PassingScript())...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	lc := testenv.FromFlags[llm.Config](t)
	lc.OpenAI.APIKey, lc.OpenAI.BaseURL = "sk-test", srv.URL+"/v1"
	reg, err := provider.New(lc)
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g, srv
}

func call(name string, args map[string]any) scriptmodel.Turn { return scriptmodel.Tool(name, args) }

const (
	addMul = "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a * b }\n"
	addSum = "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n"
)

// The Engineer works through its tools: it reads, edits, and finishes; the
// Tester's failure comes back as its next turn in the same conversation,
// and it fixes that too. What it was told reaches the model: the task, its
// done criteria, its context and the user's guidance, given before and
// while it runs.
func TestEngineerAgentFixesAndActsOnFeedback(t *testing.T) {
	g, srv := scriptGate(t, scriptmodel.Script{Match: "Make Add return the sum", Turns: []scriptmodel.Turn{
		{Text: "Reading calc.go first.", Calls: []scriptmodel.Call{{Name: "read_file", Args: map[string]any{"path": "calc.go"}}}},
		call("grep", map[string]any{"pattern": "func Add"}).Then("return a - b"),
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a - b", "new_string": "a * b"}).Then("calc.go:4:"),
		call("finish", map[string]any{"summary": "first try", "decisions": "kept the signature"}).Then("edited calc.go"),
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a * b", "new_string": "a + b"}).Then("test TestAdd failed"),
		call("finish", map[string]any{"summary": "fixed Add", "decisions": "kept the signature", "tested": "go test"}),
	}})
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	s.SetModel(g)
	node := &orchestratorv1.Node{Id: "fix-add", Name: "fix Add", Pipeline: true, Prompt: "Make Add return the sum of its arguments.",
		DoneWhen: "TestAdd passes", TaskContext: "## Plan\n\n### Step 1A.1: fix Add", Guidance: []string{"keep the signature"}}
	d := repoTask(t, repo, base, node)
	d.TenantId, d.SessionId = "t1", "s1"
	ctl := newTaskControl(true)
	ctl.engineerReads = s.engineerReads(d.GetNode())
	detail, err := ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, "Focus on overflow first")
	require.NoError(t, err)
	require.Contains(t, detail, "the Engineer reads the guidance")

	out, cancelled := s.runTask(withControl(context.Background(), ctl), "engineer", d)
	require.False(t, cancelled)
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError()+"\n"+out.msg.GetStdout())
	p, r := pipelineOf(t, out)
	require.Equal(t, pipeCompleted, p.GetState())
	require.Equal(t, int32(2), p.GetLoops(), "the first change failed the tests, the second passed")
	require.Contains(t, out.msg.GetPatch(), "return a + b")
	require.Empty(t, out.msg.GetNoChangesReason())
	require.Contains(t, r.GetImplemented(), "the model wrote calc.go: fixed Add")
	require.Equal(t, "kept the signature", r.GetDecisions())
	act := r.GetActivity()
	require.Equal(t, int32(6), act.GetToolCallCount())
	require.Equal(t, int32(6), act.GetTurns())
	require.Equal(t, "finished", act.GetStopReason())
	require.Positive(t, act.GetInputTokens())
	require.Len(t, act.GetToolCalls(), 6)
	require.Equal(t, "read_file", act.GetToolCalls()[0].GetTool())
	require.Equal(t, `{"path":"calc.go"}`, act.GetToolCalls()[0].GetArgs())
	require.True(t, act.GetToolCalls()[0].GetOk())

	first := srv.Requests()[0]
	brief := first.Messages[0].Content
	require.True(t, strings.HasPrefix(brief, "Make Add return the sum of its arguments."), "the task comes first, verbatim")
	for _, want := range []string{"TestAdd passes", "Step 1A.1: fix Add", "The user's guidance (follow it)", "keep the signature"} {
		require.Contains(t, brief, want)
	}
	require.Contains(t, first.Messages[1].Content, "Focus on overflow first", "guidance given while it runs reaches the model")
	require.Contains(t, first.System, "You are the Engineer")
	require.Subset(t, first.Tools, []string{"read_file", "list_files", "grep", "edit_file", "multi_edit", "write_file",
		"run_command", "run_tests", "request_help", "finish"})
}

// Tool errors in a row: the second warns the Engineer, the third reverts
// its changes and asks the user on the session's stream; the user answers
// with /task <node> prompt, and it goes on from there. Each tool call is an
// event on the session's stream.
func TestEngineerThreeStrikesAskTheUser(t *testing.T) {
	bad := call("edit_file", map[string]any{"path": "calc.go", "old_string": "nowhere", "new_string": "x"})
	g, srv := scriptGate(t, scriptmodel.Script{Match: "Make Add return the sum", Turns: []scriptmodel.Turn{
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a - b", "new_string": "a * b"}),
		bad, bad.Then("was not found"), bad.Then("FAILURE WARNING"),
		call("read_file", map[string]any{"path": "calc.go"}).Then("reverted", "A person answered", "use a + b"),
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a - b", "new_string": "a + b"}).Then("return a - b"),
		call("finish", map[string]any{"summary": "summed, as the user said"}),
	}})
	repo, base := brokenRepo(t)
	s := busService(t)
	s.SetModel(g)
	d := repoTask(t, repo, base, &orchestratorv1.Node{Id: "fix-add", Prompt: "Make Add return the sum of its arguments."})
	d.TenantId, d.UserId, d.SessionId = "t1", "u1", "2f6d3c1e-8b7a-4c39-9a8e-5d2b1f0c7e64"

	help := make(chan *nats.Msg, 4)
	sub, err := s.bus.Conn.ChanSubscribe(topology.InboxSubject(s.bus, topology.AgentGuide), help)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, topology.EnsureAgents(t.Context(), s.bus))
	require.NoError(t, topology.EnsureEvents(t.Context(), s.bus))

	ctl := newTaskControl(false)
	done := make(chan taskOutcome, 1)
	go func() {
		out, _ := s.runTask(withControl(context.Background(), ctl), "engineer", d)
		done <- out
	}()
	var asked *messagev1.Envelope
	select {
	case m := <-help:
		asked = &messagev1.Envelope{}
		require.NoError(t, proto.Unmarshal(m.Data, asked))
	case out := <-done:
		t.Fatalf("the task ended without asking: %s %v", out.msg.GetError(), srv.Failures())
	case <-time.After(30 * time.Second):
		t.Fatal("no request for help")
	}
	require.Equal(t, messagev1.MessageType_MESSAGE_TYPE_TASK_HELP, asked.GetType())
	require.Equal(t, "u1", asked.GetUserId())
	require.Contains(t, asked.GetTaskHelp().GetText(), "Answer with /task fix-add prompt")
	require.Contains(t, asked.GetTaskHelp().GetText(), "was not found")
	_, err = ctl.apply(orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT, "use a + b")
	require.NoError(t, err)

	out := <-done
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Contains(t, out.msg.GetPatch(), "return a + b")
	require.NotContains(t, out.msg.GetPatch(), "a * b", "the change before the strikes was reverted")
	require.Equal(t, int32(1), out.msg.GetReport().GetActivity().GetReverts())

	evs := sessionEvents(t, s, d)
	kinds := map[eventv1.EventType]int{}
	for _, e := range evs {
		kinds[e.GetType()]++
	}
	require.Equal(t, 14, kinds[eventv1.EventType_EVENT_TYPE_TOOL_CALL], "a start and an end for each of the 7 calls")
	require.Equal(t, 1, kinds[eventv1.EventType_EVENT_TYPE_AGENT_WARNING])
	require.Equal(t, 1, kinds[eventv1.EventType_EVENT_TYPE_AGENT_REVERTED])
	var ended *eventv1.ToolCallEvent
	for _, e := range evs {
		if tc := e.GetToolCall(); tc != nil && tc.GetStatus() == eventv1.ToolCallStatus_TOOL_CALL_STATUS_FAILED {
			ended = tc
			break
		}
	}
	require.NotNil(t, ended)
	require.Equal(t, "edit_file", ended.GetTool())
	require.Equal(t, "runs/r1", ended.GetRun())
	require.Equal(t, "fix-add", ended.GetNode())
	require.Contains(t, ended.GetSummary(), "old_string was not found")
}

// sessionEvents reads the events the task published on its session.
func sessionEvents(t *testing.T, s *Service, d *taskv1.TaskDispatch) []*eventv1.Event {
	t.Helper()
	cons, err := s.bus.JS.OrderedConsumer(t.Context(), topology.EventsStream(s.bus), jetstreamFilter(topology.SessionEvents(s.bus, d.GetTenantId(), d.GetSessionId())))
	require.NoError(t, err)
	var out []*eventv1.Event
	for {
		msg, err := cons.Next(jetstreamWait(time.Second))
		if err != nil {
			return out
		}
		ev := &eventv1.Event{}
		require.NoError(t, proto.Unmarshal(msg.Data(), ev))
		require.NoError(t, topology.CheckEvent(ev))
		out = append(out, ev)
	}
}

// Without a session, no one can be asked: the third strike ends the task,
// which fails with what the model did.
func TestEngineerThreeStrikesWithoutASession(t *testing.T) {
	bad := call("edit_file", map[string]any{"path": "calc.go", "old_string": "nowhere", "new_string": "x"})
	g, _ := scriptGate(t, scriptmodel.Script{Match: "Make Add", Turns: []scriptmodel.Turn{bad, bad, bad}})
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	s.SetModel(g)
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Prompt: "Make Add sum."}))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Contains(t, out.msg.GetNoChangesReason(), "the model stopped (strikes: 3 tool calls failed in a row")
	require.Equal(t, "strikes", out.msg.GetReport().GetActivity().GetStopReason())
}

// A model that finishes without an edit leaves the node NO_CHANGES, with
// its own words.
func TestEngineerThatChangesNothing(t *testing.T) {
	g, _ := scriptGate(t, scriptmodel.Script{Match: "Make Add", Turns: []scriptmodel.Turn{
		call("read_file", map[string]any{"path": "calc.go"}),
		call("finish", map[string]any{"summary": "Add already does what is asked"}),
	}})
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	s.SetModel(g)
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Prompt: "Make Add sum."}))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Empty(t, out.msg.GetPatch())
	require.Equal(t, "the model finished without changing a file: Add already does what is asked", out.msg.GetNoChangesReason())
}

// Prompt-only Tester and Inspector nodes use the model: the Tester writes
// a test; the Inspector is offered no tool that writes.
func TestTesterAndInspectorNodesUseTheModel(t *testing.T) {
	test := "package calc\n\nimport \"testing\"\n\nfunc TestSub(t *testing.T) {\n\tif Add(2, 1) != 1 {\n\t\tt.Fatal(\"sub\")\n\t}\n}\n"
	g, srv := scriptGate(t,
		scriptmodel.Script{Match: "Test that Add", Turns: []scriptmodel.Turn{
			call("write_file", map[string]any{"path": "sub_test.go", "content": test}),
			call("run_tests", map[string]any{}).Then("created sub_test.go"),
			call("finish", map[string]any{"summary": "added TestSub", "tested": "go test: TestSub passes"}).Then("passed"),
		}},
		scriptmodel.Script{Match: "Review calc.go", Turns: []scriptmodel.Turn{
			call("read_file", map[string]any{"path": "calc.go"}),
			call("finish", map[string]any{"summary": "calc.go:4: Add subtracts (high)"}),
		}})
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	s.SetModel(g)
	out, _ := s.runTask(context.Background(), "tester", repoTask(t, repo, base, &orchestratorv1.Node{Id: "t", Role: "tester", Prompt: "Test that Add subtracts."}))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Contains(t, out.msg.GetPatch(), "func TestSub")
	require.Equal(t, "go test: TestSub passes", out.msg.GetReport().GetTested())

	out, _ = s.runTask(context.Background(), "inspector", repoTask(t, repo, base, &orchestratorv1.Node{Id: "i", Role: "inspector", Prompt: "Review calc.go."}))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Empty(t, out.msg.GetNoChangesReason(), "a review changes nothing by design")
	require.Contains(t, out.msg.GetReport().GetImplemented(), "Add subtracts")
	require.Empty(t, srv.Failures())
	for _, r := range srv.Requests() {
		if strings.Contains(r.System, "You are the Inspector") {
			require.NotContains(t, r.Tools, "edit_file")
			require.NotContains(t, r.Tools, "write_file")
		}
	}
}

// A task starts from its dependencies' changes (spec T-10); its own patch
// holds only its change. A dependency's patch that does not apply fails
// the task, naming the node and its files.
func TestTaskStartsFromItsDependencies(t *testing.T) {
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	dep, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "a",
		Edits: []*orchestratorv1.FileEdit{{Path: "calc.go", Content: addSum}, {Path: "NOTES.md", Content: "a\n"}}}))
	require.NotEmpty(t, dep.msg.GetPatch())

	d := repoTask(t, repo, base, &orchestratorv1.Node{Id: "b", Command: "grep -q 'a + b' calc.go && echo b >> NOTES.md"})
	d.DependencyPatches = []*taskv1.DependencyPatch{{NodeId: "a", Patch: dep.msg.GetPatch()}}
	out, _ := s.runTask(context.Background(), "engineer", d)
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError()+out.msg.GetStderr())
	require.Contains(t, out.msg.GetPatch(), "+b")
	require.NotContains(t, out.msg.GetPatch(), "a + b", "the dependency's change is not the node's")
	require.Equal(t, []string{"NOTES.md"}, out.msg.GetReport().GetFilesChanged())

	// Applied twice, the same change conflicts.
	d = repoTask(t, repo, base, &orchestratorv1.Node{Id: "c", Command: "true"})
	d.DependencyPatches = []*taskv1.DependencyPatch{{NodeId: "a", Patch: dep.msg.GetPatch()}, {NodeId: "a2", Patch: dep.msg.GetPatch()}}
	out, _ = s.runTask(context.Background(), "engineer", d)
	require.Equal(t, int32(-1), out.msg.GetExitCode())
	require.Contains(t, out.msg.GetError(), "the changes of node a2 (NOTES.md, calc.go) do not apply on top of the base commit and the other dependencies' changes")
}

// The checkout's files as the agent lists them: tracked and new, not
// ignored, not removed.
func TestAgentListsTheCheckoutsFiles(t *testing.T) {
	repo, base := brokenRepo(t)
	s := pipelineService(t)
	tr := s.newTaskRun("engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Command: "true"}))
	failure, _ := tr.prepare(context.Background())
	require.Empty(t, failure)
	t.Cleanup(tr.close)
	require.NoError(t, os.WriteFile(filepath.Join(tr.dir, ".gitignore"), []byte("build/\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(tr.dir, "build"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tr.dir, "build", "out"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tr.dir, "new.go"), []byte("package calc\n"), 0o644))
	require.NoError(t, exec.Command("rm", filepath.Join(tr.dir, "calc_test.go")).Run())
	files, err := tr.listFiles(context.Background())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{".gitignore", "calc.go", "go.mod", "new.go"}, files)
}

// busService is pipelineService with a bus.
func busService(t *testing.T) *Service {
	t.Helper()
	s := pipelineService(t)
	s.bus = testenv.NATS(t)
	return s
}

func jetstreamFilter(subject string) jetstream.OrderedConsumerConfig {
	return jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
}

func jetstreamWait(d time.Duration) jetstream.FetchOpt { return jetstream.FetchMaxWait(d) }

// The Engineer over the Anthropic messages API, streamed through the gate:
// the same loop, the provider's own wire format.
func TestEngineerAgentOverAnthropic(t *testing.T) {
	srv, err := scriptmodel.New(scriptmodel.Script{Match: "Make Add return the sum", Turns: []scriptmodel.Turn{
		{Text: "Reading.", Calls: []scriptmodel.Call{{Name: "read_file", Args: map[string]any{"path": "calc.go"}}}},
		call("edit_file", map[string]any{"path": "calc.go", "old_string": "a - b", "new_string": "a + b"}).Then("return a - b"),
		call("finish", map[string]any{"summary": "summed"}).Then("edited calc.go"),
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	lc := testenv.FromFlags[llm.Config](t)
	lc.Provider, lc.Anthropic.APIKey, lc.Anthropic.BaseURL = llm.Anthropic, "sk-ant-test", srv.URL
	reg, err := provider.New(lc)
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)

	repo, base := brokenRepo(t)
	s := pipelineService(t)
	s.SetModel(g)
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Prompt: "Make Add return the sum of its arguments."}))
	require.Empty(t, srv.Failures())
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetError())
	require.Contains(t, out.msg.GetPatch(), "return a + b")
	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, "anthropic", reqs[0].API)
	require.True(t, reqs[0].Stream, "the gate streams the Engineer's turns")
	require.Contains(t, out.msg.GetReport().GetActivity().GetModel(), "anthropic")
}

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/agent/codetools"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/pipeline"
	"sylk.dev/sylk/pkg/secrets"
)

// A task's agent (spec E: the Engineer's tools and protocol, E-13, E-14):
// the loop of pkg/agent over the LLM gate with native tool calls, the
// workspace tools of pkg/agent/codetools on the task's checkout, the
// Librarian's code search on the run's repository, consultations, and help
// from the user. Each tool call is an event on the session's stream and a
// record in the task's report.

// maxToolRecords bounds the tool calls a report keeps (the newest).
const maxToolRecords = 200

// streamer is a Model that streams (the LLM gate does).
type streamer interface {
	Stream(ctx context.Context, req *llm.Request, h llm.Handler) error
}

// taskAgent is one task's agent.
type taskAgent struct {
	t    *taskRun
	role string
	loop *agent.Loop
	ws   *codetools.Workspace
	ev   *agentEvents
	help *helpDesk

	mu    sync.Mutex
	calls []*orchestratorv1.ToolCallRecord
	// model is the provider and model that answered last.
	model string
	// input is the last turn's input tokens (for the handoff threshold).
	input int
	res   agent.Result
	// finished is the report the model gave when it called finish.
	finished *codetools.Finish
	// written are the files the agent's edits wrote, in order.
	written []string
}

// agentReads says whether a language model acts on a task's prompt: one
// is configured, and it is not the offline provider (which writes no
// code).
func (s *Service) agentReads(spec *orchestratorv1.Node) bool {
	return s.model != nil && !s.modelLocal && spec.GetPrompt() != ""
}

// newAgent builds the task's agent for role in the task's directory. stop
// is asked after every turn (a context handoff); nil never stops.
func (t *taskRun) newAgent(ctx context.Context, role string, stop func(agent.Result, llm.Usage) string) (*taskAgent, error) {
	a := &taskAgent{t: t, role: role, ev: t.s.agentEvents(t.d, role)}
	ws, err := codetools.Open(codetools.Config{Dir: t.dir, Runner: commandRunner{t}, Tests: testRunner{t},
		Files: t.agentLister(), DefaultTimeout: t.s.cfg.AgentCommandTimeout, MaxTimeout: max(t.s.cfg.AgentCommandTimeout, t.timeout)})
	if err != nil {
		return nil, err
	}
	a.ws = ws
	ctl := controlOf(ctx, t.spec.GetPipeline())
	ctl.readsGuidance()
	help := &helpDesk{t: t, ev: a.ev, ctl: ctl}
	a.help = help
	tools := append(a.tools(ctx, ws), requestHelpTool(help))
	cfg := agent.Config{
		Limits:      agent.Limits{ToolCalls: t.s.cfg.AgentToolCalls, Tokens: t.s.cfg.AgentTokens},
		System:      agentSystem(role),
		Model:       t.s.cfg.EngineerModel,
		KeepResults: t.s.cfg.AgentKeepResults,
		Attribution: llm.Attribution{TenantID: t.d.GetTenantId(), UserID: t.d.GetUserId(), SessionID: t.d.GetSessionId(),
			// The task budget is keyed by run and node (spec B-16), not
			// by the node's id alone, which another run may share.
			PipelineID: pipeline.ID(t.d.GetRunId(), t.d.GetNodeId(), t.d.GetAttempt()), TaskID: t.d.GetRunId() + "/" + t.d.GetNodeId(), AgentID: t.s.cfg.ID, AgentType: role},
	}
	if stop != nil {
		cfg.Stop = stop
	}
	cfg.Interject = help.interject
	var helper agent.Helper
	if t.d.GetSessionId() != "" {
		helper = help
	}
	a.loop = agent.New(cfg, t.s.agentModel(a), tools, t.agentWorkspace(), helper, a.observe)
	return a, nil
}

// tools are the role's tools: the workspace's (the Inspector's without
// those that write), the Librarian's when the run's repository is indexed,
// consultations and help.
func (a *taskAgent) tools(ctx context.Context, ws *codetools.Workspace) []agent.Tool {
	var out []agent.Tool
	for _, tool := range ws.Tools() {
		if a.role == roleInspector && (tool.Def.Name == "edit_file" || tool.Def.Name == "multi_edit" || tool.Def.Name == "write_file") {
			continue
		}
		out = append(out, a.tracked(a.withRedaction(tool)))
	}
	return append(out, a.t.s.knowledgeTools(ctx, a.t.d, a.role)...)
}

// withRedaction keeps secrets out of what a tool returns to the model.
func (a *taskAgent) withRedaction(tool agent.Tool) agent.Tool {
	run := tool.Run
	tool.Run = func(ctx context.Context, args json.RawMessage) (string, error) {
		out, err := run(ctx, args)
		if err != nil {
			return "", errors.New(secrets.Scrub(err.Error()))
		}
		return secrets.Scrub(out), nil
	}
	return tool
}

// tracked notes the file an editing tool wrote.
func (a *taskAgent) tracked(tool agent.Tool) agent.Tool {
	switch tool.Def.Name {
	case "edit_file", "multi_edit", "write_file":
	default:
		return tool
	}
	run := tool.Run
	tool.Run = func(ctx context.Context, args json.RawMessage) (string, error) {
		out, err := run(ctx, args)
		var p struct {
			Path string `json:"path"`
		}
		if err == nil && json.Unmarshal(args, &p) == nil && p.Path != "" {
			a.mu.Lock()
			a.written = appendUnique(a.written, strings.TrimPrefix(path.Clean(p.Path), "./"))
			a.mu.Unlock()
		}
		return out, err
	}
	return tool
}

// writtenCount is how many files the agent wrote so far.
func (a *taskAgent) writtenCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.written)
}

// writtenSince is the files written after the first n.
func (a *taskAgent) writtenSince(n int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.written[min(n, len(a.written)):]...)
}

// finishedReport is the report of the agent's last finish, or nil.
func (a *taskAgent) finishedReport() *codetools.Finish {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.finished
}

// agentModel is the gate as the loop's model: streamed when the gate
// streams, so that the turn's text reaches the session as it arrives.
func (s *Service) agentModel(a *taskAgent) agent.Model {
	return agent.ModelFunc(func(ctx context.Context, req *llm.Request, h llm.Handler) (*llm.Response, error) {
		var resp *llm.Response
		if st, ok := s.model.(streamer); ok {
			acc := llm.NewAccumulator("", req.Model)
			if err := st.Stream(ctx, req, acc.Handler(h)); err != nil {
				return nil, err
			}
			resp = acc.Response()
		} else {
			var err error
			if resp, err = s.model.Complete(ctx, req); err != nil {
				return nil, err
			}
		}
		if resp.Provider == "" {
			// A streamed answer does not name its provider: the gate's
			// default answered, with the model it resolves the alias to.
			resp.Provider, resp.Model = s.modelName(req.Model)
		}
		a.mu.Lock()
		a.input = resp.Usage.InputTokens
		if resp.Model != "" {
			a.model = strings.Trim(resp.Provider+"/"+resp.Model, "/")
		}
		a.mu.Unlock()
		return resp, nil
	})
}

// modelName is the default provider's name and its model for alias.
func (s *Service) modelName(alias string) (provider, model string) {
	g, ok := s.model.(*gate.Gate)
	if !ok {
		return "", alias
	}
	p := g.Providers().Default()
	return p.Name(), p.Resolve(alias)
}

// run sends msg and lets the agent work until it finishes or a limit ends
// it.
func (a *taskAgent) run(ctx context.Context, msg string) (agent.Result, error) {
	res, err := a.loop.Run(ctx, llm.Message{Role: llm.RoleUser, Content: msg})
	a.ev.flushText(ctx)
	a.mu.Lock()
	a.res = res
	if res.Stop == agent.StopFinished {
		if f, perr := codetools.ParseFinish(res.Final); perr == nil {
			a.finished = &f
		}
	}
	a.mu.Unlock()
	return res, err
}

// observe records the loop's events and passes them to the session.
func (a *taskAgent) observe(e agent.Event) {
	a.ev.publish(e)
	if e.Kind != agent.EventToolEnd {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, &orchestratorv1.ToolCallRecord{CallId: e.CallID, Tool: e.Tool, Args: secrets.Scrub(e.Args),
		Ok: !e.Err, Duration: durationpb.New(e.Duration), Summary: secrets.Scrub(e.Text), Turn: int32(e.Turn)})
	if len(a.calls) > maxToolRecords {
		a.calls = a.calls[len(a.calls)-maxToolRecords:]
	}
}

// activity is what the agent did, for the task's report.
func (a *taskAgent) activity() *orchestratorv1.AgentActivity {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &orchestratorv1.AgentActivity{Model: a.model, Turns: int32(a.res.Turns), ToolCallCount: int32(a.res.ToolCalls),
		InputTokens: int64(a.res.Usage.InputTokens), OutputTokens: int64(a.res.Usage.OutputTokens),
		StopReason: string(a.res.Stop), StopDetail: a.res.Detail, Reverts: int32(a.res.Reverts), ToolCalls: a.calls}
}

// result is the loop's last result.
func (a *taskAgent) result() agent.Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.res
}

// lastInput is the last turn's input tokens.
func (a *taskAgent) lastInput() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.input
}

// report adds to the task's report what the agent did, and why it did not
// finish when it did not.
func (a *taskAgent) report(r *orchestratorv1.TaskReport) {
	r.Activity = a.activity()
	a.mu.Lock()
	f, res := a.finished, a.res
	a.mu.Unlock()
	if f != nil {
		if f.Tested != "" && (r.Tested == "" || r.Tested == "not tested") {
			r.Tested = f.Tested
		}
		return
	}
	why := fmt.Sprintf("the %s did not finish: %s (%s)", a.role, res.Stop, res.Detail)
	if r.Concerns == "" || r.Concerns == "none" {
		r.Concerns = why
	} else {
		r.Concerns += "; " + why
	}
}

func (a *taskAgent) close() { _ = a.ws.Close() }

// stopWords says why an agent that changed nothing stopped, for a person.
func stopWords(res agent.Result, f *codetools.Finish) string {
	switch res.Stop {
	case agent.StopFinished:
		if f != nil && f.Summary != "" {
			return "the model finished without changing a file: " + f.Summary
		}
		return "the model finished without changing a file"
	case "":
		return "the model did not work on it"
	}
	return fmt.Sprintf("the model stopped (%s: %s) without changing a file", res.Stop, res.Detail)
}

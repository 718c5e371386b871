package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/agent/codetools"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// What the agent's tools run on: the task's sandboxed executor, its test
// framework, its checkout's file list and checkpoints, and the user.

// commandRunner runs run_command in the task's sandbox.
type commandRunner struct{ t *taskRun }

func (r commandRunner) Run(ctx context.Context, command string, timeout time.Duration) (codetools.CommandResult, error) {
	res, err := r.t.s.exec.Execute(ctx, toolexec.Invocation{Command: "sh", Args: []string{"-c", command}, Tool: "agent",
		WorkingDir: r.t.dir, Workspace: r.t.ws, Env: r.t.vars, Writable: r.t.writable, CacheScope: r.t.scope, NoCache: true,
		Class: toolexec.ClassPipeline, Priority: int(r.t.d.GetPriority()), Timeout: timeout})
	if err != nil {
		if ctx.Err() != nil {
			return codetools.CommandResult{}, ctx.Err()
		}
		return codetools.CommandResult{}, fmt.Errorf("the command could not run: %v", err)
	}
	stdout, _ := res.RenderStdout(r.t.limit)
	stderr, _ := res.RenderStderr(r.t.limit)
	return codetools.CommandResult{ExitCode: res.ExitCode, Stdout: stdout, Stderr: stderr, TimedOut: res.TimedOut, Duration: res.Duration}, nil
}

// testRunner runs run_tests with the framework the Tester would use.
type testRunner struct{ t *taskRun }

func (r testRunner) RunTests(ctx context.Context, filter string) (string, error) {
	run := func(ctx context.Context, command string) (toolexec.Result, error) {
		if filter != "" {
			command = withTestFilter(command, filter)
		}
		return r.t.runCmd(ctx, command)
	}
	res, detected, err := runTests(ctx, r.t.dir, run)
	if err != nil {
		return "", fmt.Errorf("the tests could not run: %v", err)
	}
	if !detected {
		return "no test framework was detected in the repository: run its tests with run_command", nil
	}
	return renderTestResult(res), nil
}

// withTestFilter narrows a framework's command to filter: go test's -run,
// or the filter as the command's last argument (a test file or name, as
// the other frameworks take it).
func withTestFilter(command, filter string) string {
	quoted := "'" + strings.ReplaceAll(filter, "'", `'\''`) + "'"
	if strings.HasPrefix(command, "go test") {
		return strings.Replace(command, "go test", "go test -run "+quoted, 1)
	}
	return command + " " + quoted
}

// renderTestResult is a test run for the model: the counts, then each
// failure.
func renderTestResult(r *orchestratorv1.TestResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d passed, %d failed, %d skipped (%s)\n", r.GetFrameworkId(), r.GetPassed(), r.GetFailed(), r.GetSkipped(),
		r.GetDuration().AsDuration().Round(time.Millisecond))
	for i, f := range r.GetFailures() {
		if i == 20 {
			fmt.Fprintf(&b, "[%d more failures]\n", len(r.GetFailures())-i)
			break
		}
		loc := ""
		if f.GetFilePath() != "" {
			loc = fmt.Sprintf(" (%s:%d)", f.GetFilePath(), f.GetLine())
		}
		fmt.Fprintf(&b, "FAIL %s%s: %s\n", f.GetTestName(), loc, truncateString(strings.TrimSpace(f.GetMessage()), 2000))
	}
	return b.String()
}

// listFiles lists the checkout's files as git sees them (tracked and new,
// ignored ones left out).
func (t *taskRun) listFiles(ctx context.Context) ([]string, error) {
	out, err := t.wsp.run(ctx, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(out, "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		// A tracked file the task removed is gone.
		if fi, err := os.Lstat(filepath.Join(t.dir, filepath.FromSlash(f))); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}

// agentLister is listFiles for codetools: nil for a task without a
// checkout, whose directory codetools walks itself.
func (t *taskRun) agentLister() codetools.Lister {
	if t.wsp == nil {
		return nil
	}
	return t.listFiles
}

// checkpoint takes and restores the checkout's files for the failure
// protocol (spec E-14): the tree of every file not ignored, as git writes
// it.
type checkpoint struct {
	t    *taskRun
	tree string
}

func (c *checkpoint) Checkpoint(ctx context.Context) error {
	if _, err := c.t.wsp.run(ctx, "add", "-A"); err != nil {
		return err
	}
	tree, err := c.t.wsp.run(ctx, "write-tree")
	if err != nil {
		return err
	}
	c.tree = strings.TrimSpace(tree)
	return nil
}

func (c *checkpoint) Revert(ctx context.Context) error {
	if c.tree == "" {
		return errors.New("no checkpoint was taken")
	}
	if _, err := c.t.wsp.run(ctx, "add", "-A"); err != nil {
		return err
	}
	if _, err := c.t.wsp.run(ctx, "read-tree", "-u", "--reset", c.tree); err != nil {
		return err
	}
	_, err := c.t.wsp.run(ctx, "clean", "-f", "-d", "-q")
	return err
}

// agentWorkspace is the checkpoint of a task with a checkout; one without
// has none (its files cannot be reverted).
func (t *taskRun) agentWorkspace() agent.Workspace {
	if t.wsp == nil {
		return nil
	}
	return &checkpoint{t: t}
}

// helpDesk asks the task's user for help (spec A-33 TASK_HELP, E-14) and
// waits for the answer, given as guidance (/task <node> prompt "...").
type helpDesk struct {
	t   *taskRun
	ev  *agentEvents
	ctl *taskControl
	// mu guards seen, the guidance lines the agent has read.
	mu   sync.Mutex
	seen int
}

// unseen is the guidance the agent has not read yet, marked read.
func (h *helpDesk) unseen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, _ := h.ctl.guidanceAfter(h.seen)
	h.seen += len(g)
	return g
}

// interject is what the user said since the agent's last turn.
func (h *helpDesk) interject() string {
	g := h.unseen()
	if len(g) == 0 {
		return ""
	}
	return "The user's guidance, given while you work (follow it):\n- " + strings.Join(g, "\n- ")
}

// AskHelp sends question to the session and waits for the user's guidance,
// at most -worker.help-timeout.
func (h *helpDesk) AskHelp(ctx context.Context, question string) (string, error) {
	d := h.t.d
	if d.GetSessionId() == "" || h.t.s.bus == nil {
		return "", errors.New("the run has no session: no one can be asked")
	}
	h.mu.Lock()
	_, more := h.ctl.guidanceAfter(h.seen)
	h.mu.Unlock()
	text := fmt.Sprintf("The %s of node %s (runs/%s) asks: %s\nAnswer with /task %s prompt \"...\"",
		h.ev.role, d.GetNodeId(), d.GetRunId(), secrets.Scrub(question), d.GetNodeId())
	env := &messagev1.Envelope{Id: ids.New(), CorrelationId: "runs/" + d.GetRunId(), TenantId: d.GetTenantId(),
		SessionId: d.GetSessionId(), UserId: d.GetUserId(), Source: h.ev.role, Target: topology.AgentGuide,
		Type: messagev1.MessageType_MESSAGE_TYPE_TASK_HELP, CreatedAt: timestamppb.Now(), Attempt: 1,
		Priority: messagev1.Priority_PRIORITY_USER,
		Payload:  &messagev1.Envelope_TaskHelp{TaskHelp: &messagev1.TaskHelp{Text: text, RunId: d.GetRunId(), NodeId: d.GetNodeId()}}}
	if _, err := h.t.s.bus.Publish(ctx, topology.InboxSubject(h.t.s.bus, topology.AgentGuide), env.GetId(), env); err != nil {
		return "", fmt.Errorf("the question could not be sent: %v", err)
	}
	wait := time.NewTimer(h.t.s.cfg.HelpTimeout)
	defer wait.Stop()
	select {
	case <-more:
		return strings.Join(h.unseen(), "\n"), nil
	case <-wait.C:
		return "", fmt.Errorf("no answer within %s", h.t.s.cfg.HelpTimeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// requestHelpTool lets the agent ask the user.
func requestHelpTool(h *helpDesk) agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "request_help",
		Description: "Ask the user a question only a person can answer (a decision, a missing requirement, access you lack), and wait for the answer. Ask the knowledge agents and read the code first.",
		Schema: map[string]any{"type": "object", "required": []string{"question"}, "additionalProperties": false,
			"properties": map[string]any{"question": map[string]any{"type": "string", "description": "The question, with what the user needs to answer it."}}}},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Question string `json:"question"`
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return "", err
			}
			if strings.TrimSpace(a.Question) == "" {
				return "", errors.New("question is empty")
			}
			answer, err := h.AskHelp(ctx, a.Question)
			if err != nil {
				return "", err
			}
			return "The user answered: " + answer, nil
		}}
}

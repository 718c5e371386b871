package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
)

// User actions on a running task (spec F-13): the Orchestrator sends a
// TaskControl request on core NATS; the worker running the task applies it
// and answers with the task's live status. Workers not running the task stay
// silent, so the one that runs it answers.

// Stages of a task, as reported by query.
const (
	stageEngineer  = "engineer"
	stageInspector = "inspector"
	stageTester    = "tester"
	stageCommand   = "command"
)

// taskControl is the live, user-controllable state of one running task.
type taskControl struct {
	mu              sync.Mutex
	status          *orchestratorv1.PipelineStatus
	ignoreInspector bool
	ignoreTester    bool
	interrupted     bool
	reason          string
	// guidance is the user's guidance given while the task runs (/task
	// prompt), for the Engineer's next turn; guided is closed (and made
	// anew) each time some arrives.
	guidance []string
	guided   chan struct{}
	// engineerReads says whether a language-model Engineer will read it.
	engineerReads bool
	// handoff is set when the user asked the pipeline to hand its state to
	// a fresh pipeline (spec F-23) at the Engineer's next turn.
	handoff     bool
	pipeline    bool
	stageCancel context.CancelCauseFunc
}

func newTaskControl(pipeline bool) *taskControl {
	st := &orchestratorv1.PipelineStatus{State: pipeRunning}
	if !pipeline {
		st.Stage = stageCommand
	}
	return &taskControl{status: st, pipeline: pipeline}
}

type controlKey struct{}

// withControl attaches a task's control to its context.
func withControl(ctx context.Context, c *taskControl) context.Context {
	return context.WithValue(ctx, controlKey{}, c)
}

// controlOf is the task's control, or a fresh one (tasks run directly in
// tests).
func controlOf(ctx context.Context, pipeline bool) *taskControl {
	if c, ok := ctx.Value(controlKey{}).(*taskControl); ok {
		return c
	}
	return newTaskControl(pipeline)
}

// stage starts a stage: its context is cancelled by interrupt (and, for the
// Inspector and the Tester, by the matching ignore action).
func (c *taskControl) stage(ctx context.Context, name string) (context.Context, func()) {
	sctx, cancel := context.WithCancelCause(ctx)
	c.mu.Lock()
	c.status.Stage = name
	c.stageCancel = cancel
	if c.interrupted {
		cancel(errInterrupted)
	}
	c.mu.Unlock()
	return sctx, func() {
		c.mu.Lock()
		c.stageCancel = nil
		c.mu.Unlock()
		cancel(nil)
	}
}

// ignored reports whether the user asked to skip the Inspector or Tester.
func (c *taskControl) ignored(stage string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stage == stageInspector {
		return c.ignoreInspector
	}
	return c.ignoreTester
}

// userGuidance is the guidance given while the task runs, oldest first.
func (c *taskControl) userGuidance() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.guidance...)
}

// readsGuidance records that a language model reads the task's guidance.
func (c *taskControl) readsGuidance() {
	c.mu.Lock()
	c.engineerReads = true
	c.mu.Unlock()
}

// guidanceAfter is the guidance given after the first seen lines, and a
// channel closed when more arrives.
func (c *taskControl) guidanceAfter(seen int) ([]string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.guided == nil {
		c.guided = make(chan struct{})
	}
	if seen >= len(c.guidance) {
		return nil, c.guided
	}
	return append([]string(nil), c.guidance[seen:]...), c.guided
}

// markPipeline records that the task runs a pipeline.
func (c *taskControl) markPipeline() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pipeline = true
}

// handoffAsked says whether the user asked for a handoff.
func (c *taskControl) handoffAsked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handoff
}

func (c *taskControl) isInterrupted() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interrupted, c.reason
}

// publish records the pipeline's status for query.
func (c *taskControl) publish(p *orchestratorv1.PipelineStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stage, overrides := c.status.GetStage(), c.status.GetOverrides()
	c.status = proto.Clone(p).(*orchestratorv1.PipelineStatus)
	c.status.Stage, c.status.Overrides = stage, overrides
}

func (c *taskControl) snapshot() *orchestratorv1.PipelineStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return proto.Clone(c.status).(*orchestratorv1.PipelineStatus)
}

// overrides are the user's actions applied to the task so far.
func (c *taskControl) overrides() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.status.GetOverrides()...)
}

// noteOverride records an override the task was dispatched with (kept in
// the node's spec: given before this attempt, or in the submitted DAG).
func (c *taskControl) noteOverride(o string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.status.Overrides, o) {
		c.status.Overrides = append(c.status.Overrides, o)
	}
}

// apply carries out an action and says what it did.
func (c *taskControl) apply(action orchestratorv1.TaskActionType, message string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stage := c.status.GetStage()
	note := func(o string) {
		for _, x := range c.status.Overrides {
			if x == o {
				return
			}
		}
		c.status.Overrides = append(c.status.Overrides, o)
	}
	switch action {
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY:
		return fmt.Sprintf("stage %s, loop %d of %d", orDash(stage), c.status.GetLoops(), c.status.GetMaxLoops()), nil
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT:
		c.guidance = append(c.guidance, message)
		if c.guided != nil {
			close(c.guided)
		}
		c.guided = make(chan struct{})
		note("prompt")
		if !c.engineerReads {
			return "the guidance is recorded, but no language model is configured for this node's Engineer: nothing reads it, and the node's command runs as given", nil
		}
		if stage == stageEngineer {
			return "the Engineer reads the guidance from its next turn", nil
		}
		return "the Engineer reads the guidance when the pipeline loops back to it", nil
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF:
		if !c.pipeline {
			return "", errNotAPipeline
		}
		c.handoff = true
		note("handoff")
		return "the pipeline hands its state to a fresh pipeline at the Engineer's next turn; should it complete first, there is nothing to hand off", nil
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_INTERRUPT:
		c.interrupted = true
		c.reason = message
		note("interrupt")
		if c.stageCancel != nil {
			c.stageCancel(errInterrupted)
		}
		return "interrupting the " + orDash(stage) + " stage; its partial output is kept", nil
	case orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_INSPECTOR, orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_TESTER:
		target, name := stageInspector, "ignore_inspector"
		if action == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_TESTER {
			target, name = stageTester, "ignore_tester"
			c.ignoreTester = true
		} else {
			c.ignoreInspector = true
		}
		note(name)
		if stage == target && c.stageCancel != nil {
			c.stageCancel(errStageIgnored)
			return "the running " + target + " stage is stopped and counts as passed", nil
		}
		return "the " + target + " stage will be skipped", nil
	}
	return "", errActionNotApplicable.Withf("action %s does not apply to a running task", action)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// onControl answers a TaskControl request for a task running here.
func (s *Service) onControl(m *nats.Msg) {
	var req orchestratorv1.TaskControl
	if err := proto.Unmarshal(m.Data, &req); err != nil {
		return
	}
	v, ok := s.controls.Load(runningKey(req.GetTenantId(), req.GetRunId(), req.GetNodeId(), req.GetAttempt()))
	if !ok {
		return
	}
	c := v.(*taskControl)
	detail, err := c.apply(req.GetAction(), req.GetMessage())
	if err != nil {
		detail = err.Error()
	}
	reply := &orchestratorv1.TaskControlReply{Pipeline: c.snapshot(), Detail: detail, WorkerId: s.cfg.ID}
	b, err := proto.Marshal(reply)
	if err != nil {
		return
	}
	if err := m.Respond(b); err != nil {
		s.log.Warn("answer task control", logx.Err(err))
		return
	}
	s.log.Info("task control applied", logx.KeyTenantID, req.GetTenantId(), logx.KeyRunID, req.GetRunId(),
		logx.KeyNodeID, req.GetNodeId(), slog.String("action", req.GetAction().String()))
}

package worker

import (
	"errors"

	"sylk.dev/sylk/pkg/apierr"
)

// The worker's named errors. The worker serves no RPC: the ones a person
// reads (through the Orchestrator's answer to a task action) carry a
// reason as any API error does; the others are causes the worker tells
// apart itself.

// Reasons of the task-control answers.
const (
	// ReasonNotAPipeline: a handoff was asked of a task that runs no
	// pipeline.
	ReasonNotAPipeline = "NOT_A_PIPELINE"
	// ReasonActionNotApplicable: the action does not apply to a running
	// task.
	ReasonActionNotApplicable = "ACTION_NOT_APPLICABLE"
)

var (
	errNotAPipeline        = apierr.FailedPrecondition(ReasonNotAPipeline, "handoff applies to a pipeline node only")
	errActionNotApplicable = apierr.FailedPrecondition(ReasonActionNotApplicable, "the action does not apply to a running task")
)

// Causes a task or a stage of it is stopped with.
var (
	// errCancelledByOrchestrator: a cancel signal named the task.
	errCancelledByOrchestrator = errors.New("cancelled by the orchestrator")
	// errInterrupted: the user interrupted the running stage.
	errInterrupted = errors.New("interrupted by the user")
	// errStageIgnored: the user skipped the running Inspector or Tester.
	errStageIgnored = errors.New("stage ignored by the user")
)

var (
	// errNoEdits is a model answer without usable edits.
	errNoEdits = errors.New("the model's answer holds no edits")
	// errDirReplaced is a task directory (a checkout) that a task's command
	// replaced with a symlink: whatever it leads to is not the task's.
	errDirReplaced = errors.New("the task replaced its working directory with a link")
)

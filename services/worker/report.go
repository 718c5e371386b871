package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// newResult is the result of dispatch d before the task ran: it names the
// dispatch and echoes its fence, which the Orchestrator checks.
func (s *Service) newResult(d *taskv1.TaskDispatch) *taskv1.TaskResult {
	return &taskv1.TaskResult{
		TenantId: d.GetTenantId(),
		RunId:    d.GetRunId(),
		NodeId:   d.GetNodeId(),
		Attempt:  d.GetAttempt(),
		Fence:    d.GetFence(),
		WorkerId: s.cfg.ID,
		Duration: durationpb.New(0),
	}
}

// resultID is the message id of r: a result published twice is dropped by
// the stream.
func resultID(r *taskv1.TaskResult, kind string) string {
	return fmt.Sprintf("%s:%s:%d:%s", r.GetRunId(), r.GetNodeId(), r.GetAttempt(), kind)
}

// reportCancelled sends the Orchestrator what a cancelled task's command
// printed before it was stopped, when it printed anything: the node stays
// cancelled, its output marked partial (spec C-32). One attempt: the
// output is a courtesy, and the cancel is already recorded.
func (s *Service) reportCancelled(ctx context.Context, log *slog.Logger, o taskOutcome, received *timestamppb.Timestamp) {
	r := o.msg
	if r == nil || r.GetStdout() == "" && r.GetStderr() == "" {
		return
	}
	r.ReceivedTime, r.Cancelled = received, true
	s.fitPayload(o)
	r.ReportedTime = timestamppb.Now()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if _, err := s.bus.Publish(pctx, topology.ResultSubject(s.bus), resultID(r, "cancelled"), r); err != nil {
		log.WarnContext(ctx, "report a cancelled task's partial output", logx.Err(err))
	}
}

// publishResult reports a result, retrying with backoff. A finished task is
// reported even when shutdown has begun (ctx done), but then with a single
// attempt, so that shutdown is not held up.
func (s *Service) publishResult(ctx context.Context, r *taskv1.TaskResult) error {
	msgID := resultID(r, "result")
	within, each := cmp.Or(s.reportBounds.within, reportFor), cmp.Or(s.reportBounds.each, publishTimeout)
	maxBackoff := cmp.Or(s.reportBounds.backoff, maxReportBackoff)
	deadline := time.Now().Add(within)
	backoff := min(250*time.Millisecond, maxBackoff)
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), each)
		_, err := s.bus.Publish(pctx, topology.ResultSubject(s.bus), msgID, r)
		cancel()
		// The task's heartbeat goes on meanwhile, so it is not handed to
		// another worker while its result waits for the bus.
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if s.reportBounds.retried != nil {
			s.reportBounds.retried(attempt)
		}
		wait(ctx, backoff)
		backoff = min(2*backoff, maxBackoff)
	}
}

// fitPayload shrinks the outputs when the result would not fit in one NATS
// message, splitting the room left between stdout and stderr. A command's
// outputs are rendered again from what it printed; a pipeline's (its log
// and an interrupted stage's output) are cut in the middle. Rendering can
// make an output longer than its share (each byte that is not UTF-8 may
// become a three-byte U+FFFD), so the share is halved until the result
// fits: a result that does not fit is never published, and its task would
// run again and again.
func (s *Service) fitPayload(o taskOutcome) {
	r := o.msg
	room := int(s.bus.Conn.MaxPayload()) - payloadSlack
	if proto.Size(r) <= room {
		return
	}
	stdout, stderr := r.Stdout, r.Stderr
	outCut, errCut := r.StdoutTruncated, r.StderrTruncated
	r.Stdout, r.Stderr = "", ""
	per := max((room-proto.Size(r))/2-128, 0)
	for {
		if o.tool != nil {
			r.Stdout, r.StdoutTruncated = o.tool.RenderStdout(per)
			r.Stderr, r.StderrTruncated = o.tool.RenderStderr(per)
		} else {
			var cut bool
			r.Stdout, cut = toolexec.ClipMiddle(stdout, per, "")
			r.StdoutTruncated = outCut || cut
			r.Stderr, cut = toolexec.ClipMiddle(stderr, per, "")
			r.StderrTruncated = errCut || cut
		}
		if per == 0 || proto.Size(r) <= room {
			return
		}
		per /= 2
	}
}

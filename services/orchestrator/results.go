package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/topology"
)

// result is one decoded worker report: the message, the report, and the
// node's row as the report sets it.
type result struct {
	msg    jetstream.Msg
	r      *taskv1.TaskResult
	stored nodeResult
}

// timeOf is t as a time, or nil when it is not set or not a valid time
// (outside years 1 to 9999), which the database could not store.
func timeOf(t *timestamppb.Timestamp) *time.Time {
	if !t.IsValid() {
		return nil
	}
	v := t.AsTime()
	return &v
}

// decodeResult reads a worker report; a message that is not one, or whose
// fence does not name its own attempt, is a permanent error.
func (s *Service) decodeResult(msg jetstream.Msg) (*result, error) {
	var r taskv1.TaskResult
	if err := natsx.Unmarshal(msg, &r); err != nil {
		return nil, err
	}
	if r.GetTenantId() == "" || !ids.Valid(r.GetRunId()) || r.GetNodeId() == "" {
		return nil, natsx.Permanent(fmt.Errorf("not a task result for a run: %s", msg.Subject()))
	}
	if f := r.GetFence(); f != nil && f.GetAttemptId() != fmt.Sprintf("%s:%s:%d", r.GetRunId(), r.GetNodeId(), r.GetAttempt()) {
		return nil, natsx.Permanent(fmt.Errorf("result of %s/%s attempt %d fenced for another attempt (%s)",
			r.GetRunId(), r.GetNodeId(), r.GetAttempt(), f.GetAttemptId()))
	}
	// What the task printed, reported and handed off is stored, and shown,
	// without secrets; the patch is the change itself, delivered as written.
	secrets.ScrubMessage(&r, "sylk.task.v1.TaskResult.patch", "sylk.task.v1.TaskResult.tenant_id", "sylk.task.v1.TaskResult.run_id",
		"sylk.task.v1.TaskResult.node_id", "sylk.task.v1.TaskResult.worker_id")
	res := nodeResult{
		State:           stateSucceeded,
		ExitCode:        r.GetExitCode(),
		Stdout:          storable(r.GetStdout(), 2*s.cfg.OutputLimitBytes),
		Stderr:          storable(r.GetStderr(), 2*s.cfg.OutputLimitBytes),
		StdoutTruncated: r.GetStdoutTruncated(),
		StderrTruncated: r.GetStderrTruncated(),
		TimedOut:        r.GetTimedOut(),
		Duration:        r.GetDuration().AsDuration(),
		Error:           storable(r.GetError(), maxStoredErrorBytes),
		WorkerID:        storable(r.GetWorkerId(), 256),
		Patch:           storedPatch(r.GetPatch()),
		Report:          reportJSON(r.GetReport(), maxStoredReportBytes),
		Pipeline:        storable(storedJSON(r.GetPipeline()), maxStoredErrorBytes*16),
		ReceivedAt:      timeOf(r.GetReceivedTime()),
		ReportedAt:      timeOf(r.GetReportedTime()),
	}
	if res.TimedOut && res.Error == "" {
		res.Error = "timed out"
	}
	if res.ExitCode != 0 || res.Error != "" {
		res.State = stateFailed
	} else if h := r.GetHandoff(); h != nil {
		res.State, res.Handoff = stateHandedOff, storable(storedJSON(h), maxStoredHandoffBytes)
		if s.handoffOverLimit(h) {
			res.State, res.ExitCode = stateFailed, 1
			res.Error = fmt.Sprintf("the pipeline asked for handoff %d, beyond the limit of %d (-orchestrator.max-handoffs)",
				s.cfg.MaxHandoffs+1, s.cfg.MaxHandoffs)
		}
	} else if why := strings.TrimSpace(r.GetNoChangesReason()); why != "" && res.Patch == "" {
		// Asked to change the code, the task changed nothing: the node
		// ends NO_CHANGES, its error saying why. A patch outweighs the
		// reason: a task that changed files succeeded.
		res.State, res.Error = stateNoChanges, storable(why, maxStoredErrorBytes)
	}
	return &result{msg: msg, r: &r, stored: res}, nil
}

// storedJSON is m as its text column holds it ("" for none).
func storedJSON(m proto.Message) string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return ""
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

// maxStoredReportBytes bounds a node's stored report, its agent's activity
// (up to 200 tool calls) included.
const maxStoredReportBytes = 64 << 10

// reportJSON is a task's report as stored: within limit bytes, and always
// whole JSON (a cut one would not decode). What has to go goes in this
// order: the oldest tool calls of its activity, then the middle of each
// text.
func reportJSON(rep *orchestratorv1.TaskReport, limit int) string {
	out := storedJSON(rep)
	if len(out) <= limit {
		return out
	}
	rep = proto.Clone(rep).(*orchestratorv1.TaskReport)
	if act := rep.GetActivity(); act != nil {
		for calls := act.GetToolCalls(); len(calls) > 0 && len(out) > limit; calls = act.GetToolCalls() {
			act.ToolCalls = calls[(len(calls)+1)/2:]
			out = storedJSON(rep)
		}
	}
	if len(out) <= limit {
		return out
	}
	each := limit / 8
	for _, f := range []*string{&rep.Implemented, &rep.Tested, &rep.Decisions, &rep.Deviations, &rep.Concerns, &rep.Briefing} {
		*f = truncateMiddle(*f, each)
	}
	if act := rep.GetActivity(); act != nil {
		act.StopDetail = truncateMiddle(act.GetStopDetail(), each)
	}
	if len(rep.FilesChanged) > maxReportFiles {
		rep.FilesChanged = rep.FilesChanged[:maxReportFiles]
	}
	if out = storedJSON(rep); len(out) <= limit {
		return out
	}
	return ""
}

// maxReportFiles is how many changed files a report too large to store
// keeps.
const maxReportFiles = 100

// consumeResults applies worker reports in batches: whatever arrived while
// the previous batch was applied (up to resultBatch) is grouped by run, and
// each run's group costs one transaction and one scheduling pass.
//
// The consumer's ack wait is short (ResultAckWait), so that results a dead
// replica took are soon handed to another; the results this replica holds
// are kept with in-progress acknowledgements until they are applied. On a
// stop, the batch being applied is finished (within StopTimeout) and the
// results not yet applied are handed back at once.
func (s *Service) consumeResults(ctx context.Context) error {
	cons, err := s.bus.EnsureConsumer(ctx, topology.ResultConsumer(s.bus, natsx.ConsumerSpec{
		// A result must not be lost to a database outage: retry until it
		// is applied (undecodable messages are terminated instead).
		MaxDeliver: unlimitedDeliveries,
		AckWait:    s.cfg.ResultAckWait,
	}))
	if err != nil {
		return err
	}
	held := newHeldResults()
	in := make(chan jetstream.Msg, resultBatch)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		held.add(m)
		select {
		case in <- m:
		case <-ctx.Done():
			held.remove(m)
			_ = m.Nak()
		}
	}, jetstream.PullMaxMessages(resultBatch))
	if err != nil {
		return fmt.Errorf("consume results: %w", err)
	}
	stopKeeping := held.keep(s.cfg.ResultAckWait / 3)
	defer func() {
		cc.Stop()
		stopKeeping()
		held.handBack(in)
	}()
	// Runs were recovered before: the Orchestrator has started.
	s.MarkStarted()
	defer s.waitCarriedOut()
	// A batch taken is applied to its end, also when a stop comes
	// meanwhile (within StopTimeout): its reports are then acknowledged
	// rather than redelivered.
	actx, cancel := graceContext(ctx, s.cfg.StopTimeout)
	defer cancel()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case m := <-in:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < resultBatch {
			select {
			case m := <-in:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		s.applyBatch(actx, batch)
		held.remove(batch...)
	}
}

// graceContext is a context that outlives ctx by grace: it ends grace after
// ctx does (or when cancel is called).
func graceContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(gctx, func() { t.Stop() })
	})
	return gctx, func() {
		stop()
		cancel()
	}
}

// heldResults are the results this replica took from the consumer and has
// not yet answered (acknowledged, or handed back).
type heldResults struct {
	mu   sync.Mutex
	msgs map[jetstream.Msg]struct{}
}

func newHeldResults() *heldResults {
	return &heldResults{msgs: map[jetstream.Msg]struct{}{}}
}

func (h *heldResults) add(m jetstream.Msg) {
	h.mu.Lock()
	h.msgs[m] = struct{}{}
	h.mu.Unlock()
}

func (h *heldResults) remove(ms ...jetstream.Msg) {
	h.mu.Lock()
	for _, m := range ms {
		delete(h.msgs, m)
	}
	h.mu.Unlock()
}

// keep tells the server every interval that the held results are still
// being worked on, so that the short ack wait does not hand them to another
// replica while they wait in this one's queue or are applied; the function
// it returns stops it.
func (h *heldResults) keep(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			h.mu.Lock()
			ms := make([]jetstream.Msg, 0, len(h.msgs))
			for m := range h.msgs {
				ms = append(ms, m)
			}
			h.mu.Unlock()
			for _, m := range ms {
				_ = m.InProgress() // an answered message refuses it
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// handBack returns the results still queued in in, and any other held, for
// redelivery at once: a replica that stops does not make another wait out
// the ack wait for them.
func (h *heldResults) handBack(in chan jetstream.Msg) {
	for {
		select {
		case m := <-in:
			h.add(m)
			continue
		default:
		}
		break
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for m := range h.msgs {
		_ = m.Nak()
		delete(h.msgs, m)
	}
}

// resultBatch bounds the reports applied together.
const resultBatch = 128

func (s *Service) applyBatch(ctx context.Context, batch []jetstream.Msg) {
	s.metrics.resultBatch.Observe(float64(len(batch)))
	type key struct{ tenant, run string }
	groups := map[key][]*result{}
	var order []key
	for _, res := range s.currentResults(ctx, batch) {
		if s.handleSessionCheckResult(ctx, res) { // sessioncheck.go (spec F-06)
			continue
		}
		if s.handleReviewResult(ctx, res) { // reviewstore.go (the review API)
			continue
		}
		if s.handleCancelledResult(ctx, res) {
			continue
		}
		k := key{res.r.GetTenantId(), res.r.GetRunId()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], res)
	}
	for _, k := range order {
		rs := groups[k]
		err := s.applyResults(ctx, k.tenant, k.run, rs)
		for _, r := range rs {
			if err != nil {
				_ = r.msg.NakWithDelay(resultRedeliveryDelay)
				continue
			}
			_ = r.msg.Ack()
		}
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "results will be redelivered", logx.KeyTenantID, k.tenant, logx.KeyRunID, k.run, logx.Err(err))
		}
	}
}

// currentResults decodes a batch and leaves out the results of superseded
// claims (claims.go), acknowledged: only results under their attempt's
// current claim go on. Undecodable messages are terminated; when the
// claims cannot be read, the whole batch is redelivered later.
func (s *Service) currentResults(ctx context.Context, batch []jetstream.Msg) []*result {
	decoded := make([]*result, 0, len(batch))
	for _, m := range batch {
		res, err := s.decodeResult(m)
		if err != nil {
			s.log.ErrorContext(ctx, "result dropped", slog.String("subject", m.Subject()), logx.Err(err))
			_ = m.Term()
			continue
		}
		decoded = append(decoded, res)
	}
	if len(decoded) == 0 {
		return nil
	}
	stale, err := s.staleResults(ctx, decoded)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "results will be redelivered", logx.Err(err))
		}
		for _, res := range decoded {
			_ = res.msg.NakWithDelay(resultRedeliveryDelay)
		}
		return nil
	}
	current := decoded[:0]
	for i, res := range decoded {
		if stale[i] {
			_ = res.msg.Ack()
			continue
		}
		current = append(current, res)
	}
	return current
}

// handleCancelledResult keeps what a cancelled node's command printed
// before it was stopped (spec C-32): the node stays CANCELLED, its output
// marked partial. It reports whether res was such a result. Only the
// attempt that was cancelled takes it, and only once.
func (s *Service) handleCancelledResult(ctx context.Context, res *result) bool {
	if !res.r.GetCancelled() {
		return false
	}
	o := res.stored
	_, err := s.db.Exec(ctx, `UPDATE nodes SET stdout = $5, stderr = $6, stdout_truncated = $7, stderr_truncated = $8,
			exit_code = $9, duration_us = $10, worker_id = $11, output_partial = true
		WHERE tenant_id = $1 AND run_id = $2 AND node_id = $3 AND attempt = $4 AND state = 'CANCELLED' AND NOT output_partial`,
		res.r.GetTenantId(), res.r.GetRunId(), res.r.GetNodeId(), res.r.GetAttempt(), o.Stdout, o.Stderr,
		o.StdoutTruncated, o.StderrTruncated, o.ExitCode, o.Duration.Microseconds(), o.WorkerID)
	if err != nil {
		s.log.WarnContext(ctx, "a cancelled node's partial output will be redelivered", logx.KeyTenantID, res.r.GetTenantId(),
			logx.KeyRunID, res.r.GetRunId(), logx.Err(err))
		_ = res.msg.NakWithDelay(resultRedeliveryDelay)
		return true
	}
	_ = res.msg.Ack()
	return true
}

// maxStoredPatchBytes bounds a node's stored patch (the worker caps it
// lower).
const maxStoredPatchBytes = 512 << 10

// storedPatch is a reported patch as stored: "" when it changes nothing
// (empty or only white space), else bounded.
func storedPatch(p string) string {
	if strings.TrimSpace(p) == "" {
		return ""
	}
	return storable(p, maxStoredPatchBytes)
}

// storable makes worker text safe for a text column and bounded in size.
func storable(s string, limit int) string {
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "\uFFFD")
	}
	return s
}

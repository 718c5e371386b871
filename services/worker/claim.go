package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// A worker runs nothing of a dispatch before it has claimed it from the
// Orchestrator (which decides in its database), and heartbeats the claim
// while the task runs. A copy of a dispatch whose attempt another worker
// runs, or that was already run to its end, is dropped; a task whose claim
// another worker took over (this one was silent past the claim timeout),
// or whose node no longer awaits it, is stopped and reports nothing.

// Claim timings.
const (
	// claimRequestTimeout bounds one claim or heartbeat request.
	claimRequestTimeout = 2 * time.Second
	// claimRetry is the pause between claims the Orchestrator did not
	// answer, or that found the attempt held elsewhere.
	claimRetry = time.Second
	// defaultClaimTimeout is the claim timeout assumed until an answer
	// gives the Orchestrator's.
	defaultClaimTimeout = 10 * time.Second
)

// errFenced: the task's claim was taken over, or its node no longer
// awaits the attempt.
var errFenced = errors.New("the attempt's claim was taken over or superseded")

// taskClaim is a claim this worker holds on a dispatch.
type taskClaim struct {
	s       *Service
	d       *taskv1.TaskDispatch
	token   string
	timeout time.Duration
	fenced  atomic.Bool
	reason  atomic.Value
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// claimDispatch claims d before it runs. While the Orchestrator does not
// answer, or another worker's claim may still prove dead, it keeps the
// message (in progress) and asks again; a dispatch that must not run is
// acknowledged and dropped. ok is false when the message was dealt with
// and nothing is to run (shutdown hands it back).
func (s *Service) claimDispatch(ctx context.Context, log *slog.Logger, msg jetstream.Msg, d *taskv1.TaskDispatch) (*taskClaim, bool) {
	req := &taskv1.TaskClaimRequest{TenantId: d.GetTenantId(), RunId: d.GetRunId(), NodeId: d.GetNodeId(), Attempt: d.GetAttempt(),
		AttemptId: fenceID(d), WorkerId: s.cfg.ID}
	var heldSince time.Time
	warned := false
	for {
		resp, err := s.askClaim(ctx, req)
		switch {
		case err != nil:
			if !warned {
				log.WarnContext(ctx, "the orchestrator did not answer the task's claim; the task waits for it", logx.Err(err))
				warned = true
			}
		case resp.GetOutcome() == taskv1.TaskClaimResponse_OUTCOME_CLAIMED:
			c := &taskClaim{s: s, d: d, token: resp.GetClaimToken(), timeout: resp.GetTimeout().AsDuration()}
			if c.timeout <= 0 {
				c.timeout = defaultClaimTimeout
			}
			return c, true
		case resp.GetOutcome() == taskv1.TaskClaimResponse_OUTCOME_HELD_ELSEWHERE:
			// Another worker holds the attempt. Should it be dead, its
			// claim lapses within the timeout and this copy runs; a claim
			// alive past that is a live task, and this is a copy.
			timeout := resp.GetTimeout().AsDuration()
			if heldSince.IsZero() {
				heldSince = time.Now()
			} else if time.Since(heldSince) > timeout+claimRetry {
				log.InfoContext(ctx, "a copy of a dispatch another worker runs dropped", slog.String("holder", resp.GetHolderWorkerId()))
				_ = msg.Ack()
				return nil, false
			}
		default:
			log.InfoContext(ctx, "a dispatch whose attempt is finished or superseded dropped", slog.String("outcome", resp.GetOutcome().String()))
			_ = msg.Ack()
			return nil, false
		}
		_ = msg.InProgress()
		if err == nil || errors.Is(err, nats.ErrNoResponders) {
			// An unanswered request already waited its timeout.
			wait(ctx, claimRetry)
		}
		if ctx.Err() != nil {
			_ = msg.Nak()
			return nil, false
		}
	}
}

// askClaim sends one claim request.
func (s *Service) askClaim(ctx context.Context, req *taskv1.TaskClaimRequest) (*taskv1.TaskClaimResponse, error) {
	var resp taskv1.TaskClaimResponse
	if err := s.request(ctx, topology.TaskClaimSubject(s.bus), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// request sends a core NATS request and decodes its answer.
func (s *Service) request(ctx context.Context, subject string, req, resp proto.Message) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, claimRequestTimeout)
	defer cancel()
	m, err := s.bus.Conn.RequestWithContext(rctx, subject, b)
	if err != nil {
		return fmt.Errorf("ask the orchestrator: %w", err)
	}
	return proto.Unmarshal(m.Data, resp)
}

// fenceID is the attempt id a dispatch is claimed under.
func fenceID(d *taskv1.TaskDispatch) string {
	if id := d.GetFence().GetAttemptId(); id != "" {
		return id
	}
	return fmt.Sprintf("%s:%s:%d", d.GetRunId(), d.GetNodeId(), d.GetAttempt())
}

// heartbeat keeps the claim alive every third of its timeout until stop;
// told the claim is fenced, it stops the task (cancelling it with
// errFenced through Service.running).
func (c *taskClaim) heartbeat(ctx context.Context) {
	ctx, c.stop = context.WithCancel(ctx)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.timeout / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			resp, err := c.send(ctx, false, false)
			if err != nil || !resp.GetFenced() {
				continue
			}
			c.reason.Store(resp.GetReason())
			c.fenced.Store(true)
			d := c.d
			if stop, ok := c.s.running.Load(runningKey(d.GetTenantId(), d.GetRunId(), d.GetNodeId(), d.GetAttempt())); ok {
				stop.(context.CancelCauseFunc)(errFenced)
			}
			return
		}
	}()
}

// send sends one heartbeat; finished ends the claim, released hands the
// attempt back for another worker to claim at once.
func (c *taskClaim) send(ctx context.Context, finished, released bool) (*taskv1.TaskHeartbeatResponse, error) {
	d := c.d
	req := &taskv1.TaskHeartbeatRequest{TenantId: d.GetTenantId(), AttemptId: fenceID(d), ClaimToken: c.token, WorkerId: c.s.cfg.ID,
		Finished: finished, Released: released, RunId: d.GetRunId(), NodeId: d.GetNodeId(), Attempt: d.GetAttempt()}
	var resp taskv1.TaskHeartbeatResponse
	if err := c.s.request(ctx, topology.TaskHeartbeatSubject(c.s.bus), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// end stops the heartbeats and ends the claim: finished once the result is
// reported, else released. Best effort: an unanswered end leaves the claim
// to lapse (released) or to the node's state (finished).
func (c *taskClaim) end(ctx context.Context, finished bool) {
	if c.stop != nil {
		c.stop()
	}
	c.wg.Wait()
	if c.fenced.Load() {
		return
	}
	if _, err := c.send(context.WithoutCancel(ctx), finished, !finished); err != nil {
		c.s.log.DebugContext(ctx, "end a task claim", logx.Err(err))
	}
}

// wasFenced says whether the task lost its claim, and why.
func (c *taskClaim) wasFenced() (bool, string) {
	why, _ := c.reason.Load().(string)
	return c.fenced.Load(), why
}

package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// inflight counts the decisions being taken or carried out: every withRun
// from its transaction to the end of its effects, wherever it runs (Run's
// loops, RPC handlers, timers that advance a run), and the effects
// carryOutOrdered carries out in the background. A stop waits for it to
// drop to zero, so that a decision that committed is carried out before
// the replica releases its runs.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// enter counts one more decision in flight.
func (f *inflight) enter() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

// leave counts one decision done.
func (f *inflight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

// wait waits up to timeout for no decision to be in flight; it reports
// whether that happened.
func (f *inflight) wait(timeout time.Duration) bool {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return true
	}
	idle := f.idle
	f.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// stop ends a Run gracefully once its loops have returned: the effects of
// every committed decision are carried out (dispatches published, events
// sent), within StopTimeout, then the replica releases its run leases and
// tells the other replicas, which take the runs over at once instead of
// when the leases would have expired.
func (s *Service) stop() {
	start := time.Now()
	if !s.inflight.wait(s.cfg.StopTimeout) {
		s.log.Warn("stopping: committed effects still being carried out after the stop timeout; recovery re-sends their dispatches",
			slog.Duration("stop_timeout", s.cfg.StopTimeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), effectsTimeout)
	defer cancel()
	n, err := releaseLeases(ctx, s.db, s.cfg.ReplicaID)
	if err != nil {
		s.log.Warn("stopping: release run leases; other replicas take the runs over when they expire", logx.Err(err))
		return
	}
	if err := s.bus.PublishCore(ctx, topology.LeasesReleasedSubject(s.bus), &orchestratorv1.LeasesReleased{ReplicaId: s.cfg.ReplicaID, Runs: n}); err != nil {
		s.log.Warn("stopping: announce the released leases", logx.Err(err))
	} else if err := s.bus.Conn.FlushTimeout(time.Second); err != nil {
		s.log.Warn("stopping: flush the released leases' notice", logx.Err(err))
	}
	s.released.Store(true)
	s.log.Info("stopped: run leases released", slog.Int64("runs", n), slog.String("replica", s.cfg.ReplicaID),
		slog.Duration("took", time.Since(start)))
}

// newLeaseTTL is the lease a run this replica creates or reopens starts
// with: none once the replica stopped and released its leases (its RPCs are
// served a little longer, during the shutdown delay), so that any other
// replica takes such a run over on its next lease pass.
func (s *Service) newLeaseTTL() time.Duration {
	if s.released.Load() {
		return 0
	}
	return s.cfg.LeaseTTL
}

// subscribeReleases subscribes to the other replicas' notices that they
// released their leases; the channel it returns holds at most one pending
// notice (they are coalesced).
func (s *Service) subscribeReleases() (*nats.Subscription, <-chan struct{}, error) {
	kick := make(chan struct{}, 1)
	sub, err := s.bus.Conn.Subscribe(topology.LeasesReleasedSubject(s.bus), func(m *nats.Msg) {
		var n orchestratorv1.LeasesReleased
		if proto.Unmarshal(m.Data, &n) != nil || n.GetReplicaId() == s.cfg.ReplicaID {
			return
		}
		s.log.Info("a replica released its run leases; taking its runs over", slog.String("from", n.GetReplicaId()), slog.Int64("runs", n.GetRuns()))
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe to released leases: %w", err)
	}
	if err := s.bus.Conn.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, fmt.Errorf("subscribe to released leases: %w", err)
	}
	return sub, kick, nil
}

// takeOverReleased takes over the runs of a replica that released its
// leases as soon as it says so (kick), until ctx is done: the same pass the
// lease loop makes every LeaseTTL/3.
func (s *Service) takeOverReleased(ctx context.Context, kick <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		if err := s.recoverRuns(ctx, false); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "take over released runs", logx.Err(err))
		}
		s.sweepSessionChecks(ctx) // sessioncheck.go
		s.kickDelivery()          // delivery.go
	}
}

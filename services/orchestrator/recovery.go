package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"sylk.dev/sylk/pkg/logx"
)

// recoverRuns claims the runs whose lease expired (or that this replica
// held before a restart) and recovers each: the dispatches of its running
// nodes are re-published under their original message ids (a worker may
// never have received them; JetStream drops the copies it already has), and
// the run moves on. Results are applied only to the attempt a node awaits,
// so nothing completes twice.
func (s *Service) recoverRuns(ctx context.Context, atStart bool) error {
	for {
		keys, err := claimExpired(ctx, s.db, s.cfg.ReplicaID, s.cfg.LeaseTTL, resyncBatch, atStart)
		if err != nil {
			return fmt.Errorf("claim runs: %w", err)
		}
		if len(keys) > 0 {
			// Counted when claimed, before any run moves on.
			s.metrics.recovered.Add(float64(len(keys)))
			s.log.InfoContext(ctx, "took over unfinished runs", slog.Int("runs", len(keys)), slog.String("replica", s.cfg.ReplicaID))
		}
		for _, k := range keys {
			if err := s.recoverRun(ctx, k); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.ErrorContext(ctx, "recover run", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
			}
		}
		if len(keys) < resyncBatch {
			return nil
		}
	}
}

func (s *Service) recoverRun(ctx context.Context, k runKey) error {
	_, err := s.withRun(ctx, k.Tenant, k.ID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
		if run.State == stateRunning || run.State == statePaused {
			nodes, err := listSchedNodes(ctx, tx, run.TenantID, run.ID)
			if err != nil {
				return err
			}
			var out []*schedNode
			attempts := map[string]int32{}
			for i := range nodes {
				if nodes[i].State == stateDispatched {
					out = append(out, &nodes[i])
					attempts[nodes[i].ID] = nodes[i].Attempt
				}
			}
			if len(out) > 0 {
				if err := s.queueTasks(ctx, tx, run, out, attempts, true, eff); err != nil {
					return err
				}
			}
		}
		return s.advance(ctx, tx, run, eff)
	})
	return err
}

// leases renews this replica's run leases and takes over the runs of
// replicas that stopped renewing theirs, every LeaseTTL/3.
func (s *Service) leases(ctx context.Context) {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := renewLeases(ctx, s.db, s.cfg.ReplicaID, s.cfg.LeaseTTL); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "renew run leases", logx.Err(err))
		}
		if err := s.recoverRuns(ctx, false); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "take over expired runs", logx.Err(err))
		}
		s.sweepSessionChecks(ctx) // sessioncheck.go
		s.renewSlots(ctx)
	}
}

// wakeAt advances a run when a node's retry delay is over. Should this
// replica stop first, the resync loop of any replica picks the run up.
func (s *Service) wakeAt(tenant, runID string, at time.Time) {
	d := max(time.Until(at), 0) + 5*time.Millisecond
	time.AfterFunc(d, func() {
		ctx := s.runCtx()
		if ctx.Err() != nil {
			return
		}
		if _, err := s.withRun(ctx, tenant, runID, false, func(tx pgx.Tx, run *runRow, eff *effects) error {
			return s.advance(ctx, tx, run, eff)
		}); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "advance run after a retry delay", logx.KeyRunID, runID, logx.Err(err))
		}
	})
}

// resync moves on every unfinished run no other transaction is handling.
func (s *Service) resync(ctx context.Context) {
	keys, err := activeRuns(ctx, s.db, resyncBatch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "resync: list unfinished runs", logx.Err(err))
		}
		return
	}
	for _, k := range keys {
		_, err := s.withRun(ctx, k.Tenant, k.ID, true, func(tx pgx.Tx, run *runRow, eff *effects) error {
			return s.advance(ctx, tx, run, eff)
		})
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "resync run", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
		}
	}
}

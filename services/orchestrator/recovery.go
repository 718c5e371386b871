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
// nodes that no worker holds a live claim on are re-published under their
// original message ids (a worker may never have received them), and the
// run moves on. A task a worker runs is left to it: a restart never starts
// a second copy. A re-published copy of a dispatch a worker did get runs
// only if that worker goes silent (claims.go), and results are applied
// only to the attempt a node awaits, so nothing runs or completes twice.
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
			out, attempts, err := s.unclaimedDispatches(ctx, tx, run, nodes)
			if err != nil {
				return err
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
		s.sweepClaims(ctx)        // claims.go
		s.redispatchDead(ctx)
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

// unclaimedDispatches lists a run's dispatched nodes, with their attempts,
// that no worker holds a live claim on.
func (s *Service) unclaimedDispatches(ctx context.Context, q querier, run *runRow, nodes []schedNode) ([]*schedNode, map[string]int32, error) {
	var ids []string
	for i := range nodes {
		if nodes[i].State == stateDispatched {
			ids = append(ids, attemptID(run.ID, nodes[i].ID, nodes[i].Attempt))
		}
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	live, err := liveClaims(ctx, q, run.TenantID, ids, s.cfg.ClaimTimeout, s.claimsWarm())
	if err != nil {
		return nil, nil, err
	}
	var out []*schedNode
	attempts := map[string]int32{}
	for i := range nodes {
		n := &nodes[i]
		if n.State == stateDispatched && !live[attemptID(run.ID, n.ID, n.Attempt)] {
			out = append(out, n)
			attempts[n.ID] = n.Attempt
		}
	}
	return out, attempts, nil
}

package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// Delivery (spec F-29..F-33): a run created with deliver that succeeded has
// its combined change (result_patch) committed on its base commit as the
// branch sylk/<run>, and the run records how (Run.delivery) and announces
// it (EVENT_TYPE_RUN_DELIVERED):
//   - a repository given as a path gets the branch as a ref, fetched into it
//     from a scratch clone (a push would run its hooks): its working tree,
//     index and current branch are not touched;
//   - a clone of a git URL (a repository in CloneDir, the Librarian's) with
//     allow_push gets the branch pushed to its remote, when the remote takes
//     it without a credential; otherwise the branch is kept only here.
// Either way the branch's git bundle and the patch are kept for download
// (GetRunBundle). A run that ended NO_CHANGES delivers nothing and says so.
// A delivery that fails does not fail the run: delivery.detail says why.
//
// A run with session checks is delivered once its check is done, so that
// the delivery says how the tests went. The commit is the same whoever
// makes it and however often (its dates are the run's end), so a replica
// that takes over a run whose delivery is not recorded delivers it again
// under the same name: an identical branch is fine, another one is
// reported and left as it is.

// awaitingDelivery matches the runs whose delivery is due: asked for, not
// recorded yet, ended with a change (past its session check, when it has
// one) or with none. (CASE keeps the empty text from being read as JSON.)
const awaitingDelivery = `deliver AND delivery = '' AND (state = 'NO_CHANGES' OR (state = 'SUCCEEDED'
	AND (NOT session_checks OR CASE WHEN session_check = '' THEN false ELSE session_check::jsonb->>'state' <> 'pending' END)))`

// kickDelivery wakes the delivery loop: a run ended, or its session check.
func (s *Service) kickDelivery() {
	select {
	case s.deliveryKick <- struct{}{}:
	default:
	}
}

// deliveries delivers the runs awaiting it when kicked, and every
// LeaseTTL/3 those of replicas that stopped, until ctx is done.
func (s *Service) deliveries(ctx context.Context) {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		s.sweepDeliveries(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.deliveryKick:
		}
	}
}

// sweepDeliveries claims the runs awaiting delivery that this replica
// holds, or whose holder stopped renewing its lease, and delivers them.
func (s *Service) sweepDeliveries(ctx context.Context) {
	for {
		keys, err := s.claimDeliveries(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "claim runs awaiting delivery", logx.Err(err))
			}
			return
		}
		for _, k := range keys {
			if err := s.deliverRun(ctx, k); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "deliver run; tried again later", logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID, logx.Err(err))
			}
		}
		if len(keys) < deliveryBatch || ctx.Err() != nil {
			return
		}
	}
}

// deliveryBatch is how many runs one claim takes.
const deliveryBatch = 16

func (s *Service) claimDeliveries(ctx context.Context) ([]runKey, error) {
	rows, err := s.db.Query(ctx, `UPDATE runs SET lease_owner = $1, lease_expires = now() + $2 * interval '1 microsecond'
		WHERE (tenant_id, id) IN (
			SELECT tenant_id, id FROM runs WHERE `+awaitingDelivery+`
				AND (lease_owner = $1 OR lease_expires IS NULL OR lease_expires < now())
			ORDER BY end_time LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING tenant_id, id`, s.cfg.ReplicaID, s.cfg.LeaseTTL.Microseconds(), deliveryBatch)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRunKey)
}

// deliverRun delivers one run awaiting it, records the delivery and
// announces it. Only a database error is returned (the run then awaits
// its delivery still); what goes wrong with git is the delivery's detail.
func (s *Service) deliverRun(ctx context.Context, k runKey) error {
	log := s.log.With(logx.KeyTenantID, k.Tenant, logx.KeyRunID, k.ID)
	r, err := s.loadDelivery(ctx, log, k) // delivery_summary.go
	if errors.Is(err, errNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	d := r.summary() // delivery_summary.go
	var bundle []byte
	switch {
	case r.state == stateNoChanges:
		d.Detail = joinNotes("no changes: "+r.noChangeReasons(), d.Detail)
	case len(r.conflicts) > 0:
		d.Detail = joinNotes(fmt.Sprintf("not delivered: the tasks' patches conflict (%s); resolve them and run again", joinClipped(r.conflicts)), d.Detail)
	case r.patch == "":
		d.Detail = joinNotes("no changes: the run's tasks changed no file", d.Detail)
	default:
		if bundle, err = s.makeBranch(ctx, log, r, d); err != nil { // delivery_git.go
			log.WarnContext(ctx, "delivery failed", logx.Err(err))
			// The commit stays named when the bundle holds it.
			d.Branch, d.Pushed = "", false
			if len(bundle) == 0 {
				d.Commit = ""
			}
			d.Detail = joinNotes("delivery failed: "+err.Error(), d.Detail)
		}
	}
	stored, err := storeDelivery(ctx, s.db, r, d, bundle)
	if err != nil || !stored {
		return err
	}
	if d.GetPushed() {
		s.recordPushed(ctx, r, d) // audit.go
	}
	log.InfoContext(ctx, "run delivered", slog.String("branch", d.GetBranch()), slog.String("commit", d.GetCommit()),
		slog.Bool("pushed", d.GetPushed()), slog.String("detail", d.GetDetail()))
	s.publishEvent(ctx, log, k.Tenant, r.session, k.ID+":delivered:"+ids.New(),
		runEvent(eventv1.EventType_EVENT_TYPE_RUN_DELIVERED, k.ID, deliveryText(k.ID, r.repo, r.clone, d),
			&eventv1.RunEvent{State: runStateOf(r.state), FilesChanged: int32(len(d.GetFilesChanged())), Detail: d.GetDetail(), Delivery: d}))
	return nil
}

// storeDelivery records a run's delivery, and the bundle of its branch (or
// none), unless the run moved on meanwhile (reopened, or delivered by
// another replica); it reports whether it did.
func storeDelivery(ctx context.Context, db *pgxpool.Pool, r *deliveryRun, d *orchestratorv1.Delivery, bundle []byte) (bool, error) {
	blob, err := protojson.Marshal(d)
	if err != nil {
		return false, err
	}
	stored := false
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE runs SET delivery = $3 WHERE tenant_id = $1 AND id = $2 AND state = $4 AND reopened = $5
			AND `+awaitingDelivery, r.tenant, r.id, string(blob), r.state, r.reopened)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		stored = true
		if len(bundle) == 0 {
			_, err = tx.Exec(ctx, `DELETE FROM run_bundles WHERE tenant_id = $1 AND run_id = $2`, r.tenant, r.id)
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO run_bundles (tenant_id, run_id, bundle) VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id, run_id) DO UPDATE SET bundle = excluded.bundle`, r.tenant, r.id, bundle)
		return err
	})
	return stored, err
}

package orchestrator

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// What the orchestrator records in the audit log (pkg/audit): runs
// created and cancelled, in the transaction that creates or cancels them,
// and branches pushed to a remote.

// serviceActor is the actor of what the orchestrator does on its own.
const serviceActor = "service:orchestrator"

// actor is who acts in ctx: the caller, or the orchestrator itself.
func actor(ctx context.Context) string {
	if id, ok := identity.FromContext(ctx); ok && id.Valid() && id.Role != identity.RoleService {
		return id.UserID
	}
	return serviceActor
}

// recordCreated records in tx that who created run.
func (s *Service) recordCreated(ctx context.Context, tx pgx.Tx, who identity.Identity, run *runRow, nodes int) error {
	d := map[string]string{"nodes": strconv.Itoa(nodes)}
	for k, v := range map[string]string{"session": run.SessionID, "plan": run.Plan} {
		if v != "" {
			d[k] = v
		}
	}
	_, err := s.audit.AppendTx(ctx, tx, audit.Record{TenantID: run.TenantID, Actor: who.UserID, Action: audit.ActionRunCreated,
		Target: runName(run.ID), Details: d})
	return err
}

// recordCancelled records in tx that the caller in ctx cancelled run.
func (s *Service) recordCancelled(ctx context.Context, tx pgx.Tx, run *runRow) error {
	_, err := s.audit.AppendTx(ctx, tx, audit.Record{TenantID: run.TenantID, Actor: actor(ctx), Action: audit.ActionRunCancelled,
		Target: runName(run.ID), Details: map[string]string{"owner": run.UserID}})
	return err
}

// recordPushed records that run's branch was pushed to its remote. The
// push happened: a failure to record it is logged.
func (s *Service) recordPushed(ctx context.Context, r *deliveryRun, d *orchestratorv1.Delivery) {
	_, err := s.audit.Append(ctx, audit.Record{TenantID: r.tenant, Actor: serviceActor, Action: audit.ActionGitPushed,
		Target: runName(r.id), Details: map[string]string{"remote": d.GetRemote(), "branch": d.GetBranch(), "commit": d.GetCommit()}})
	if err != nil {
		s.log.ErrorContext(ctx, "audit pushed branch", logx.KeyRunID, r.id, logx.Err(err))
	}
}

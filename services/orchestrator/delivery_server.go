package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// GetRunBundle returns a delivered run's branch as a git bundle (when one
// was kept) and its change as a patch from the base commit, to the run's
// owner (viewers may read); FailedPrecondition RUN_NOT_DELIVERED says why
// there is nothing to download.
func (s *Service) GetRunBundle(ctx context.Context, req *orchestratorv1.GetRunBundleRequest) (_ *orchestratorv1.GetRunBundleResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "get run bundle", err) }()
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(req.GetName())
	if err != nil {
		return nil, err
	}
	var (
		state, delivery, patch, base string
		deliver                      bool
		bundle                       []byte
	)
	err = s.db.QueryRow(ctx, `SELECT r.state, r.deliver, r.delivery, r.result_patch, r.base_commit, b.bundle
		FROM runs r LEFT JOIN run_bundles b ON b.tenant_id = r.tenant_id AND b.run_id = r.id
		WHERE r.tenant_id = $1 AND r.id = $2 AND ($3 = '' OR r.user_id = $3)`, who.TenantID, id, runOwner(who)).
		Scan(&state, &deliver, &delivery, &patch, &base, &bundle)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, runNotFound(runName(id))
	}
	if err != nil {
		return nil, fmt.Errorf("load run bundle: %w", err)
	}
	d, err := decodeDelivery(delivery)
	if err != nil {
		return nil, err
	}
	if why := nothingToDownload(runName(id), state, deliver, d, bundle); why != "" {
		return nil, errRunNotDelivered.Withf("%s", why)
	}
	return &orchestratorv1.GetRunBundleResponse{Branch: branchName(id), Bundle: bundle, Patch: patch, BaseCommit: base}, nil
}

// nothingToDownload says why a run offers nothing to download ("" when it
// offers its bundle or its patch).
func nothingToDownload(name, state string, deliver bool, d *orchestratorv1.Delivery, bundle []byte) string {
	switch {
	case !deliver:
		return name + " was not created with deliver: it has no branch (its patch is in the run)"
	case d == nil && !terminalRun(state):
		return name + " has not ended yet: it is delivered once it succeeds"
	case d == nil && state == stateSucceeded:
		return name + " succeeded and is being delivered: ask again shortly"
	case d == nil:
		return fmt.Sprintf("%s ended %s: only a run that succeeds is delivered", name, state)
	case len(bundle) == 0 && d.GetCommit() == "":
		return name + " delivered nothing: " + d.GetDetail()
	}
	return ""
}

// addDelivery fills a run's delivery, once it was delivered.
func addDelivery(ctx context.Context, q querier, tenant string, r *orchestratorv1.Run) error {
	var delivery string
	err := q.QueryRow(ctx, `SELECT delivery FROM runs WHERE tenant_id = $1 AND id = $2`, tenant, r.GetId()).Scan(&delivery)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	r.Delivery, err = decodeDelivery(delivery)
	return err
}

// decodeDelivery reads a stored delivery; nil for none yet.
func decodeDelivery(stored string) (*orchestratorv1.Delivery, error) {
	if stored == "" {
		return nil, nil
	}
	d := &orchestratorv1.Delivery{}
	if err := protojson.Unmarshal([]byte(stored), d); err != nil {
		return nil, fmt.Errorf("decode delivery: %w", err)
	}
	return d, nil
}

// saveDeliveryOptions stores whether a new run is delivered, and may push.
func saveDeliveryOptions(ctx context.Context, tx pgx.Tx, tenant, id string, req *orchestratorv1.CreateRunRequest) error {
	if !req.GetDeliver() {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE runs SET deliver = true, allow_push = $3 WHERE tenant_id = $1 AND id = $2`, tenant, id, req.GetAllowPush())
	return err
}

// validateDelivery checks the delivery options at the edge (allow_push
// without deliver changes nothing).
func validateDelivery(req *orchestratorv1.CreateRunRequest) error {
	if req.GetDeliver() && req.GetRepository() == "" {
		return errors.New("deliver: needs repository")
	}
	return nil
}

package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	adminv1 "sylk.dev/sylk/gen/go/sylk/admin/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
)

// ReasonAPIKeyNotActive: the key was revoked (or rotated already), or it
// expired, so it cannot be rotated; create a new key instead.
const ReasonAPIKeyNotActive = "API_KEY_NOT_ACTIVE"

// maxRotationGrace bounds how long a rotated key keeps working.
const maxRotationGrace = 7 * 24 * time.Hour

// rotation is a checked RotateKeyRequest.
type rotation struct {
	grace time.Duration
	// expires is the new key's expiry when the request names one.
	expires *time.Time
}

func (s *keyServer) rotationArgs(req *adminv1.RotateKeyRequest) (rotation, error) {
	var r rotation
	if g := req.GetGracePeriod(); g != nil {
		if err := g.CheckValid(); err != nil {
			return r, apierr.Invalid("grace_period", "%v", err)
		}
		r.grace = g.AsDuration()
		if r.grace < 0 || r.grace > maxRotationGrace {
			return r, apierr.Invalid("grace_period", "must be 0s to %s, got %s", maxRotationGrace, r.grace)
		}
	}
	if req.GetExpireTime() != nil {
		t := req.GetExpireTime().AsTime()
		if !t.After(s.now()) {
			return r, apierr.Invalid("expire_time", "must be in the future")
		}
		r.expires = &t
	}
	return r, nil
}

// RotateKey replaces a key with a new one for the same user, in one
// transaction: the new key is stored, the old one gets a revoke time (now,
// or now plus the grace period) and the rotation is audited.
func (s *keyServer) RotateKey(ctx context.Context, req *adminv1.RotateKeyRequest) (*adminv1.RotateKeyResponse, error) {
	id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	args, err := s.rotationArgs(req)
	if err != nil {
		return nil, err
	}
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	var old, k APIKey
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if old, err = lockKey(ctx, tx, id, req.GetId()); err != nil {
			return err
		}
		if err := s.checkRotatable(old); err != nil {
			return err
		}
		spec := KeySpec{Tenant: old.TenantID, User: old.UserID, Role: old.Role, Description: old.Description,
			ExpiresAt: args.expires}
		if spec.ExpiresAt == nil && old.ExpiresAt != nil {
			t := s.now().Add(old.ExpiresAt.Sub(old.CreatedAt))
			spec.ExpiresAt = &t
		}
		if k, err = insertKey(ctx, tx, spec, key); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = now() + $3::interval
			WHERE tenant_id = $1 AND id = $2 RETURNING revoked_at`, old.TenantID, old.ID, args.grace).Scan(&old.RevokedAt); err != nil {
			return fmt.Errorf("revoke rotated API key: %w", err)
		}
		return s.auditRotation(ctx, tx, id, old, k, args.grace)
	})
	if err != nil {
		return nil, err
	}
	// The old key's cached identity would outlive its new revoke time.
	s.auth.forget(old.ID)
	return &adminv1.RotateKeyResponse{ApiKey: keyProto(k), Key: key, RotatedKey: keyProto(old)}, nil
}

// checkRotatable refuses a key that no longer works or is already to be
// revoked.
func (s *keyServer) checkRotatable(k APIKey) error {
	now := s.now()
	switch {
	case k.RevokedAt != nil && k.RevokedAt.After(now):
		return apierr.FailedPrecondition(ReasonAPIKeyNotActive,
			"API key %s was rotated already and stops working at %s; rotate the new key or create one",
			k.ID, k.RevokedAt.UTC().Format(time.RFC3339)).With("key_id", k.ID)
	case k.RevokedAt != nil:
		return apierr.FailedPrecondition(ReasonAPIKeyNotActive, "API key %s is revoked; create a new key", k.ID).With("key_id", k.ID)
	case k.ExpiresAt != nil && !k.ExpiresAt.After(now):
		return apierr.FailedPrecondition(ReasonAPIKeyNotActive, "API key %s has expired; create a new key", k.ID).With("key_id", k.ID)
	}
	return nil
}

func (s *keyServer) auditRotation(ctx context.Context, tx pgx.Tx, id identity.Identity, old, k APIKey, grace time.Duration) error {
	details := map[string]string{"user": old.UserID, "prefix": old.Prefix, "new_key": k.ID, "new_prefix": k.Prefix,
		"grace_period": grace.String(), "revoke_time": old.RevokedAt.UTC().Format(time.RFC3339)}
	if k.ExpiresAt != nil {
		details["expire_time"] = k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	_, err := s.audit.AppendTx(ctx, tx, audit.Record{TenantID: id.TenantID, Actor: id.UserID, Action: audit.ActionKeyRotated,
		Target: "api_keys/" + old.ID, Details: details})
	return err
}

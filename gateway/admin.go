package gateway

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "sylk.dev/sylk/gen/go/sylk/admin/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

// The admin APIs (keys and audit) are served by the gateway itself, on the
// grpc-gateway mux (Register...HandlerServer): it holds the key store and
// the auth cache a revocation must clear. No gRPC interceptor runs for
// them, so each handler reads the identity the middleware authenticated
// and checks its own arguments.

// Reasons of the admin APIs' errors.
const (
	// ReasonAdminRoleRequired: only an admin of the tenant may do this.
	ReasonAdminRoleRequired = "ADMIN_ROLE_REQUIRED"
	// ReasonInvalidPageToken: the page token is not one this API gave.
	ReasonInvalidPageToken = "INVALID_PAGE_TOKEN"
)

var errAdminOnly = apierr.New(codes.PermissionDenied, ReasonAdminRoleRequired, "only admins of the tenant may do this")

// caller is the authenticated identity of an admin API call.
func caller(ctx context.Context) (identity.Identity, error) {
	id, ok := identity.FromContext(ctx)
	if !ok || !id.Valid() {
		return identity.Identity{}, identity.ErrNoIdentity
	}
	return id, nil
}

func adminCaller(ctx context.Context) (identity.Identity, error) {
	id, err := caller(ctx)
	if err == nil && id.Role != identity.RoleAdmin {
		err = errAdminOnly.With("role", id.Role)
	}
	return id, err
}

// keyServer serves KeyService.
type keyServer struct {
	adminv1.UnimplementedKeyServiceServer
	db    *pgxpool.Pool
	audit *audit.Log
	auth  *authenticator
	now   func() time.Time
}

func (s *keyServer) CreateKey(ctx context.Context, req *adminv1.CreateKeyRequest) (*adminv1.CreateKeyResponse, error) {
	id, err := adminCaller(ctx)
	if err != nil {
		return nil, err
	}
	role := req.GetRole()
	if role == "" {
		role = identity.RoleMember
	}
	var expires *time.Time
	if req.GetExpireTime() != nil {
		t := req.GetExpireTime().AsTime()
		if !t.After(s.now()) {
			return nil, apierr.Invalid("expire_time", "must be in the future")
		}
		expires = &t
	}
	if err := checkTenantUser(id.TenantID, req.GetUserId(), role); err != nil {
		return nil, apierr.Invalid("user_id", "%v", err)
	}
	if len(req.GetDescription()) > maxDescription {
		return nil, apierr.Invalid("description", "at most %d bytes", maxDescription)
	}
	k, key, err := IssueAPIKey(ctx, s.db, s.audit, id.UserID, KeySpec{Tenant: id.TenantID, User: req.GetUserId(), Role: role,
		Description: req.GetDescription(), ExpiresAt: expires})
	if err != nil {
		return nil, err
	}
	return &adminv1.CreateKeyResponse{ApiKey: keyProto(k), Key: key}, nil
}

func (s *keyServer) ListKeys(ctx context.Context, _ *adminv1.ListKeysRequest) (*adminv1.ListKeysResponse, error) {
	id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	user := id.UserID
	if id.Role == identity.RoleAdmin {
		user = ""
	}
	keys, err := listKeys(ctx, s.db, id.TenantID, user)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ListKeysResponse{ApiKeys: make([]*adminv1.ApiKey, len(keys))}
	for i, k := range keys {
		out.ApiKeys[i] = keyProto(k)
	}
	return out, nil
}

// KeySpec is what IssueAPIKey makes a key for.
type KeySpec struct {
	Tenant, User string
	// Role is the role of a user created for the key; an existing user
	// keeps theirs.
	Role        string
	Description string
	// ExpiresAt, when set, is when the key stops working.
	ExpiresAt *time.Time
}

// IssueAPIKey creates a key for spec's user (created when missing) and
// records it in log as done by actor, in one transaction. It returns the
// key's description and the key, which only its hash is stored of.
func IssueAPIKey(ctx context.Context, db *pgxpool.Pool, log *audit.Log, actor string, spec KeySpec) (APIKey, string, error) {
	if err := checkTenantUser(spec.Tenant, spec.User, spec.Role); err != nil {
		return APIKey{}, "", err
	}
	key, err := NewKey()
	if err != nil {
		return APIKey{}, "", err
	}
	var k APIKey
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := ensureTenantUser(ctx, tx, spec.Tenant, spec.User, spec.Role, false); err != nil {
			return err
		}
		if k, err = insertKey(ctx, tx, spec, key); err != nil {
			return err
		}
		details := map[string]string{"user": k.UserID, "role": k.Role, "prefix": k.Prefix}
		if spec.ExpiresAt != nil {
			details["expire_time"] = spec.ExpiresAt.UTC().Format(time.RFC3339)
		}
		_, err = log.AppendTx(ctx, tx, audit.Record{TenantID: spec.Tenant, Actor: actor, Action: audit.ActionKeyCreated,
			Target: "api_keys/" + k.ID, Details: details})
		return err
	})
	if err != nil {
		return APIKey{}, "", err
	}
	return k, key, nil
}

// insertKey stores key (its hash) for spec's user, who must exist.
func insertKey(ctx context.Context, tx pgx.Tx, spec KeySpec, key string) (APIKey, error) {
	k, err := scanKey(tx.QueryRow(ctx, `WITH k AS (
		INSERT INTO api_keys (id, tenant_id, user_id, key_hash, prefix, description, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *)
		SELECT `+keyColumns+` FROM k JOIN users u ON u.tenant_id = k.tenant_id AND u.id = k.user_id`,
		ids.New(), spec.Tenant, spec.User, hashKey(key), key[:keyDisplayLen], spec.Description, spec.ExpiresAt))
	if err != nil {
		return APIKey{}, fmt.Errorf("store API key: %w", err)
	}
	return k, nil
}

// lockKey reads the key keyID of the caller's tenant and locks its row
// for tx. Another user's key is not found for a non-admin, like an
// unknown one.
func lockKey(ctx context.Context, tx pgx.Tx, id identity.Identity, keyID string) (APIKey, error) {
	if !ids.Valid(keyID) {
		return APIKey{}, apierr.NotFound("API key", keyID)
	}
	k, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+`
		FROM api_keys k JOIN users u ON u.tenant_id = k.tenant_id AND u.id = k.user_id
		WHERE k.tenant_id = $1 AND k.id = $2 FOR UPDATE OF k`, id.TenantID, keyID))
	if errors.Is(err, pgx.ErrNoRows) || err == nil && id.Role != identity.RoleAdmin && k.UserID != id.UserID {
		return APIKey{}, apierr.NotFound("API key", keyID)
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("look up API key: %w", err)
	}
	return k, nil
}

func (s *keyServer) RevokeKey(ctx context.Context, req *adminv1.RevokeKeyRequest) (*adminv1.RevokeKeyResponse, error) {
	id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var k APIKey
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if k, err = lockKey(ctx, tx, id, req.GetId()); err != nil {
			return err
		}
		// A key rotated with a grace period has a revoke time to come:
		// revoking it brings that time to now.
		if k.RevokedAt != nil && !k.RevokedAt.After(s.now()) {
			return nil
		}
		if err := tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 RETURNING revoked_at`,
			id.TenantID, k.ID).Scan(&k.RevokedAt); err != nil {
			return fmt.Errorf("revoke API key: %w", err)
		}
		_, err := s.audit.AppendTx(ctx, tx, audit.Record{TenantID: id.TenantID, Actor: id.UserID, Action: audit.ActionKeyRevoked,
			Target: "api_keys/" + k.ID, Details: map[string]string{"user": k.UserID, "prefix": k.Prefix}})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.auth.forget(k.ID)
	return &adminv1.RevokeKeyResponse{ApiKey: keyProto(k)}, nil
}

func keyProto(k APIKey) *adminv1.ApiKey {
	ts := func(t *time.Time) *timestamppb.Timestamp {
		if t == nil {
			return nil
		}
		return timestamppb.New(*t)
	}
	return &adminv1.ApiKey{Id: k.ID, UserId: k.UserID, Role: k.Role, Prefix: k.Prefix, Description: k.Description,
		CreateTime: timestamppb.New(k.CreatedAt), ExpireTime: ts(k.ExpiresAt), RevokeTime: ts(k.RevokedAt), LastUseTime: ts(k.LastUsedAt)}
}

// auditServer serves AuditService.
type auditServer struct {
	adminv1.UnimplementedAuditServiceServer
	audit *audit.Log
}

// defaultAuditPage is the page size of a list that names none.
const defaultAuditPage = 50

func (s *auditServer) ListAuditRecords(ctx context.Context, req *adminv1.ListAuditRecordsRequest) (*adminv1.ListAuditRecordsResponse, error) {
	id, err := adminCaller(ctx)
	if err != nil {
		return nil, err
	}
	f := audit.Filter{Action: req.GetAction(), Actor: req.GetActor(), Limit: int(req.GetPageSize())}
	if f.Limit == 0 {
		f.Limit = defaultAuditPage
	}
	if f.Limit < 0 || f.Limit > audit.MaxPage {
		return nil, apierr.Invalid("page_size", "must be 1 to %d", audit.MaxPage)
	}
	if req.GetStartTime() != nil {
		f.Since = req.GetStartTime().AsTime()
	}
	if req.GetEndTime() != nil {
		f.Until = req.GetEndTime().AsTime()
	}
	if tok := req.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		seq, perr := strconv.ParseInt(string(b), 10, 64)
		if err != nil || perr != nil || seq < 1 {
			return nil, apierr.New(codes.InvalidArgument, ReasonInvalidPageToken, "page_token: not a token this API gave").With("field", "page_token")
		}
		f.BeforeSeq = seq
	}
	es, more, err := s.audit.List(ctx, id.TenantID, f)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ListAuditRecordsResponse{Records: make([]*adminv1.AuditRecord, len(es))}
	for i, e := range es {
		out.Records[i] = &adminv1.AuditRecord{Id: e.ID, Sequence: e.Seq, CreateTime: timestamppb.New(e.Time), Actor: e.Actor,
			Action: e.Action, Target: e.Target, Details: e.Details, PreviousHash: hex.EncodeToString(e.PrevHash), Hash: hex.EncodeToString(e.Hash)}
	}
	if more {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(es[len(es)-1].Seq, 10)))
	}
	return out, nil
}

var problems = map[audit.Problem]adminv1.AuditProblem{
	audit.ProblemAltered:   adminv1.AuditProblem_AUDIT_PROBLEM_ALTERED,
	audit.ProblemMissing:   adminv1.AuditProblem_AUDIT_PROBLEM_MISSING,
	audit.ProblemUnlinked:  adminv1.AuditProblem_AUDIT_PROBLEM_UNLINKED,
	audit.ProblemTruncated: adminv1.AuditProblem_AUDIT_PROBLEM_TRUNCATED,
}

func (s *auditServer) VerifyAuditLog(ctx context.Context, _ *adminv1.VerifyAuditLogRequest) (*adminv1.VerifyAuditLogResponse, error) {
	id, err := adminCaller(ctx)
	if err != nil {
		return nil, err
	}
	rep, err := s.audit.Verify(ctx, id.TenantID)
	if err != nil {
		return nil, err
	}
	out := &adminv1.VerifyAuditLogResponse{Intact: rep.Broken == nil, RecordsChecked: rep.Checked,
		HeadSequence: rep.HeadSeq, HeadHash: hex.EncodeToString(rep.HeadHash)}
	if b := rep.Broken; b != nil {
		out.FirstBreak = &adminv1.AuditBreak{Sequence: b.Seq, RecordId: b.ID, Problem: problems[b.Problem]}
	}
	return out, nil
}

package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

// API keys are "sylk_" followed by keyRandomLen base62 characters. Only
// their SHA-256 hash is stored, with a short prefix for display.
const (
	keyPrefix       = "sylk_"
	keyRandomLen    = 40
	keyMinLen       = 32
	keyMaxLen       = 256
	keyDisplayLen   = 12
	maxDescription  = 512
	lastUsedEvery   = time.Minute
	base62          = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	bootstrapRemark = "bootstrap admin key"
)

// Errors of the key helpers.
var (
	// ErrInvalidKey is returned for a key that does not have the sylk_ form.
	ErrInvalidKey = errors.New("invalid API key format")
	// ErrKeyOwned is returned by EnsureBootstrapKey when the key is already
	// registered to another tenant or user.
	ErrKeyOwned = errors.New("API key is already registered to another user")
	// ErrKeyNotFound is returned by RevokeAPIKey for an unknown key id.
	ErrKeyNotFound = errors.New("API key not found")
)

// APIKey describes a stored key; the key itself is never stored.
type APIKey struct {
	ID          string
	TenantID    string
	UserID      string
	Role        string
	Prefix      string
	Description string
	CreatedAt   time.Time
	ExpiresAt   *time.Time
	RevokedAt   *time.Time
	LastUsedAt  *time.Time
}

// checkKeyFormat reports whether key has the sylk_ form. The error never
// contains the key.
func checkKeyFormat(key string) error {
	if !strings.HasPrefix(key, keyPrefix) {
		return fmt.Errorf("%w: must start with %q", ErrInvalidKey, keyPrefix)
	}
	if len(key) < keyMinLen || len(key) > keyMaxLen {
		return fmt.Errorf("%w: must be %d to %d characters long", ErrInvalidKey, keyMinLen, keyMaxLen)
	}
	for i := len(keyPrefix); i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: only letters, digits, '_' and '-' are allowed", ErrInvalidKey)
		}
	}
	return nil
}

// NewKey returns a fresh random API key: "sylk_" and 40 base62 characters.
func NewKey() (string, error) {
	out := make([]byte, 0, len(keyPrefix)+keyRandomLen)
	out = append(out, keyPrefix...)
	buf := make([]byte, 64)
	for len(out) < cap(out) {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("generate API key: %w", err)
		}
		for _, b := range buf {
			// 248 is the largest multiple of 62 below 256: rejecting the
			// rest keeps every character equally likely.
			if b < 248 && len(out) < cap(out) {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out), nil
}

func hashKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

func validRole(role string) bool {
	return role == identity.RoleAdmin || role == identity.RoleMember || role == identity.RoleViewer
}

func checkTenantUser(tenant, user, role string) error {
	var errs []error
	if !idPattern(tenant) {
		errs = append(errs, fmt.Errorf("tenant %q: want letters, digits, '_', '.', '@' or '-', at most 128", tenant))
	}
	if !idPattern(user) {
		errs = append(errs, fmt.Errorf("user %q: want letters, digits, '_', '.', '@' or '-', at most 128", user))
	}
	if !validRole(role) {
		errs = append(errs, fmt.Errorf("role %q: want admin, member or viewer", role))
	}
	return errors.Join(errs...)
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// EnsureTenantUser creates the tenant and the user when missing; a new user
// gets role (admin, member or viewer), an existing user keeps theirs. A
// user's role applies to all of their keys.
func EnsureTenantUser(ctx context.Context, db *pgxpool.Pool, tenant, user, role string) error {
	if err := checkTenantUser(tenant, user, role); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return ensureTenantUser(ctx, tx, tenant, user, role, false)
	})
}

// ensureTenantUser creates the tenant and the user when missing; with
// forceRole an existing user's role is set to role too.
func ensureTenantUser(ctx context.Context, q execer, tenant, user, role string, forceRole bool) error {
	if _, err := q.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $1) ON CONFLICT (id) DO NOTHING`, tenant); err != nil {
		return fmt.Errorf("ensure tenant %s: %w", tenant, err)
	}
	sql := `INSERT INTO users (tenant_id, id, role) VALUES ($1, $2, $3) ON CONFLICT (tenant_id, id) DO NOTHING`
	if forceRole {
		sql = `INSERT INTO users (tenant_id, id, role) VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id, id) DO UPDATE SET role = EXCLUDED.role WHERE users.role <> EXCLUDED.role`
	}
	if _, err := q.Exec(ctx, sql, tenant, user, role); err != nil {
		return fmt.Errorf("ensure user %s/%s: %w", tenant, user, err)
	}
	return nil
}

// CreateAPIKey creates a key for user in tenant and returns it. The tenant
// and the user are created when missing (a new user gets role; an existing
// one keeps theirs). The key is shown only here: the database keeps its hash.
func CreateAPIKey(ctx context.Context, db *pgxpool.Pool, tenant, user, role, description string) (string, error) {
	if err := checkTenantUser(tenant, user, role); err != nil {
		return "", err
	}
	if len(description) > maxDescription {
		return "", fmt.Errorf("description: at most %d bytes, got %d", maxDescription, len(description))
	}
	key, err := NewKey()
	if err != nil {
		return "", err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := ensureTenantUser(ctx, tx, tenant, user, role, false); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, user_id, key_hash, prefix, description)
			VALUES ($1, $2, $3, $4, $5, $6)`, ids.New(), tenant, user, hashKey(key), key[:keyDisplayLen], description)
		if err != nil {
			return fmt.Errorf("store API key: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return key, nil
}

// EnsureBootstrapKey stores key for user of tenant unless it is stored
// already, creating both when missing and making the user an admin; running
// it again is a no-op. The key must have the sylk_ form and at least 32
// characters. A revoked key stays revoked.
func EnsureBootstrapKey(ctx context.Context, db *pgxpool.Pool, tenant, user, key string) error {
	if err := checkKeyFormat(key); err != nil {
		return err
	}
	if err := checkTenantUser(tenant, user, identity.RoleAdmin); err != nil {
		return err
	}
	h := hashKey(key)
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := ensureTenantUser(ctx, tx, tenant, user, identity.RoleAdmin, true); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, user_id, key_hash, prefix, description)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key_hash) DO NOTHING`,
			ids.New(), tenant, user, h, key[:keyDisplayLen], bootstrapRemark)
		if err != nil {
			return fmt.Errorf("store bootstrap key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var owner, ownerUser string
		if err := tx.QueryRow(ctx, `SELECT tenant_id, user_id FROM api_keys WHERE key_hash = $1`, h).Scan(&owner, &ownerUser); err != nil {
			return fmt.Errorf("look up bootstrap key: %w", err)
		}
		if owner != tenant || ownerUser != user {
			return ErrKeyOwned
		}
		return nil
	})
}

// ListAPIKeys returns the keys of a tenant, newest first.
func ListAPIKeys(ctx context.Context, db *pgxpool.Pool, tenant string) ([]APIKey, error) {
	return listKeys(ctx, db, tenant, "")
}

// keyColumns are the columns scanKey reads, of api_keys k joined with users u.
const keyColumns = `k.id, k.tenant_id, k.user_id, u.role, k.prefix, k.description, k.created_at, k.expires_at, k.revoked_at, k.last_used_at`

func scanKey(r pgx.Row) (APIKey, error) {
	var k APIKey
	err := r.Scan(&k.ID, &k.TenantID, &k.UserID, &k.Role, &k.Prefix, &k.Description, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt)
	return k, err
}

// listKeys returns the keys of a tenant (of one of its users when user is
// set), newest first.
func listKeys(ctx context.Context, db *pgxpool.Pool, tenant, user string) ([]APIKey, error) {
	rows, err := db.Query(ctx, `SELECT `+keyColumns+`
		FROM api_keys k JOIN users u ON u.tenant_id = k.tenant_id AND u.id = k.user_id
		WHERE k.tenant_id = $1 AND ($2 = '' OR k.user_id = $2) ORDER BY k.created_at DESC, k.id DESC`, tenant, user)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) { return scanKey(r) })
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return keys, nil
}

// RevokeAPIKey revokes a key of tenant by id; revoking a revoked key is a no-op.
func RevokeAPIKey(ctx context.Context, db *pgxpool.Pool, tenant, id string) error {
	tag, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = LEAST(COALESCE(revoked_at, now()), now()) WHERE tenant_id = $1 AND id = $2`, tenant, id)
	if err != nil {
		return fmt.Errorf("revoke API key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrKeyNotFound
	}
	return nil
}

// Keys are the key store and the audit log key changes are recorded in.
type Keys struct {
	DB    *pgxpool.Pool
	Audit *audit.Log
}

// RevokeAPIKeyAs revokes a key of tenant by id and records it in log as
// done by actor, in one transaction; revoking a revoked key changes and
// records nothing. Gateways stop taking the key within their auth cache
// TTL.
func RevokeAPIKeyAs(ctx context.Context, db *pgxpool.Pool, log *audit.Log, actor, tenant, id string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var user, prefix string
		var revoked bool
		err := tx.QueryRow(ctx, `SELECT user_id, prefix, revoked_at IS NOT NULL AND revoked_at <= now() FROM api_keys WHERE tenant_id = $1 AND id = $2 FOR UPDATE`,
			tenant, id).Scan(&user, &prefix, &revoked)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrKeyNotFound
		}
		if err != nil || revoked {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND id = $2`, tenant, id); err != nil {
			return fmt.Errorf("revoke API key: %w", err)
		}
		_, err = log.AppendTx(ctx, tx, audit.Record{TenantID: tenant, Actor: actor, Action: audit.ActionKeyRevoked,
			Target: "api_keys/" + id, Details: map[string]string{"user": user, "prefix": prefix}})
		return err
	})
}

// authResult is the outcome of a key lookup.
type authResult int

const (
	authOK authResult = iota
	authUnknown
	authRevoked
	authExpired
)

// authenticator resolves API keys to identities, remembering the outcome
// for ttl so that a request does not wait for the key store: valid keys
// (never beyond their expiry), and unknown, revoked and expired ones, so
// that a flood of bad keys does not reach PostgreSQL.
type authenticator struct {
	db  *pgxpool.Pool
	now func() time.Time
	ttl time.Duration

	mu    sync.Mutex
	known map[string]knownKey // by key hash
}

type knownKey struct {
	res     authResult
	keyID   string
	id      identity.Identity
	expires time.Time
}

// maxKnownKeys bounds the cache; it is emptied when full.
const maxKnownKeys = 10000

func (a *authenticator) cached(hash string) (knownKey, bool) {
	if a.ttl <= 0 {
		return knownKey{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.known[hash]
	if !ok || !a.now().Before(k.expires) {
		return knownKey{}, false
	}
	return k, true
}

// remember caches k for the TTL, a valid key never beyond its expiry.
func (a *authenticator) remember(hash string, k knownKey, keyExpiry *time.Time) {
	if a.ttl <= 0 {
		return
	}
	k.expires = a.now().Add(a.ttl)
	if keyExpiry != nil && keyExpiry.Before(k.expires) {
		k.expires = *keyExpiry
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known == nil || len(a.known) >= maxKnownKeys {
		a.known = map[string]knownKey{}
	}
	a.known[hash] = k
}

// forget drops the cached outcome of the key with id keyID, so that its
// revocation takes effect on this gateway at once.
func (a *authenticator) forget(keyID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for h, k := range a.known {
		if k.keyID == keyID {
			delete(a.known, h)
		}
	}
}

// lookup resolves key. It updates the key's last_used_at at most once a
// minute; a failed update does not fail the request and is returned as
// touchErr for logging.
func (a *authenticator) lookup(ctx context.Context, key string) (id identity.Identity, res authResult, touchErr, err error) {
	if checkKeyFormat(key) != nil {
		return identity.Identity{}, authUnknown, nil, nil
	}
	var (
		keyID     string
		revoked   bool
		revokeAt  *time.Time
		expiresAt *time.Time
		lastUsed  *time.Time
	)
	hash := hashKey(key)
	if known, ok := a.cached(string(hash)); ok {
		return known.id, known.res, nil, nil
	}
	// A rotated key's revoke time may lie ahead (its grace period).
	err = a.db.QueryRow(ctx, `SELECT k.id, k.tenant_id, k.user_id, u.role, COALESCE(k.revoked_at <= now(), false), k.revoked_at, k.expires_at, k.last_used_at
		FROM api_keys k JOIN users u ON u.tenant_id = k.tenant_id AND u.id = k.user_id
		WHERE k.key_hash = $1`, hash).Scan(&keyID, &id.TenantID, &id.UserID, &id.Role, &revoked, &revokeAt, &expiresAt, &lastUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		a.remember(string(hash), knownKey{res: authUnknown}, nil)
		return identity.Identity{}, authUnknown, nil, nil
	}
	if err != nil {
		return identity.Identity{}, authUnknown, nil, fmt.Errorf("look up API key: %w", err)
	}
	switch {
	case revoked:
		res = authRevoked
	case expiresAt != nil && !a.now().Before(*expiresAt):
		res = authExpired
	}
	if res != authOK {
		a.remember(string(hash), knownKey{res: res, keyID: keyID}, nil)
		return identity.Identity{}, res, nil, nil
	}
	if lastUsed == nil || a.now().Sub(*lastUsed) >= lastUsedEvery {
		// The condition is repeated in SQL so that concurrent requests
		// write the row once.
		_, touchErr = a.db.Exec(ctx, `UPDATE api_keys SET last_used_at = now()
			WHERE tenant_id = $1 AND id = $2 AND (last_used_at IS NULL OR last_used_at < now() - $3::interval)`,
			id.TenantID, keyID, lastUsedEvery)
	}
	a.remember(string(hash), knownKey{res: authOK, keyID: keyID, id: id}, earliest(expiresAt, revokeAt))
	return id, authOK, touchErr, nil
}

// earliest is the earlier of two optional times.
func earliest(a, b *time.Time) *time.Time {
	if a == nil || b != nil && b.Before(*a) {
		return b
	}
	return a
}

// knownValid reports whether key is cached as valid: such a request is
// not checked against the failed-authentication limits.
func (a *authenticator) knownValid(key string) bool {
	k, ok := a.cached(string(hashKey(key)))
	return ok && k.res == authOK
}

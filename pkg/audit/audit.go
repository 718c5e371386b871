// Package audit is the hash-chained audit log of security-relevant actions
// (API keys created and revoked, plans approved, runs created and
// cancelled, repositories registered, git pushes, permission denials,
// credentials stored).
//
// Each tenant has one chain. A record's hash is SHA-256 over a canonical
// encoding of its fields and the hash of the record before it, so that
// editing, deleting or reordering a record breaks the chain, which Verify
// finds. Appends lock the chain's head row (SELECT ... FOR UPDATE): the
// appends of every service to a tenant's chain are serialised, and a
// service appends inside its own transaction (AppendTx), so that the record
// exists exactly when the action it records does.
//
// Details hold ids and facts, never secrets: no keys, tokens, passwords or
// file contents.
package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/pgstore"
)

// Schema is the name of the audit log's Postgres schema (under the
// deployment's schema prefix).
const Schema = "audit"

// Actions recorded. An action is lower-case, dotted: <resource>.<verb>.
const (
	ActionKeyCreated           = "api_key.created"
	ActionKeyRevoked           = "api_key.revoked"
	ActionKeyRotated           = "api_key.rotated"
	ActionCredentialsStored    = "credentials.stored"
	ActionCredentialsDeleted   = "credentials.deleted"
	ActionPlanApproved         = "plan.approved"
	ActionRunCreated           = "run.created"
	ActionRunCancelled         = "run.cancelled"
	ActionRepositoryRegistered = "repository.registered"
	ActionGitPushed            = "git.pushed"
	ActionPermissionDenied     = "permission.denied"
)

// Limits of a record, so that no caller can make the log a store of
// arbitrary data.
const (
	maxField      = 512
	maxDetails    = 32
	maxDetailText = 1024
)

// hashVersion starts every hashed encoding; a change of the encoding
// changes it.
const hashVersion = "sylk.audit.v1"

// genesis is the previous hash of a chain's first record.
var genesis = make([]byte, sha256.Size)

// ErrInvalid is returned for a record that misses a field or exceeds a
// limit.
var ErrInvalid = errors.New("invalid audit record")

// Record is what a caller records.
type Record struct {
	TenantID string
	// Actor is who acted: a user id, or "service:<name>" for a service
	// acting on its own.
	Actor string
	// Action is one of the Action constants.
	Action string
	// Target names what was acted on ("runs/<id>", "api_keys/<id>", the
	// HTTP route of a denied request).
	Target string
	// Details are facts about the action (ids, counts, reasons); never
	// secrets.
	Details map[string]string
}

// Entry is a stored record: the record, its place in the chain and its
// hashes.
type Entry struct {
	Record
	Seq      int64
	ID       string
	Time     time.Time
	PrevHash []byte
	Hash     []byte
}

func (r Record) validate() error {
	var errs []error
	for name, v := range map[string]string{"tenant": r.TenantID, "actor": r.Actor, "action": r.Action, "target": r.Target} {
		if v == "" || len(v) > maxField {
			errs = append(errs, fmt.Errorf("%s: want 1 to %d bytes, got %d", name, maxField, len(v)))
		}
	}
	if len(r.Details) > maxDetails {
		errs = append(errs, fmt.Errorf("details: at most %d, got %d", maxDetails, len(r.Details)))
	}
	for k, v := range r.Details {
		if k == "" || len(k) > maxField || len(v) > maxDetailText {
			errs = append(errs, fmt.Errorf("detail %.40q: key 1 to %d bytes, value at most %d", k, maxField, maxDetailText))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Hash computes e's hash: SHA-256 over a canonical encoding of its tenant,
// sequence, id, time (UTC, microseconds), actor, action, target, details
// (sorted by key) and previous hash, each field length-prefixed so that no
// two different records encode alike.
func (e Entry) hash() []byte {
	var b bytes.Buffer
	field := func(s []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		b.Write(n[:])
		b.Write(s)
	}
	str := func(s string) { field([]byte(s)) }
	str(hashVersion)
	str(e.TenantID)
	str(strconv.FormatInt(e.Seq, 10))
	str(e.ID)
	str(e.Time.UTC().Format("2006-01-02T15:04:05.000000Z"))
	str(e.Actor)
	str(e.Action)
	str(e.Target)
	keys := slices.Sorted(maps.Keys(e.Details))
	str(strconv.Itoa(len(keys)))
	for _, k := range keys {
		str(k)
		str(e.Details[k])
	}
	field(e.PrevHash)
	sum := sha256.Sum256(b.Bytes())
	return sum[:]
}

// Log appends to, lists and verifies the audit chains.
type Log struct {
	db      *pgxpool.Pool
	records string // qualified table names
	heads   string
	now     func() time.Time
}

// New returns the log on the audit tables in schema (migrated; see
// migrations/audit). db may be a pool on any schema of the database: the
// tables are named with their schema.
func New(db *pgxpool.Pool, schema string) (*Log, error) {
	if db == nil {
		return nil, errors.New("audit: a database pool is required")
	}
	if !pgstore.ValidSchema(schema) {
		return nil, fmt.Errorf("audit: invalid schema name %q", schema)
	}
	s := pgx.Identifier{schema}.Sanitize()
	return &Log{db: db, records: s + ".records", heads: s + ".heads", now: time.Now}, nil
}

// Querier is what AppendTx needs of a transaction (pgx.Tx has it).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Append records r in a transaction of its own. A nil Log records nothing
// (a service built without one, as in its unit tests).
func (l *Log) Append(ctx context.Context, r Record) (Entry, error) {
	if l == nil {
		return Entry{}, nil
	}
	var e Entry
	err := pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var err error
		e, err = l.AppendTx(ctx, tx, r)
		return err
	})
	return e, err
}

// AppendTx records r in tx, a transaction on the same database: the record
// commits with it, or not at all. The chain's head stays locked until tx
// ends, so append last, just before committing. A nil Log records nothing.
func (l *Log) AppendTx(ctx context.Context, tx Querier, r Record) (Entry, error) {
	if l == nil {
		return Entry{}, nil
	}
	if err := r.validate(); err != nil {
		return Entry{}, err
	}
	// The head row exists before it is locked; ON CONFLICT waits for a
	// concurrent first append and then does nothing.
	if _, err := tx.Exec(ctx, `INSERT INTO `+l.heads+` (tenant_id, seq, hash) VALUES ($1, 0, $2)
		ON CONFLICT (tenant_id) DO NOTHING`, r.TenantID, genesis); err != nil {
		return Entry{}, fmt.Errorf("audit: create chain head: %w", err)
	}
	e := Entry{Record: r, ID: ids.New()}
	if err := tx.QueryRow(ctx, `SELECT seq, hash FROM `+l.heads+` WHERE tenant_id = $1 FOR UPDATE`, r.TenantID).
		Scan(&e.Seq, &e.PrevHash); err != nil {
		return Entry{}, fmt.Errorf("audit: lock chain head: %w", err)
	}
	e.Seq++
	// Taken under the lock, so that times follow the sequence; stored to
	// the microsecond, as PostgreSQL keeps it.
	e.Time = l.now().UTC().Truncate(time.Microsecond)
	if e.Details == nil {
		e.Details = map[string]string{}
	}
	e.Hash = e.hash()
	if _, err := tx.Exec(ctx, `INSERT INTO `+l.records+` (tenant_id, seq, id, created_at, actor, action, target, details, prev_hash, hash)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		e.TenantID, e.Seq, e.ID, e.Time, e.Actor, e.Action, e.Target, e.Details, e.PrevHash, e.Hash); err != nil {
		return Entry{}, fmt.Errorf("audit: insert record: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE `+l.heads+` SET seq = $2, hash = $3 WHERE tenant_id = $1`, e.TenantID, e.Seq, e.Hash); err != nil {
		return Entry{}, fmt.Errorf("audit: advance chain head: %w", err)
	}
	return e, nil
}

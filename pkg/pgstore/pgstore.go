// Package pgstore opens the process's pgx pool and applies SQL migrations.
package pgstore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDSN points at the local PostgreSQL.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/sylk?sslmode=disable"

// Config locates the database.
type Config struct {
	DSN      string
	MaxConns int
}

// RegisterFlags registers -postgres.dsn and -postgres.max-conns.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DSN, "postgres.dsn", DefaultDSN, "PostgreSQL connection string")
	fs.IntVar(&c.MaxConns, "postgres.max-conns", 10, "maximum connections in the pool")
}

// Validate checks the DSN parses.
func (c Config) Validate() error {
	if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		return fmt.Errorf("postgres.dsn: %w", redactErr(err))
	}
	if c.MaxConns < 1 {
		return errors.New("postgres.max-conns: must be at least 1")
	}
	return nil
}

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSchema reports whether name is a schema name this package accepts.
func ValidSchema(name string) bool { return schemaPattern.MatchString(name) }

// Open returns a pool whose connections use schema (then public) as search path.
func Open(ctx context.Context, cfg Config, schema string) (*pgxpool.Pool, error) {
	if !ValidSchema(schema) {
		return nil, fmt.Errorf("invalid schema name %q", schema)
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse postgres dsn: %w", redactErr(err))
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = int32(cfg.MaxConns)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = schema + ",public"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to postgres %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return pool, nil
}

// EnsureDatabase creates the DSN's database when it does not exist yet.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse postgres dsn: %w", redactErr(err))
	}
	name := cc.Database
	if name == "" || name == "postgres" {
		return nil
	}
	cc.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect to postgres %s:%d: %w", cc.Host, cc.Port, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "42P04" { // created concurrently
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

var migrationName = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.up\.sql$`)

type migration struct {
	version int64
	name    string
	sql     string
}

// Migrate applies the *.up.sql files of fsys, in version order, to schema.
// It holds an advisory lock for the schema while it runs, so concurrent
// replicas apply each migration once; applied versions are recorded in
// schema.schema_migrations, so running it again is a no-op.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, fsys fs.FS) (applied int, err error) {
	if !ValidSchema(schema) {
		return 0, fmt.Errorf("invalid schema name %q", schema)
	}
	migs, err := readMigrations(fsys)
	if err != nil {
		return 0, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	lockKey := "sylk.migrate." + schema
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, lockKey); err != nil {
		return 0, fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// Unlock on a fresh context: ctx may be done already.
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, lockKey)
	}()
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
		return 0, fmt.Errorf("create schema %s: %w", schema, err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+ident+`.schema_migrations (
		version bigint PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("create schema_migrations: %w", err)
	}
	done := map[int64]bool{}
	rows, err := conn.Query(ctx, `SELECT version FROM `+ident+`.schema_migrations`)
	if err != nil {
		return 0, fmt.Errorf("read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("read schema_migrations: %w", err)
	}
	for _, v := range versions {
		done[v] = true
	}
	for _, m := range migs {
		if done[m.version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+ident+`, public`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+ident+`.schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("apply migration %s/%04d_%s: %w", schema, m.version, m.name, err)
		}
		applied++
	}
	return applied, nil
}

func readMigrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var migs []migration
	seen := map[int64]string{}
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			if strings.HasSuffix(e.Name(), ".up.sql") {
				return nil, fmt.Errorf("migration %s: name must be NNNN_name.up.sql", e.Name())
			}
			continue
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		if prev, ok := seen[v]; ok {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		migs = append(migs, migration{version: v, name: m[2], sql: string(b)})
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].version < migs[j].version })
	return migs, nil
}

// IsUniqueViolation reports whether err is a unique-constraint violation.
func IsUniqueViolation(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "23505"
}

// Unavailable reports whether err says the database could not be reached
// or dropped the connection (a server that is down, stopping, restarting or
// not accepting connections yet) rather than that a statement failed: the
// caller may answer Unavailable and the client retry.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exception
	}
	return false
}

// redactErr keeps a DSN's password out of parse errors.
func redactErr(err error) error {
	return errors.New(regexp.MustCompile(`://[^@/]*@`).ReplaceAllString(err.Error(), "://***@"))
}

// Microseconds since the Unix epoch of 0001-01-01 and of the end of 9999:
// the times a page token may carry.
const (
	minTokenMicros = -62135596800_000000
	maxTokenMicros = 253402300799_999999
)

// TokenTime turns the microseconds a page token carries back into a time,
// refusing values outside years 1 to 9999 (PostgreSQL cannot compare some
// of them, and no stored row has them), so that a forged token is an
// invalid argument, not a database error.
func TokenTime(micros int64) (time.Time, bool) {
	if micros < minTokenMicros || micros > maxTokenMicros {
		return time.Time{}, false
	}
	return time.UnixMicro(micros).UTC(), true
}

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/testenv"
)

var migs = fstest.MapFS{
	"0001_create.up.sql": {Data: []byte(`CREATE TABLE widgets (id bigint PRIMARY KEY, name text NOT NULL);`)},
	"0002_seed.up.sql":   {Data: []byte(`INSERT INTO widgets VALUES (1, 'one');`)},
	"README.md":          {Data: []byte(`ignored`)},
}

func TestMigrateIsIdempotentAndConcurrentSafe(t *testing.T) {
	t.Parallel()
	pool, schema := testenv.Postgres(t, "pgstore", nil)
	ctx := context.Background()

	// Several replicas migrating at once apply each file exactly once.
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = pgstore.Migrate(ctx, pool, schema, migs)
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		require.NoError(t, errs[i])
		total += applied[i]
	}
	require.Equal(t, 2, total)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM widgets`).Scan(&n))
	require.Equal(t, 1, n, "the seed ran once")

	again, err := pgstore.Migrate(ctx, pool, schema, migs)
	require.NoError(t, err)
	require.Zero(t, again)
}

func TestMigrateRejectsBadFiles(t *testing.T) {
	t.Parallel()
	pool, schema := testenv.Postgres(t, "pgstore", nil)
	ctx := context.Background()
	_, err := pgstore.Migrate(ctx, pool, schema, fstest.MapFS{"create.up.sql": {Data: []byte(`SELECT 1`)}})
	require.ErrorContains(t, err, "NNNN_name.up.sql")

	// A failing migration leaves nothing half-applied.
	_, err = pgstore.Migrate(ctx, pool, schema, fstest.MapFS{
		"0001_ok.up.sql":  {Data: []byte(`CREATE TABLE a (id int);`)},
		"0002_bad.up.sql": {Data: []byte(`CREATE TABLE b (id int); SELECT no_such_column FROM a;`)},
	})
	require.ErrorContains(t, err, "0002_bad")
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('b') IS NOT NULL`).Scan(&exists))
	require.False(t, exists)
}

func TestConfigValidateHidesPassword(t *testing.T) {
	t.Parallel()
	err := pgstore.Config{DSN: "postgres://u:s3cret@host:notaport/db", MaxConns: 1}.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

// Unavailable tells a database that cannot be reached or dropped the
// connection from a statement that failed.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, refused := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/sylk?sslmode=disable&connect_timeout=5")
	require.Error(t, refused)

	// A connection the server terminates, as when it is stopped.
	conn, err := pgx.Connect(ctx, testenv.PostgresDSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	admin, err := pgx.Connect(ctx, testenv.PostgresDSN())
	require.NoError(t, err)
	defer admin.Close(ctx)
	var terminated bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, conn.PgConn().PID()).Scan(&terminated))
	require.True(t, terminated)
	_, dropped := conn.Exec(ctx, `SELECT 1`)
	require.Error(t, dropped)
	_, failed := admin.Exec(ctx, `SELECT 1/0`)
	require.Error(t, failed)

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"connection terminated", fmt.Errorf("load session: %w", dropped), true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"server starting", &pgconn.PgError{Code: "57P03"}, true},
		{"statement failed", failed, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"other", errors.New("decode row"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, pgstore.Unavailable(tt.err), "%s: %v", tt.name, tt.err)
	}
}

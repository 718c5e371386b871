package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

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

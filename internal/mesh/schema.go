package mesh

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/pgstore"
)

// OpenSchema makes sure the database exists, opens a pool on the schema and
// applies the schema's migrations.
func OpenSchema(ctx context.Context, cfg pgstore.Config, schemaPrefix, schema string) (*pgxpool.Pool, error) {
	if err := pgstore.EnsureDatabase(ctx, cfg.DSN); err != nil {
		return nil, err
	}
	name := Schema(schemaPrefix, schema)
	pool, err := pgstore.Open(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	if _, err := pgstore.Migrate(ctx, pool, name, migrations.FS(schema)); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// MigrateAll applies the migrations of every schema.
func MigrateAll(ctx context.Context, cfg pgstore.Config, schemaPrefix string, log *slog.Logger) error {
	for _, s := range Schemas {
		pool, err := OpenSchema(ctx, cfg, schemaPrefix, s)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", s, err)
		}
		pool.Close()
		log.Info("migrated", slog.String("schema", Schema(schemaPrefix, s)))
	}
	return nil
}

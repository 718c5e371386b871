package agenteval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
)

// The stores a local mesh uses when none are named: the services on this
// machine, as the tests find them.
const (
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
)

// LocalMeshConfig configures a mesh started in this process.
type LocalMeshConfig struct {
	// PostgresDSN, RedisURL and NATSURL are the stores (the defaults above
	// when empty). The mesh keeps to a schema prefix, a key prefix and a
	// subject prefix of its own in them, and Close removes what it made.
	PostgresDSN, RedisURL, NATSURL string
	// Model is the model every agent uses.
	Model ModelConfig
	// Flags are more of the mesh's flags (sylk dev's).
	Flags []string
	// Log receives the mesh's logs (warnings and errors); nil drops them.
	Log io.Writer
}

func (c LocalMeshConfig) withDefaults() LocalMeshConfig {
	if c.PostgresDSN == "" {
		c.PostgresDSN = DefaultPostgresDSN
	}
	if c.RedisURL == "" {
		c.RedisURL = DefaultRedisURL
	}
	if c.NATSURL == "" {
		c.NATSURL = DefaultNATSURL
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// LocalMesh is the whole mesh running in this process.
type LocalMesh struct {
	cfg                            LocalMeshConfig
	dev                            *mesh.Dev
	stop                           context.CancelFunc
	schemaPrefix, busPrefix, redis string
}

// StartLocalMesh starts every service and the gateway in this process, as
// sylk dev does, on fresh prefixes of the stores.
func StartLocalMesh(ctx context.Context, cfg LocalMeshConfig) (*LocalMesh, error) {
	cfg = cfg.withDefaults()
	id := newID()
	m := &LocalMesh{cfg: cfg, schemaPrefix: "eval" + id + "_", busPrefix: "eval" + id, redis: "sylkeval:" + id}
	var dc mesh.DevConfig
	fs := flag.NewFlagSet("mesh", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dc.RegisterFlags(fs)
	args := append([]string{
		"-postgres.dsn", cfg.PostgresDSN, "-postgres.schema-prefix", m.schemaPrefix,
		"-redis.url", cfg.RedisURL, "-redis.prefix", m.redis,
		"-nats.url", cfg.NATSURL, "-nats.prefix", m.busPrefix,
		"-gateway.listen-address", "127.0.0.1:0",
		"-log.level", "warn",
		// The tasks' checkouts are in the temporary directory (Flags may
		// name other roots).
		"-librarian.allowed-roots", os.TempDir(),
	}, cfg.Model.MeshFlags()...)
	if err := fs.Parse(append(args, cfg.Flags...)); err != nil {
		return nil, fmt.Errorf("mesh flags: %w", err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	dev, err := mesh.StartDev(runCtx, dc, cfg.Log)
	if err != nil {
		stop()
		return nil, errors.Join(fmt.Errorf("start the mesh: %w", err), m.clean(ctx))
	}
	m.dev, m.stop = dev, stop
	return m, nil
}

// URL is the gateway's REST base URL.
func (m *LocalMesh) URL() string { return m.dev.GatewayURL }

// Key is an API key of the mesh's admin.
func (m *LocalMesh) Key() string { return m.dev.AdminKey }

// Close stops the mesh and removes its schemas, streams and keys.
func (m *LocalMesh) Close(ctx context.Context) error {
	m.stop()
	err := m.dev.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return errors.Join(err, m.clean(ctx))
}

// clean removes what a mesh on the prefixes made in the stores.
func (m *LocalMesh) clean(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return errors.Join(m.dropSchemas(ctx), m.deleteStreams(ctx), m.deleteKeys(ctx))
}

func (m *LocalMesh) dropSchemas(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, m.cfg.PostgresDSN)
	if err != nil {
		return fmt.Errorf("drop the mesh's schemas: %w", err)
	}
	defer conn.Close(ctx)
	var errs []error
	for _, s := range mesh.Schemas {
		name := pgx.Identifier{mesh.Schema(m.schemaPrefix, s)}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (m *LocalMesh) deleteStreams(ctx context.Context) error {
	bus, err := natsx.Connect(ctx, natsx.Config{URL: m.cfg.NATSURL, Prefix: m.busPrefix}, logx.Discard(), "sylk-eval-cleanup")
	if err != nil {
		return fmt.Errorf("delete the mesh's streams: %w", err)
	}
	defer bus.Conn.Close()
	prefix := strings.ToUpper(m.busPrefix) + "_"
	var errs []error
	names := bus.JS.StreamNames(ctx)
	for n := range names.Name() {
		if strings.HasPrefix(n, prefix) {
			if err := bus.JS.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				errs = append(errs, fmt.Errorf("delete stream %s: %w", n, err))
			}
		}
	}
	return errors.Join(append(errs, names.Err())...)
}

func (m *LocalMesh) deleteKeys(ctx context.Context) error {
	rc, err := redisx.Open(ctx, redisx.Config{URL: m.cfg.RedisURL, Prefix: m.redis})
	if err != nil {
		return fmt.Errorf("delete the mesh's keys: %w", err)
	}
	defer rc.Close()
	iter := rc.Scan(ctx, 0, m.redis+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("list the mesh's keys: %w", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rc.Del(ctx, keys[:n]...).Err(); err != nil {
			return fmt.Errorf("delete the mesh's keys: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}

// newID is a short random lower-case id.
func newID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

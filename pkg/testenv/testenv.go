// Package testenv gives each test its own slice of the real PostgreSQL, Redis
// and NATS: a fresh schema, a key prefix and a subject/stream prefix, all
// removed when the test ends. Services are found through SYLK_TEST_* variables
// with localhost defaults; an unreachable service fails the test, naming the
// variable, and never skips it.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/redisx"
)

// Environment variables and their defaults.
const (
	EnvPostgres = "SYLK_TEST_POSTGRES_DSN"
	EnvRedis    = "SYLK_TEST_REDIS_URL"
	EnvNATS     = "SYLK_TEST_NATS_URL"

	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedis    = "redis://127.0.0.1:6379/0"
	DefaultNATS     = "nats://127.0.0.1:4222"
)

func env(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

// PostgresDSN is the DSN tests use.
func PostgresDSN() string { return env(EnvPostgres, DefaultPostgres) }

// RedisURL is the Redis URL tests use.
func RedisURL() string { return env(EnvRedis, DefaultRedis) }

// NATSURL is the NATS URL tests use.
func NATSURL() string { return env(EnvNATS, DefaultNATS) }

// ID returns a short random lower-case id, unique per call.
func ID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// Schema creates an empty schema named after base and dropped at cleanup.
func Schema(t testing.TB, base string) string {
	t.Helper()
	name := strings.ToLower(base) + "_t" + ID()
	conn, err := pgx.Connect(ctx(t), PostgresDSN())
	if err != nil {
		t.Fatalf("PostgreSQL unreachable (set %s; default %s): %v", EnvPostgres, DefaultPostgres, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx(t), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() { DropSchema(t, name) })
	return name
}

// DropSchema removes a schema and everything in it.
func DropSchema(t testing.TB, name string) {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(c, PostgresDSN())
	if err != nil {
		t.Errorf("drop schema %s: %v", name, err)
		return
	}
	defer conn.Close(c)
	if _, err := conn.Exec(c, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", name, err)
	}
}

// Checkpoint asks PostgreSQL for a checkpoint before a benchmark measures,
// so that it starts from the steady state of a server that has run for a
// while. A checkpoint recycles the write-ahead log segments it no longer
// needs as the next ones; without recycled segments, the server creates
// each new 16 MB segment when the log reaches it, writing it out in full
// while it holds the log's write lock, and every commit then waits (50 to
// 110 ms on the development machine, every few seconds under load). A
// server whose role may not checkpoint is measured as it is.
func Checkpoint(t testing.TB) {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), PostgresDSN())
	if err != nil {
		t.Fatalf("PostgreSQL unreachable (set %s; default %s): %v", EnvPostgres, DefaultPostgres, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx(t), "CHECKPOINT"); err != nil {
		t.Logf("no checkpoint before measuring (%v): new write-ahead log segments may stall commits", err)
	}
}

// Postgres returns a pool on a fresh schema with migrations applied. The
// pool is closed and the schema dropped at cleanup.
func Postgres(t testing.TB, base string, migrations fs.FS) (*pgxpool.Pool, string) {
	t.Helper()
	schema := Schema(t, base)
	pool, err := pgstore.Open(ctx(t), pgstore.Config{DSN: PostgresDSN(), MaxConns: 8}, schema)
	if err != nil {
		t.Fatalf("PostgreSQL unreachable (set %s): %v", EnvPostgres, err)
	}
	t.Cleanup(pool.Close) // runs before the schema drop (cleanups run last-in first-out)
	if migrations != nil {
		if _, err := pgstore.Migrate(ctx(t), pool, schema, migrations); err != nil {
			t.Fatalf("migrate %s: %v", schema, err)
		}
	}
	return pool, schema
}

// Redis returns a client whose keys live under a fresh prefix, deleted at cleanup.
func Redis(t testing.TB) *redisx.Client {
	t.Helper()
	prefix := "sylktest:" + ID()
	c, err := redisx.Open(ctx(t), redisx.Config{URL: RedisURL(), Prefix: prefix})
	if err != nil {
		t.Fatalf("Redis unreachable (set %s; default %s): %v", EnvRedis, DefaultRedis, err)
	}
	t.Cleanup(func() {
		c2, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(c2, 0, prefix+":*", 500).Iterator()
		for iter.Next(c2) {
			c.Del(c2, iter.Val())
		}
		_ = c.Close()
	})
	return c
}

// NATSPrefix returns a fresh subject prefix.
func NATSPrefix() string { return "t" + ID() }

// NATS returns a bus whose subjects and streams use a fresh prefix; its
// streams are deleted at cleanup.
func NATS(t testing.TB) *natsx.Bus {
	t.Helper()
	cfg := natsx.Config{URL: NATSURL(), Prefix: NATSPrefix()}
	b, err := natsx.Connect(ctx(t), cfg, logx.Discard(), t.Name())
	if err != nil {
		t.Fatalf("NATS unreachable (set %s; default %s): %v", EnvNATS, DefaultNATS, err)
	}
	t.Cleanup(func() {
		CleanupStreams(t, b)
		b.Conn.Close()
	})
	return b
}

// CleanupStreams deletes every stream named with b's prefix.
func CleanupStreams(t testing.TB, b *natsx.Bus) {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := strings.ToUpper(b.Prefix()) + "_"
	names := b.JS.StreamNames(c)
	for n := range names.Name() {
		if strings.HasPrefix(n, prefix) {
			if err := b.JS.DeleteStream(c, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("delete stream %s: %v", n, err)
			}
		}
	}
}

// Consume reads what cons holds, batch messages at a time, decoding each into
// a new M and handing it to add, until done reports true after a batch. It
// fails t after wait, with msgAndArgs (a format and its arguments) if given.
func Consume[T any, M interface {
	*T
	proto.Message
}](t testing.TB, cons jetstream.Consumer, batch int, wait time.Duration, add func(M), done func() bool, msgAndArgs ...any) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for {
		b, err := cons.FetchNoWait(batch)
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for msg := range b.Messages() {
			m := M(new(T))
			if err := proto.Unmarshal(msg.Data(), m); err != nil {
				t.Fatalf("decode %T: %v", m, err)
			}
			add(m)
		}
		if done() {
			return
		}
		select {
		case <-deadline:
			why := ""
			if len(msgAndArgs) > 0 {
				why = ": " + fmt.Sprintf(fmt.Sprint(msgAndArgs[0]), msgAndArgs[1:]...)
			}
			t.Fatalf("consumed messages did not meet the condition within %s%s", wait, why)
		case <-tick.C:
		}
	}
}

// EnvRequireTools, when set (CI sets it), turns a missing external program a
// test needs into a failure instead of a skip, so CI never passes by skipping.
const EnvRequireTools = "SYLK_TEST_REQUIRE_SERVICES"

// MissingTool skips the test because a program it drives (an interpreter, a
// test runner) is not installed, or fails it when EnvRequireTools is set.
func MissingTool(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(EnvRequireTools) != "" {
		t.Fatalf("%s is required (%s is set): install it", what, EnvRequireTools)
	}
	t.Skipf("%s is not installed on this machine", what)
}

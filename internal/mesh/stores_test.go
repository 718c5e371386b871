package mesh

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/testenv"
)

// The stores the tests run against take clients without credentials (trust
// authentication, no password, no token): the check names each.
func TestAnonymousStores(t *testing.T) {
	t.Parallel()
	common := Common{}
	common.Postgres.DSN = testenv.PostgresDSN()
	common.Redis.URL = testenv.RedisURL()
	common.NATS.URL = testenv.NATSURL()
	require.Equal(t, []string{"PostgreSQL", "Redis", "NATS"}, anonymousStores(t.Context(), common, Guide))
	require.Equal(t, []string{"PostgreSQL"}, anonymousStores(t.Context(), common, Gateway), "the gateway uses only PostgreSQL")
	err := checkStores(t.Context(), common, Worker)
	require.ErrorContains(t, err, "PostgreSQL, Redis, NATS accept clients without credentials")
	require.ErrorContains(t, err, "-stores.allow-anonymous")
	common.Stores.AllowAnonymous = true
	require.NoError(t, checkStores(t.Context(), common, Worker))

	// A server that wants the token in its URL is not open, nor is one
	// that cannot be reached.
	ns, withToken, err := natsx.RunEmbedded(t.TempDir())
	require.NoError(t, err)
	defer ns.Shutdown()
	u, err := url.Parse(withToken)
	require.NoError(t, err)
	require.NotNil(t, u.User)
	require.False(t, natsAnonymous(withToken))
	require.False(t, natsAnonymous("nats://127.0.0.1:1"))

	// Servers named without a scheme, or beside one that cannot be
	// reached, are still found open.
	nu, err := url.Parse(testenv.NATSURL())
	require.NoError(t, err)
	require.True(t, natsAnonymous(nu.Host))
	require.True(t, natsAnonymous("nats://127.0.0.1:1, "+nu.Host))
	// PostgreSQL is open whatever database or user the configuration names
	// (the check also tries postgres), and whatever stricter options it
	// asks of the client.
	pu, err := url.Parse(testenv.PostgresDSN())
	require.NoError(t, err)
	pu.Path = "/not_made_yet"
	require.True(t, pgAnonymous(t.Context(), pu.String()))
	pu.User = url.User("no_such_role")
	require.True(t, pgAnonymous(t.Context(), pu.String()))
	require.False(t, redisAnonymous(t.Context(), "redis://127.0.0.1:1/0"))
	require.False(t, pgAnonymous(t.Context(), "postgres://nobody@127.0.0.1:1/x?connect_timeout=1"))
}

// sylk serve refuses to run beside stores that take anyone.
func TestServeRefusesAnonymousStores(t *testing.T) {
	t.Setenv("SYLK_STORES_ALLOW_ANONYMOUS", "false")
	var stderr strings.Builder
	err := Serve(t.Context(), Academic, []string{
		"-internal.key", "a key of at least thirty-two bytes for this test",
		"-postgres.dsn", testenv.PostgresDSN(), "-redis.url", testenv.RedisURL(), "-nats.url", testenv.NATSURL(),
		"-grpc.listen-address", "127.0.0.1:0", "-http.listen-address", "", "-log.level", "error",
	}, &stderr)
	require.ErrorContains(t, err, "PostgreSQL, Redis, NATS accept clients without credentials")
}

// The worker hides its key files, the file a symlinked one resolves to,
// the whole directory of a mounted Secret, and the PostgreSQL client's
// credential files, wherever the configuration, the environment or the
// defaults put them.
func TestHideSecretFiles(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	write := func(p string) string {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte("secret"), 0o600))
		return p
	}
	conf, real := filepath.Join(dir, "conf"), filepath.Join(dir, "real")
	realKey := write(filepath.Join(real, "internal.key"))
	require.NoError(t, os.MkdirAll(conf, 0o700))
	require.NoError(t, os.Symlink("../real/internal.key", filepath.Join(conf, "internal.key")))
	// A mounted Secret: its files are links through ..data.
	secret := filepath.Join(dir, "secret")
	write(filepath.Join(secret, "..2026_11_26", "anthropic"))
	require.NoError(t, os.Symlink("..2026_11_26", filepath.Join(secret, "..data")))
	require.NoError(t, os.Symlink("..data/anthropic", filepath.Join(secret, "anthropic")))

	home := filepath.Join(dir, "home")
	t.Setenv("HOME", home)
	t.Setenv("PGPASSFILE", "")
	t.Setenv("PGSERVICEFILE", "")
	t.Setenv("PGSSLKEY", "")
	pgpass := write(filepath.Join(home, ".pgpass"))
	clientKey := write(filepath.Join(home, ".postgresql", "postgresql.key"))
	service := write(filepath.Join(dir, "pg", "services"))

	var common Common
	common.Internal.KeyFile = filepath.Join(conf, "internal.key")
	common.LLM.Anthropic.APIKeyFile = filepath.Join(secret, "anthropic")
	common.Postgres.DSN = "host=db user=sylk servicefile='" + service + "' dbname=sylk"
	var sc ServiceConfigs
	hideSecretFiles(&sc, common)
	require.ElementsMatch(t, []string{common.Internal.KeyFile, realKey,
		common.LLM.Anthropic.APIKeyFile, filepath.Join(secret, "..2026_11_26", "anthropic"), secret,
		pgpass, service, clientKey}, sc.Worker.Tools.ConfineHidden)
}

func TestDSNParams(t *testing.T) {
	t.Parallel()
	require.Equal(t, map[string]string{"host": "db", "passfile": "/a b/p", "sslkey": "/k", "dbname": "x"},
		pgstore.DSNParams(`host=db passfile='/a b/p'  sslkey=/k dbname=x`))
	require.Equal(t, map[string]string{"sslkey": "/k", "sslmode": "require"},
		pgstore.DSNParams("postgres://u:p@db/x?sslkey=/k&sslmode=require"))
}

// A pooler in front of PostgreSQL may answer "no such database" before it
// asks for a password: that is not a server that takes anyone.
func TestPoolerRefusalIsNotOpen(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				be := pgproto3.NewBackend(conn, conn)
				msg, err := be.ReceiveStartupMessage()
				if _, ok := msg.(*pgproto3.SSLRequest); ok && err == nil {
					_, _ = conn.Write([]byte("N"))
					_, err = be.ReceiveStartupMessage()
				}
				if err != nil {
					return
				}
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "3D000", Message: "route for 'postgres.postgres' is not found"})
				_ = be.Flush()
			}()
		}
	}()
	require.False(t, pgAnonymous(t.Context(), "postgres://sylk:secret@"+ln.Addr().String()+"/sylk?sslmode=disable"))
}

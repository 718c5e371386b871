package mesh

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/natsx"
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

// The worker hides the directories of its key files, the one a symlinked
// key file resolves to as well, and the PostgreSQL client's password file.
func TestHideSecretFiles(t *testing.T) {
	dir := t.TempDir()
	conf, real := filepath.Join(dir, "conf"), filepath.Join(dir, "real")
	require.NoError(t, os.Mkdir(conf, 0o700))
	require.NoError(t, os.Mkdir(real, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(real, "internal.key"), []byte("k"), 0o600))
	require.NoError(t, os.Symlink("../real/internal.key", filepath.Join(conf, "internal.key")))
	pgpass := filepath.Join(dir, "home", ".pgpass")
	require.NoError(t, os.MkdirAll(filepath.Dir(pgpass), 0o700))
	require.NoError(t, os.WriteFile(pgpass, []byte("*:*:*:sylk:pw\n"), 0o600))
	t.Setenv("PGPASSFILE", pgpass)
	t.Setenv("PGSERVICEFILE", filepath.Join(dir, "none"))
	t.Setenv("PGSSLKEY", "")

	var common Common
	common.Internal.KeyFile = filepath.Join(conf, "internal.key")
	var sc ServiceConfigs
	hideSecretFiles(&sc, common)
	realDir, err := filepath.EvalSymlinks(real)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{conf, realDir, pgpass}, sc.Worker.Tools.ConfineHidden)
}

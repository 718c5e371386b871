package mesh

import (
	"net/url"
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

package mesh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/meshtls"
	"sylk.dev/sylk/pkg/meshtls/meshtlstest"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/redisx"
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
	require.Equal(t, []string{"PostgreSQL", "Redis", "NATS"}, anonymousStores(t.Context(), common, false))
	require.Equal(t, []string{"PostgreSQL", "Redis"}, anonymousStores(t.Context(), common, mustLookup(t, Gateway).rest), "the gateway uses no NATS")
	err := checkStores(t.Context(), common, mustLookup(t, Worker))
	require.ErrorContains(t, err, "PostgreSQL, Redis, NATS accept clients without credentials")
	require.ErrorContains(t, err, "-stores.allow-anonymous")
	common.Stores.AllowAnonymous = true
	require.NoError(t, checkStores(t.Context(), common, mustLookup(t, Worker)))

	// A server that wants the token in its URL is not open, nor is one
	// that cannot be reached.
	ns, withToken, err := natsx.RunEmbedded(t.TempDir())
	require.NoError(t, err)
	defer ns.Shutdown()
	u, err := url.Parse(withToken)
	require.NoError(t, err)
	require.NotNil(t, u.User)
	require.False(t, natsAnonymous(withToken, meshtls.StoreTLS{}))
	require.False(t, natsAnonymous("nats://127.0.0.1:1", meshtls.StoreTLS{}))

	// Servers named without a scheme, or beside one that cannot be
	// reached, are still found open.
	nu, err := url.Parse(testenv.NATSURL())
	require.NoError(t, err)
	require.True(t, natsAnonymous(nu.Host, meshtls.StoreTLS{}))
	require.True(t, natsAnonymous("nats://127.0.0.1:1, "+nu.Host, meshtls.StoreTLS{}))
	// PostgreSQL is open whatever database or user the configuration names
	// (the check also tries postgres), and whatever stricter options it
	// asks of the client.
	pu, err := url.Parse(testenv.PostgresDSN())
	require.NoError(t, err)
	pu.Path = "/not_made_yet"
	require.True(t, pgAnonymous(t.Context(), pu.String()))
	pu.User = url.User("no_such_role")
	require.True(t, pgAnonymous(t.Context(), pu.String()))
	require.False(t, redisAnonymous(t.Context(), "redis://127.0.0.1:1/0", meshtls.StoreTLS{}))
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

// storeFiles writes a store's certificate (for 127.0.0.1) under ca, and a
// client's certificate of the same authority.
func storeFiles(t *testing.T, ca *meshtlstest.CA) (server meshtlstest.Files, client meshtls.StoreTLS) {
	t.Helper()
	server = ca.Write(t, t.TempDir(), "127.0.0.1")
	c := ca.Write(t, t.TempDir(), "sylk-client")
	return server, meshtls.StoreTLS{CAFile: c.CA, CertFile: c.Cert, KeyFile: c.Key}
}

// runTLSNATS starts a NATS server speaking only TLS with files, asking for
// a client certificate when verify.
func runTLSNATS(t *testing.T, files meshtlstest.Files, verify bool) string {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: files.Cert, KeyFile: files.Key, CaFile: files.CA, Verify: verify})
	require.NoError(t, err)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		TLS: true, TLSVerify: verify, TLSConfig: tc, TLSTimeout: 5})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// A NATS server with a certificate of a private authority is reached with
// -nats.tls-ca-file; one that asks for a client certificate takes the one of
// -nats.tls-cert-file, and does not count as open to anyone.
func TestNATSOverTLS(t *testing.T) {
	t.Parallel()
	ca := meshtlstest.NewCA(t, "stores")
	files, client := storeFiles(t, ca)
	connect := func(url string, tlsFiles meshtls.StoreTLS) error {
		bus, err := natsx.Connect(t.Context(), natsx.Config{URL: url, Prefix: "tls", TLS: tlsFiles}, logx.Discard(), "tls-test")
		if err == nil {
			bus.Close()
		}
		return err
	}
	open := runTLSNATS(t, files, false)
	require.NoError(t, connect(open, meshtls.StoreTLS{CAFile: client.CAFile}))
	require.ErrorContains(t, connect(open, meshtls.StoreTLS{}), "tls", "plaintext to a TLS-only server")
	rogue := meshtlstest.NewCA(t, "rogue").Write(t, t.TempDir(), "x")
	require.ErrorContains(t, connect(open, meshtls.StoreTLS{CAFile: rogue.CA}), "certificate signed by unknown authority")
	require.True(t, natsAnonymous(open, meshtls.StoreTLS{CAFile: client.CAFile}), "TLS without a client certificate is no credential")

	verifying := runTLSNATS(t, files, true)
	require.NoError(t, connect(verifying, client))
	require.Error(t, connect(verifying, meshtls.StoreTLS{CAFile: client.CAFile}), "no client certificate")
	require.False(t, natsAnonymous(verifying, client), "the client certificate is a credential")
}

// runTLSRedis starts a Redis server of its own that speaks only TLS with
// files, asking for a client certificate when verify, and returns its URL.
func runTLSRedis(t *testing.T, files meshtlstest.Files, verify bool) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is installed with the local Redis (.ci/run)")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close())
	auth := "no"
	if verify {
		auth = "yes"
	}
	cmd := exec.Command(bin, "--port", "0", "--tls-port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-cert-file", files.CA,
		"--tls-auth-clients", auth)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(readFileT(t, files.CA))
	require.Eventually(t, func() bool {
		c, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: "127.0.0.1"})
		if err == nil {
			_ = c.Close()
		}
		return err == nil || !strings.Contains(err.Error(), "connection refused")
	}, 10*time.Second, 20*time.Millisecond, "redis-server listens on %s", port)
	return "redis://127.0.0.1:" + port + "/0"
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// Redis likewise: -redis.tls-ca-file and -redis.tls-cert-file.
func TestRedisOverTLS(t *testing.T) {
	t.Parallel()
	ca := meshtlstest.NewCA(t, "stores")
	files, client := storeFiles(t, ca)
	ping := func(url string, tlsFiles meshtls.StoreTLS) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		rc, err := redisx.Open(ctx, redisx.Config{URL: url, Prefix: "tls", TLS: tlsFiles})
		if err == nil {
			_ = rc.Close()
		}
		return err
	}
	open := runTLSRedis(t, files, false)
	require.NoError(t, ping(open, meshtls.StoreTLS{CAFile: client.CAFile}))
	rogue := meshtlstest.NewCA(t, "rogue").Write(t, t.TempDir(), "x")
	require.ErrorContains(t, ping(open, meshtls.StoreTLS{CAFile: rogue.CA}), "certificate signed by unknown authority")
	require.True(t, redisAnonymous(t.Context(), open, meshtls.StoreTLS{CAFile: client.CAFile}), "TLS without a client certificate is no credential")

	verifying := runTLSRedis(t, files, true)
	require.NoError(t, ping(verifying, client))
	require.Error(t, ping(verifying, meshtls.StoreTLS{CAFile: client.CAFile}), "no client certificate")
	require.False(t, redisAnonymous(t.Context(), verifying, client), "the client certificate is a credential")

	_, err := meshtls.StoreTLS{CertFile: client.CertFile}.ClientConfig("")
	require.Error(t, err)
	require.ErrorContains(t, redisx.Config{URL: open, Prefix: "x", TLS: meshtls.StoreTLS{CertFile: client.CertFile}}.Validate(),
		"redis.tls-cert-file and redis.tls-key-file: set both or neither")
}

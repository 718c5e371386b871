package meshtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/meshtls/meshtlstest"
)

func open(t *testing.T, f meshtlstest.Files) *Material {
	t.Helper()
	m, err := Open(Config{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA, Refresh: time.Hour}, nil)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// serve starts a health server over m's server credentials.
func serve(t *testing.T, m *Material) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(m.ServerCredentials()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// check calls the health service at target over creds.
func check(t *testing.T, target string, creds credentials.TransportCredentials) error {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func refused(t *testing.T, err error, why string) {
	t.Helper()
	require.Error(t, err, why)
	require.Equal(t, codes.Unavailable, status.Code(err), "%s: %v", why, err)
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := meshtlstest.NewCA(t, "mesh")
	server := open(t, ca.Write(t, t.TempDir(), "127.0.0.1", "guide"))
	addr := serve(t, server)

	// A service of the mesh, with its own certificate of the same authority.
	client := open(t, ca.Write(t, t.TempDir(), "orchestrator"))
	require.NoError(t, check(t, addr, client.ClientCredentials()))

	refused(t, check(t, addr, insecure.NewCredentials()), "plaintext")

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	refused(t, check(t, addr, credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})),
		"TLS without a client certificate")

	// A certificate of another authority, even from a client that trusts
	// the server's.
	rogue := meshtlstest.NewCA(t, "rogue")
	dir := t.TempDir()
	f := rogue.Write(t, dir, "orchestrator")
	require.NoError(t, os.WriteFile(f.CA, ca.PEM, 0o600))
	refused(t, check(t, addr, open(t, f).ClientCredentials()), "a client certificate of another authority")

	// A server whose certificate does not name the address dialled.
	other := serve(t, open(t, ca.Write(t, t.TempDir(), "guide")))
	err := check(t, other, client.ClientCredentials())
	refused(t, err, "a server certificate for another name")
	require.ErrorContains(t, err, "cannot validate certificate for 127.0.0.1")

	// Nor one of another authority, whatever it names.
	impostor := serve(t, open(t, rogue.Write(t, t.TempDir(), "127.0.0.1")))
	refused(t, check(t, impostor, client.ClientCredentials()), "a server certificate of another authority")
}

// TestRotation: files changed in place are taken at the next reading, for
// new connections; unusable files leave the last good ones in use.
func TestRotation(t *testing.T) {
	t.Parallel()
	old := meshtlstest.NewCA(t, "mesh 1")
	dir := t.TempDir()
	server := open(t, old.Write(t, dir, "127.0.0.1"))
	addr := serve(t, server)
	oldClient := open(t, old.Write(t, t.TempDir(), "client"))
	require.NoError(t, check(t, addr, oldClient.ClientCredentials()))

	next := meshtlstest.NewCA(t, "mesh 2")
	next.Write(t, dir, "127.0.0.1")
	server.reload()
	newClient := open(t, next.Write(t, t.TempDir(), "client"))
	require.NoError(t, check(t, addr, newClient.ClientCredentials()))
	refused(t, check(t, addr, oldClient.ClientCredentials()), "a certificate of the authority rotated out")

	// A key that does not parse: the last good material stays.
	require.NoError(t, os.WriteFile(dir+"/tls.key", []byte("-----BEGIN PRIVATE KEY-----\nsecret\n"), 0o600))
	server.reload()
	require.NoError(t, check(t, addr, newClient.ClientCredentials()))
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ca := meshtlstest.NewCA(t, "mesh")
	f := ca.Write(t, t.TempDir(), "guide")

	_, err := Open(Config{CertFile: f.Cert, KeyFile: f.Key, Refresh: time.Minute}, nil)
	require.ErrorContains(t, err, "set all three or none")
	require.NoError(t, Config{}.Validate())
	require.False(t, Config{}.Enabled())

	const secret = "do not print me"
	require.NoError(t, os.WriteFile(f.Key, []byte(secret), 0o600))
	_, err = Open(Config{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA, Refresh: time.Minute}, nil)
	require.ErrorContains(t, err, "are not a certificate and its key")
	require.NotContains(t, err.Error(), secret)

	g := ca.Write(t, t.TempDir(), "guide")
	require.NoError(t, os.WriteFile(g.CA, []byte("no authority here"), 0o600))
	_, err = Open(Config{CertFile: g.Cert, KeyFile: g.Key, CAFile: g.CA, Refresh: time.Minute}, nil)
	require.ErrorContains(t, err, "holds no PEM certificate")
}

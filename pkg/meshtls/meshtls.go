// Package meshtls secures the gRPC calls between the services of a
// deployment with mutual TLS: every service serves with its certificate and
// asks each caller for one, and every service dials its peers checking theirs
// and presenting its own, all against the deployment's certificate authority.
//
// The files are read again every Config.Refresh, so that certificates
// rotated in place (a mounted Kubernetes Secret, say) are used without a
// restart; a file that cannot be read or parsed leaves the last good
// material in use and is logged without its contents.
package meshtls

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"

	"sylk.dev/sylk/pkg/logx"
)

// Config names the files. All three or none.
type Config struct {
	CertFile string
	KeyFile  string
	CAFile   string
	Refresh  time.Duration
}

// RegisterFlags registers -tls.*.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "tls.cert-file", "", "PEM certificate (chain) of this service for gRPC between services; with -tls.key-file and -tls.ca-file every service serves and dials its peers over mutual TLS (empty: plaintext)")
	fs.StringVar(&c.KeyFile, "tls.key-file", "", "PEM private key of -tls.cert-file (hidden from task commands)")
	fs.StringVar(&c.CAFile, "tls.ca-file", "", "PEM certificate authorities that signed the services' certificates: peers and callers must present one they signed")
	fs.DurationVar(&c.Refresh, "tls.refresh", time.Minute, "how often the TLS files are read again, so that rotated certificates are used")
}

// Enabled reports whether TLS is configured.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Validate checks that the files are named together.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return errors.New("tls.cert-file, tls.key-file and tls.ca-file: set all three or none")
	}
	if c.Refresh <= 0 {
		return errors.New("tls.refresh: must be positive")
	}
	return nil
}

// material is what the files held when last read successfully.
type material struct {
	cert  *tls.Certificate
	roots *x509.CertPool
	// raw are the files' contents, to tell a change.
	raw [3][]byte
}

// Material holds the current certificate and authorities and keeps them
// current until Close.
type Material struct {
	cfg  Config
	log  *slog.Logger
	cur  atomic.Pointer[material]
	stop context.CancelFunc
	done sync.WaitGroup
}

// Open reads the files, failing when they do not make a usable key pair and
// authority, and keeps reading them every cfg.Refresh.
func Open(cfg Config, log *slog.Logger) (*Material, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("meshtls: no files configured")
	}
	if log == nil {
		log = logx.Discard()
	}
	m := &Material{cfg: cfg, log: log.With(logx.KeyComponent, "tls")}
	first, err := load(cfg, nil)
	if err != nil {
		return nil, err
	}
	m.cur.Store(first)
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.done.Go(func() { m.watch(ctx) })
	return m, nil
}

// Close stops reading the files.
func (m *Material) Close() {
	m.stop()
	m.done.Wait()
}

func (m *Material) watch(ctx context.Context) {
	t := time.NewTicker(m.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.reload()
	}
}

// reload reads the files again and takes them when they changed and are
// usable.
func (m *Material) reload() {
	old := m.cur.Load()
	next, err := load(m.cfg, old)
	switch {
	case err != nil:
		m.log.Warn("TLS files not taken; the last good ones stay in use", logx.Err(err))
	case next != old:
		m.cur.Store(next)
		m.log.Info("TLS files changed: new certificate in use", slog.Time("not_after", next.cert.Leaf.NotAfter))
	}
}

// load reads the files; it returns old when nothing changed.
func load(cfg Config, old *material) (*material, error) {
	var raw [3][]byte
	for i, f := range []string{cfg.CertFile, cfg.KeyFile, cfg.CAFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		raw[i] = b
	}
	if old != nil && bytes.Equal(raw[0], old.raw[0]) && bytes.Equal(raw[1], old.raw[1]) && bytes.Equal(raw[2], old.raw[2]) {
		return old, nil
	}
	// Errors name the files, never their contents.
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("tls: %s and %s are not a certificate and its key", cfg.CertFile, cfg.KeyFile)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw[2]) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", cfg.CAFile)
	}
	return &material{cert: &cert, roots: roots, raw: raw}, nil
}

// verify checks a peer's chain against the current authorities, for use.
func (m *Material) verify(cs tls.ConnectionState, name string, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         m.cur.Load().roots,
		Intermediates: inter,
		DNSName:       name,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	return err
}

// ServerConfig is the TLS configuration a service serves with: its current
// certificate, and a certificate from every caller that the current
// authorities signed for client use.
func (m *Material) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
		// Checked in VerifyConnection against the authorities of the
		// moment, which a fixed ClientCAs pool would not follow.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return m.verify(cs, "", x509.ExtKeyUsageClientAuth)
		},
	}
}

// ClientConfig is the TLS configuration a service dials a peer named
// serverName with (a host name or an IP address): the peer's certificate
// must be the current authorities' for that name, and the service presents
// its own current certificate.
func (m *Material) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
		// The chain and the name are checked in VerifyConnection, against
		// the authorities of the moment; nothing is skipped. The name is
		// the one dialled, not the connection's, which is empty for an IP
		// address (sent in no server name indication).
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return m.verify(cs, serverName, x509.ExtKeyUsageServerAuth)
		},
	}
}

// ServerCredentials are gRPC server credentials of ServerConfig.
func (m *Material) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(m.ServerConfig())
}

// ClientCredentials are gRPC client credentials: each connection is made
// with ClientConfig for the host of the address dialled.
func (m *Material) ClientCredentials() credentials.TransportCredentials {
	return clientCreds{TransportCredentials: credentials.NewTLS(m.ClientConfig("")), m: m}
}

type clientCreds struct {
	credentials.TransportCredentials
	m *Material
}

func (c clientCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	return credentials.NewTLS(c.m.ClientConfig(host)).ClientHandshake(ctx, authority, raw)
}

func (c clientCreds) Clone() credentials.TransportCredentials {
	return clientCreds{TransportCredentials: c.TransportCredentials.Clone(), m: c.m}
}

// StoreTLS names the files a client of a store (Redis, NATS) verifies the
// store with, and those it presents to a store that asks for a client
// certificate. They are read once, when the client is made.
type StoreTLS struct {
	CAFile, CertFile, KeyFile string
}

// RegisterFlags registers -<prefix>.tls-ca-file, -<prefix>.tls-cert-file
// and -<prefix>.tls-key-file for the store named store.
func (s *StoreTLS) RegisterFlags(fs *flag.FlagSet, prefix, store string) {
	fs.StringVar(&s.CAFile, prefix+".tls-ca-file", "", "PEM certificate authorities that signed "+store+"'s certificate (a private one); setting it or a client certificate connects over TLS")
	fs.StringVar(&s.CertFile, prefix+".tls-cert-file", "", "PEM client certificate to present to "+store+", with -"+prefix+".tls-key-file")
	fs.StringVar(&s.KeyFile, prefix+".tls-key-file", "", "PEM private key of -"+prefix+".tls-cert-file (hidden from task commands)")
}

// Enabled reports whether any file is set.
func (s StoreTLS) Enabled() bool { return s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" }

// Validate checks that a certificate comes with its key.
func (s StoreTLS) Validate(prefix string) error {
	if (s.CertFile == "") != (s.KeyFile == "") {
		return fmt.Errorf("%s.tls-cert-file and %s.tls-key-file: set both or neither", prefix, prefix)
	}
	return nil
}

// ClientConfig reads the files into a TLS configuration for a store at
// serverName (empty: the client sets it from the address). Without a CA
// file the system's authorities verify the store.
func (s StoreTLS) ClientConfig(serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if s.CAFile != "" {
		raw, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", s.CAFile)
		}
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			// Not err itself, which may quote the files.
			return nil, fmt.Errorf("tls: %s and %s are not a certificate and its key", s.CertFile, s.KeyFile)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

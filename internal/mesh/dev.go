package mesh

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/telemetry"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// DevConfig configures the whole mesh in one process.
type DevConfig struct {
	Common
	Services ServiceConfigs
	// NATSDataDir stores the embedded NATS server's JetStream data, used when
	// Common.NATS.URL is empty.
	NATSDataDir string
	// AdminKey is the bootstrap admin API key; generated when empty.
	AdminKey string
}

// RegisterFlags registers the dev flags. Defaults differ from Serve: services
// listen on free loopback ports and NATS is embedded unless -nats.url is set.
func (c *DevConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Common.RegisterFlags(fs)
	c.Services.RegisterFlags(fs, append([]string{Gateway}, Services...)...)
	setDefault(fs, "nats.url", "")
	setDefault(fs, "grpc.listen-address", "127.0.0.1:0")
	setDefault(fs, "http.listen-address", "127.0.0.1:0")
	setDefault(fs, "gateway.listen-address", "127.0.0.1:8080")
	setDefault(fs, "postgres.max-conns", "4")
	fs.StringVar(&c.NATSDataDir, "nats.data-dir", filepath.Join(os.TempDir(), "sylk-dev-nats-"+strconv.Itoa(os.Getuid())), "JetStream directory of the embedded NATS server (used when -nats.url is empty)")
}

// setDefault changes the default of a registered flag: its value and what
// -h prints. Unlike fs.Set it does not count the flag as given, so its
// SYLK_* variable still applies.
func setDefault(fs *flag.FlagSet, name, value string) {
	f := fs.Lookup(name)
	if err := f.Value.Set(value); err != nil {
		panic(fmt.Sprintf("dev default for -%s: %v", name, err))
	}
	f.DefValue = value
}

// Validate checks the configuration.
func (c DevConfig) Validate() error {
	common := c.Common
	if common.NATS.URL == "" {
		common.NATS.URL = "embedded"
	}
	return errors.Join(common.Validate(), c.Services.Validate(append([]string{Gateway}, Services...)...))
}

// Dev is a running mesh.
type Dev struct {
	// GatewayURL is the REST base URL, e.g. http://127.0.0.1:8080.
	GatewayURL string
	// AdminKey is an API key of the bootstrap admin.
	AdminKey string
	// MetricsURL serves every service's metrics, labelled by service.
	MetricsURL string
	// NATSURL is the NATS server in use.
	NATSURL string
	// ServiceAddrs is each service's gRPC address, by service name.
	ServiceAddrs map[string]string
	done         chan error
	cleanup      []func()
}

// Wait blocks until the mesh stops and returns why.
func (d *Dev) Wait() error {
	err := <-d.done
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
	return err
}

// StartDev starts every service and the gateway in this process. They stop
// when ctx is done; call Wait to release everything.
func StartDev(ctx context.Context, cfg DevConfig, logOut io.Writer) (_ *Dev, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Dev{done: make(chan error, 1)}
	defer func() {
		if err != nil {
			for i := len(d.cleanup) - 1; i >= 0; i-- {
				d.cleanup[i]()
			}
		}
	}()
	root := logx.New(logOut, cfg.Log, "dev", Version)
	// As in Serve: programs the mesh runs must not read it through /proc.
	if err := toolexec.ProtectProcess(); err != nil {
		return nil, err
	}
	shutdownTracing, err := telemetry.Setup(ctx, cfg.Telemetry, "sylk-dev", Version)
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, func() { _ = shutdownTracing(context.Background()) })
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	// The embedded server's URL is printed with its token, for the user's
	// own clients; a server given with credentials is printed without them.
	d.NATSURL = natsx.RedactURL(cfg.NATS.URL)
	if cfg.NATS.URL == "" {
		ns, url, err := natsx.RunEmbedded(cfg.NATSDataDir)
		if err != nil {
			return nil, err
		}
		d.cleanup = append(d.cleanup, func() { shutdownNATS(ns) })
		cfg.NATS.URL, d.NATSURL = url, url
	}

	reg := newRegistry()
	rc, err := redisx.Open(startCtx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, func() { _ = rc.Close() })

	// Direct consultations between services are checked against the
	// permission matrix and logged to the Archivalist (spec A-40..A-42).
	consultBus, err := natsx.Connect(startCtx, cfg.NATS, root, "sylk-dev-consult")
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, consultBus.Close)
	consultSink := consult.NewNATSSink(consultBus, topology.InboxSubject(consultBus, topology.AgentArchivalist), root, reg, consult.SinkConfig{})

	if open := anonymousStores(startCtx, cfg.Common, Guide); len(open) > 0 && !cfg.Stores.AllowAnonymous {
		root.Warn("stores accept clients without credentials: task commands can reach them (fine on your own machine; not for a shared one)",
			slog.String("stores", strings.Join(open, ", ")))
	}

	// The services sign the caller identities they pass to each other, under
	// the configured key or, by default, one made for this run.
	if !cfg.Internal.Configured() && !cfg.Internal.AllowUnsigned {
		cfg.Internal.Key = newKey()
	}
	signer, err := internalSigner(cfg.Common, root)
	if err != nil {
		return nil, err
	}
	srvTLS, dialTLS, closeTLS, err := meshTLS(cfg.Common, root)
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, closeTLS)

	// Bind every service's listener first, so each knows its peers' addresses.
	type pending struct {
		name string
		srv  *grpcserver.Server
		log  *slog.Logger
		reg  prometheus.Registerer
	}
	var ps []pending
	addrs := map[string]string{}
	for _, name := range Services {
		log := logx.New(logOut, cfg.Log, name, Version)
		sreg := prometheus.WrapRegistererWith(prometheus.Labels{"service": name}, reg)
		scfg := cfg.Server
		scfg.HTTPListenAddress = ""
		srv, err := grpcserver.New(scfg, log, sreg, reg,
			append(slices.Clone(srvTLS), consult.ServerOption(name, consultSink), grpcserver.WithSigner(signer))...)
		if err != nil {
			return nil, err
		}
		if err := srv.Listen(); err != nil {
			return nil, err
		}
		addrs[name] = srv.GRPCAddr()
		ps = append(ps, pending{name, srv, log, sreg})
	}
	d.ServiceAddrs = addrs
	cfg.Peers = PeerConfig{Guide: addrs[Guide], Architect: addrs[Architect], Orchestrator: addrs[Orchestrator],
		Librarian: addrs[Librarian], Archivalist: addrs[Archivalist], Academic: addrs[Academic]}
	peers, conns, closePeers, err := dialPeers(cfg.Peers, signer, dialTLS...)
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, closePeers)

	hideSecretFiles(&cfg.Services, cfg.Common)
	var units []unit
	for _, p := range ps {
		deps := app.Deps{Log: p.log, Registerer: p.reg, Redis: rc, Peers: peers}
		if hasSchema(p.name) {
			pool, err := OpenSchema(startCtx, cfg.Postgres, cfg.SchemaPrefix, p.name)
			if err != nil {
				return nil, err
			}
			d.cleanup = append(d.cleanup, pool.Close)
			deps.DB, deps.Schema = pool, Schema(cfg.SchemaPrefix, p.name)
		}
		bus, err := natsx.Connect(startCtx, cfg.NATS, p.log, "sylk-dev-"+p.name)
		if err != nil {
			return nil, err
		}
		d.cleanup = append(d.cleanup, bus.Close)
		deps.Bus = bus
		svc, err := newService(p.name, &cfg.Services, deps)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", p.name, err)
		}
		closeLLM, err := attachLLM(startCtx, p.name, svc, cfg.Common, deps, p.log)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", p.name, err)
		}
		d.cleanup = append(d.cleanup, closeLLM)
		svc.Register(p.srv.GRPC())
		units = append(units, unit{name: p.name, srv: p.srv, svc: svc})
	}

	authPool, err := OpenSchema(startCtx, cfg.Postgres, cfg.SchemaPrefix, "auth")
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, authPool.Close)
	key := cfg.AdminKey
	if key == "" {
		key = newKey()
	}
	gw, tenant, user := cfg.Services.Gateway, cfg.Services.Gateway.BootstrapTenant, cfg.Services.Gateway.BootstrapUser
	if err := gateway.EnsureBootstrapKey(startCtx, authPool, tenant, user, key); err != nil {
		return nil, err
	}
	d.AdminKey = key
	gwLog := logx.New(logOut, cfg.Log, Gateway, Version)
	g, err := gateway.New(gw, gwLog, authPool, conns, prometheus.WrapRegistererWith(prometheus.Labels{"service": Gateway}, reg))
	if err != nil {
		return nil, err
	}
	if err := g.Listen(); err != nil {
		return nil, err
	}
	d.GatewayURL = "http://" + g.Addr()
	maddr := cfg.Server.HTTPListenAddress
	if maddr == "" {
		maddr = "127.0.0.1:0"
	}
	metricsLn, err := net.Listen("tcp", maddr)
	if err != nil {
		return nil, fmt.Errorf("listen metrics %s: %w", maddr, err)
	}
	d.cleanup = append(d.cleanup, func() { _ = metricsLn.Close() })
	d.MetricsURL = "http://" + metricsLn.Addr().String() + "/metrics"

	go func() {
		eg, ectx := errgroup.WithContext(ctx)
		eg.Go(func() error { return runUnits(ectx, root, units...) })
		eg.Go(func() error { return g.Run(ectx) })
		eg.Go(func() error { return serveMetrics(ectx, metricsLn, reg) })
		d.done <- eg.Wait()
	}()
	return d, nil
}

func shutdownNATS(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

const keyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newKey returns a fresh API key in the gateway's format.
func newKey() string {
	b := make([]byte, 40)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(keyAlphabet))))
		b[i] = keyAlphabet[n.Int64()]
	}
	return "sylk_" + string(b)
}

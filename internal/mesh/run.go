package mesh

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/config"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/meshtls"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/telemetry"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/academic"
	"sylk.dev/sylk/services/architect"
	"sylk.dev/sylk/services/archivalist"
	"sylk.dev/sylk/services/guide"
	"sylk.dev/sylk/services/librarian"
	"sylk.dev/sylk/services/orchestrator"
	"sylk.dev/sylk/services/worker"
)

// secretFiles are the files named in common that hold secrets (keys).
func secretFiles(common Common) []string {
	var out []string
	for _, f := range []string{common.Internal.KeyFile, common.LLMCredentials.KeyFile, common.TLS.KeyFile,
		common.NATS.TLS.KeyFile, common.Redis.TLS.KeyFile,
		common.LLM.Anthropic.APIKeyFile, common.LLM.OpenAI.APIKeyFile, common.LLM.Gemini.APIKeyFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// hideSecretFiles keeps the worker's task commands from reading the secret
// files in common and the PostgreSQL client's credential files: each file,
// the file a symlink resolves to, and the whole directory of a mounted
// Kubernetes Secret (which holds ..data: its files are swapped through
// symlinks when it changes). A symlinked file outside such a directory is
// hidden where it resolves at start.
func hideSecretFiles(sc *ServiceConfigs, common Common) {
	files := append(secretFiles(common), pgstore.CredentialFiles(common.Postgres.DSN)...)
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		hidden := []string{abs}
		if r, err := filepath.EvalSymlinks(abs); err == nil && r != abs {
			hidden = append(hidden, r)
		}
		if dir := filepath.Dir(abs); dir != "/" {
			if _, err := os.Lstat(filepath.Join(dir, "..data")); err == nil {
				hidden = append(hidden, dir)
			}
		}
		sc.Worker.Tools.ConfineHidden = append(sc.Worker.Tools.ConfineHidden, hidden...)
	}
}

// newService builds the named service from its configuration.
func newService(name string, sc *ServiceConfigs, deps app.Deps) (app.Service, error) {
	switch name {
	case Guide:
		return guide.New(sc.Guide, deps)
	case Architect:
		return architect.New(sc.Architect, deps)
	case Orchestrator:
		return orchestrator.New(sc.Orchestrator, deps)
	case Worker:
		return worker.New(sc.Worker, deps)
	case Librarian:
		return librarian.New(sc.Librarian, deps)
	case Archivalist:
		return archivalist.New(sc.Archivalist, deps)
	case Academic:
		return academic.New(sc.Academic, deps)
	}
	return nil, fmt.Errorf("unknown service %q", name)
}

// hasSchema reports whether the service keeps state in Postgres.
func hasSchema(name string) bool { return name != Worker && name != Gateway }

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

// meshTLS opens the TLS material of common when it is configured, and
// returns the option a service's server takes and the one its clients dial
// with; without TLS, none (plaintext). done releases the material.
func meshTLS(common Common, log *slog.Logger) (srv []grpcserver.Option, dial []grpc.DialOption, done func(), err error) {
	if !common.TLS.Enabled() {
		return nil, nil, func() {}, nil
	}
	m, err := meshtls.Open(common.TLS, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return []grpcserver.Option{grpcserver.WithCredentials(m.ServerCredentials())},
		[]grpc.DialOption{grpc.WithTransportCredentials(m.ClientCredentials())}, m.Close, nil
}

// dialPeers connects lazily to every configured peer; calls carry the
// caller's identity signed by signer.
func dialPeers(p PeerConfig, signer *identity.Signer, opts ...grpc.DialOption) (app.Peers, gateway.Conns, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	dial := func(addr string) (*grpc.ClientConn, error) {
		if addr == "" {
			return nil, nil
		}
		c, err := grpcclient.Dial(addr, signer, opts...)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		return c, nil
	}
	var gc gateway.Conns
	var err error
	for _, x := range []struct {
		dst  **grpc.ClientConn
		addr string
	}{{&gc.Guide, p.Guide}, {&gc.Architect, p.Architect}, {&gc.Orchestrator, p.Orchestrator}, {&gc.Librarian, p.Librarian}, {&gc.Archivalist, p.Archivalist}, {&gc.Academic, p.Academic}} {
		if *x.dst, err = dial(x.addr); err != nil {
			closeAll()
			return app.Peers{}, gateway.Conns{}, nil, err
		}
	}
	var peers app.Peers
	// Leave a peer nil (not a typed nil) when it is not configured.
	if gc.Guide != nil {
		peers.Guide = gc.Guide
	}
	if gc.Architect != nil {
		peers.Architect = gc.Architect
	}
	if gc.Orchestrator != nil {
		peers.Orchestrator = gc.Orchestrator
	}
	if gc.Librarian != nil {
		peers.Librarian = gc.Librarian
	}
	if gc.Archivalist != nil {
		peers.Archivalist = gc.Archivalist
	}
	if gc.Academic != nil {
		peers.Academic = gc.Academic
	}
	return peers, gc, closeAll, nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Serve runs one service until ctx is done. args are its command-line flags.
func Serve(ctx context.Context, name string, args []string, stderr io.Writer) error {
	if !IsService(name) {
		return fmt.Errorf("unknown service %q (want one of %v or %s)", name, Services, Gateway)
	}
	fs := flag.NewFlagSet("sylk-"+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common Common
	var sc ServiceConfigs
	common.RegisterFlags(fs)
	sc.RegisterFlags(fs, name)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if err := errors.Join(common.Validate(), sc.Validate(name), common.Peers.required(name)); err != nil {
		return err
	}
	log := logx.New(stderr, common.Log, name, Version)
	signer, err := internalSigner(common, log)
	if err != nil {
		return err
	}
	// Programs this service runs (git on users' repositories, tools) must
	// not read its environment or memory through /proc.
	if err := toolexec.ProtectProcess(); err != nil {
		return err
	}
	shutdownTracing, err := telemetry.Setup(ctx, common.Telemetry, "sylk-"+name, Version)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()
	reg := newRegistry()
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := checkStores(startCtx, common, name); err != nil {
		return err
	}
	srvTLS, dialTLS, closeTLS, err := meshTLS(common, log)
	if err != nil {
		return err
	}
	defer closeTLS()
	if !common.TLS.Enabled() {
		log.Warn("gRPC between services is plaintext: set -tls.cert-file, -tls.key-file and -tls.ca-file for mutual TLS")
	}

	if name == Gateway {
		return serveGateway(ctx, startCtx, common, sc.Gateway, log, reg, signer, dialTLS)
	}

	deps := app.Deps{Log: log, Registerer: reg}
	if hasSchema(name) {
		pool, err := OpenSchema(startCtx, common.Postgres, common.SchemaPrefix, name)
		if err != nil {
			return err
		}
		defer pool.Close()
		deps.DB, deps.Schema = pool, Schema(common.SchemaPrefix, name)
	}
	rc, err := redisx.Open(startCtx, common.Redis)
	if err != nil {
		return err
	}
	defer rc.Close()
	deps.Redis = rc
	bus, err := natsx.Connect(startCtx, common.NATS, log, "sylk-"+name)
	if err != nil {
		return err
	}
	defer bus.Close()
	deps.Bus = bus
	peers, _, closePeers, err := dialPeers(common.Peers, signer, dialTLS...)
	if err != nil {
		return err
	}
	defer closePeers()
	deps.Peers = peers

	hideSecretFiles(&sc, common)
	svc, err := newService(name, &sc, deps)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	closeLLM, err := attachLLM(startCtx, name, svc, common, deps, log)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	defer closeLLM()
	// Direct consultations to this service are checked against the
	// permission matrix and logged to the Archivalist (spec A-40..A-42).
	sink := consult.NewNATSSink(bus, topology.InboxSubject(bus, topology.AgentArchivalist), log, reg, consult.SinkConfig{})
	srv, err := grpcserver.New(common.Server, log, reg, reg,
		append(srvTLS, consult.ServerOption(name, sink), grpcserver.WithSigner(signer))...)
	if err != nil {
		return err
	}
	svc.Register(srv.GRPC())
	if err := srv.Listen(); err != nil {
		return err
	}
	return runUnits(ctx, log, unit{name: name, srv: srv, svc: svc})
}

// internalSigner loads the internal key, saying so when a service runs
// without one.
func internalSigner(common Common, log *slog.Logger) (*identity.Signer, error) {
	signer, err := common.Internal.Signer()
	if err != nil {
		return nil, err
	}
	if signer == nil {
		log.Warn("no internal key (-internal.allow-unsigned): this service takes any caller identity sent to it and signs none it sends")
	}
	return signer, nil
}

// unit is one service with its server.
type unit struct {
	name string
	srv  *grpcserver.Server
	svc  app.Service
}

// runUnits serves every unit until ctx is done; the first failure stops all.
func runUnits(ctx context.Context, log *slog.Logger, units ...unit) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, u := range units {
		g.Go(func() error {
			if err := u.svc.Run(gctx); err != nil {
				// A shutdown that cancels a service mid-start (provisioning
				// streams, loading state) is still a clean shutdown.
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					log.Warn("stopped while starting", slog.String(logx.KeyService, u.name), logx.Err(err))
					return nil
				}
				return fmt.Errorf("%s: %w", u.name, err)
			}
			return nil
		})
		g.Go(func() error {
			if err := u.srv.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", u.name, err)
			}
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		log.Error("stopped with error", logx.Err(err))
	}
	return err
}

func serveGateway(ctx, startCtx context.Context, common Common, cfg gateway.Config, log *slog.Logger, reg *prometheus.Registry, signer *identity.Signer, dialTLS []grpc.DialOption) error {
	pool, err := OpenSchema(startCtx, common.Postgres, common.SchemaPrefix, "auth")
	if err != nil {
		return err
	}
	defer pool.Close()
	_, conns, closePeers, err := dialPeers(common.Peers, signer, dialTLS...)
	if err != nil {
		return err
	}
	defer closePeers()
	cfg.ShutdownDelay = common.Server.ShutdownDelay
	gw, err := gateway.New(cfg, log, pool, conns, reg)
	if err != nil {
		return err
	}
	if cfg.BootstrapKey != "" {
		if err := gateway.EnsureBootstrapKey(startCtx, pool, cfg.BootstrapTenant, cfg.BootstrapUser, cfg.BootstrapKey); err != nil {
			return err
		}
	}
	if err := gw.Listen(); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gw.Run(gctx) })
	if common.Server.HTTPListenAddress != "" {
		ln, err := net.Listen("tcp", common.Server.HTTPListenAddress)
		if err != nil {
			return fmt.Errorf("listen metrics %s: %w", common.Server.HTTPListenAddress, err)
		}
		g.Go(func() error { return serveMetrics(gctx, ln, reg) })
	}
	log.Info("gateway serving", slog.String("addr", gw.Addr()))
	return g.Wait()
}

// serveMetrics serves /metrics until ctx is done.
func serveMetrics(ctx context.Context, ln net.Listener, g prometheus.Gatherer) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	})
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

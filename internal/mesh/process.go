package mesh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/meshtls"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/telemetry"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// process is what the modules one process runs share: the configuration,
// the metrics registry, the signer and TLS of their gRPC, Redis, the sink
// of consultations, and what to release when the process ends. `sylk
// serve` runs one module in it, `sylk dev` all of them.
type process struct {
	common  Common
	configs *ServiceConfigs
	log     *slog.Logger
	// logOut receives each module's log (dev gives each its own logger).
	logOut io.Writer
	// clientPrefix starts each module's NATS client name.
	clientPrefix string
	reg          *prometheus.Registry
	signer       *identity.Signer
	srvTLS       []grpcserver.Option
	dialTLS      []grpc.DialOption
	redis        *redisx.Client
	audit        *audit.Log
	sink         consult.Sink
	closers      []func()
}

func newProcess(common Common, configs *ServiceConfigs, logOut io.Writer, log *slog.Logger, clientPrefix string) *process {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &process{common: common, configs: configs, log: log, logOut: logOut, clientPrefix: clientPrefix, reg: reg}
}

// onClose adds f to what close releases.
func (p *process) onClose(f func()) { p.closers = append(p.closers, f) }

// close releases everything opened, last first.
func (p *process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// prepare readies the process before it connects anywhere: the internal
// key, protection from the programs it runs, tracing, the secrets those
// programs must not read, and the TLS of its gRPC.
func (p *process) prepare(ctx context.Context, traceName string) error {
	signer, err := internalSigner(p.common, p.log)
	if err != nil {
		return err
	}
	p.signer = signer
	// Programs the modules run (git on users' repositories, tools) must
	// not read their environment or memory through /proc.
	if err := toolexec.ProtectProcess(); err != nil {
		return err
	}
	shutdownTracing, err := telemetry.Setup(ctx, p.common.Telemetry, traceName, Version)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	p.onClose(func() { _ = shutdownTracing(context.WithoutCancel(ctx)) })
	hideSecretFiles(p.configs, p.common)
	return p.openTLS()
}

// internalSigner loads the internal key, saying so when the process runs
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

// openTLS opens the TLS material when it is configured: the option the
// servers take and the one clients dial with. Without it, gRPC between
// the modules is plaintext.
func (p *process) openTLS() error {
	if !p.common.TLS.Enabled() {
		return nil
	}
	m, err := meshtls.Open(p.common.TLS, p.log)
	if err != nil {
		return err
	}
	p.onClose(m.Close)
	p.srvTLS = []grpcserver.Option{grpcserver.WithCredentials(m.ServerCredentials())}
	p.dialTLS = []grpc.DialOption{grpc.WithTransportCredentials(m.ClientCredentials())}
	return nil
}

// openRedis connects to Redis, which every module of the process shares.
func (p *process) openRedis(ctx context.Context) error {
	rc, err := redisx.Open(ctx, p.common.Redis)
	if err != nil {
		return err
	}
	p.onClose(func() { _ = rc.Close() })
	p.redis = rc
	return nil
}

// openAudit opens the audit log every module of the process records in,
// once: its schema (migrated) and a pool on it.
func (p *process) openAudit(ctx context.Context) error {
	if p.audit != nil {
		return nil
	}
	pool, err := OpenSchema(ctx, p.common.Postgres, p.common.SchemaPrefix, audit.Schema)
	if err != nil {
		return err
	}
	p.onClose(pool.Close)
	l, err := audit.New(pool, Schema(p.common.SchemaPrefix, audit.Schema))
	if err != nil {
		return err
	}
	p.audit = l
	return nil
}

// openSink makes the sink of consultations, on bus: direct consultations
// to the modules are checked against the permission matrix and logged to
// the Archivalist (spec A-40..A-42).
func (p *process) openSink(bus *natsx.Bus) {
	p.sink = consult.NewNATSSink(bus, topology.InboxSubject(bus, topology.AgentArchivalist), p.log, p.reg, consult.SinkConfig{})
}

// connectBus connects to NATS as the client name.
func (p *process) connectBus(ctx context.Context, name string, log *slog.Logger) (*natsx.Bus, error) {
	bus, err := natsx.Connect(ctx, p.common.NATS, log, p.clientPrefix+name)
	if err != nil {
		return nil, err
	}
	p.onClose(bus.Close)
	return bus, nil
}

// listenMetrics binds the address that serves /metrics and /healthz; none
// when addr is empty.
func (p *process) listenMetrics(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen metrics %s: %w", addr, err)
	}
	p.onClose(func() { _ = ln.Close() })
	return ln, nil
}

package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
)

// A unit is one module's service being started and run, with its server.
// Its start-up sequence is the same whether it runs alone (`sylk serve`)
// or beside the others (`sylk dev`):
//
//  1. connect: its schema (migrated), the audit log and its NATS
//     connection;
//  2. bind: its gRPC server, with the process's interceptors, listening;
//  3. build: the service, from its configuration, dependencies and peers,
//     with what it takes from pkg/llm, registered on its server;
//  4. run (runUnits): the service and its server, ready once it has
//     started.
//
// dev binds every unit before it builds any, so that each knows its
// peers' addresses.
type unit struct {
	mod  *module
	log  *slog.Logger
	deps app.Deps
	srv  *grpcserver.Server
	svc  app.Service
	// started is closed once svc has started (app.Starter).
	started chan struct{}
}

func newUnit(m *module, log *slog.Logger, reg prometheus.Registerer) *unit {
	return &unit{mod: m, log: log, deps: app.Deps{Log: log, Registerer: reg}, started: make(chan struct{})}
}

// connect opens u's schema, when it has one, the audit log and its NATS
// connection.
func (p *process) connect(ctx context.Context, u *unit) error {
	u.deps.Redis = p.redis
	if err := p.openAudit(ctx); err != nil {
		return err
	}
	u.deps.Audit = p.audit
	if s := u.mod.schema; s != "" {
		pool, err := OpenSchema(ctx, p.common.Postgres, p.common.SchemaPrefix, s)
		if err != nil {
			return err
		}
		p.onClose(pool.Close)
		u.deps.DB, u.deps.Schema = pool, Schema(p.common.SchemaPrefix, s)
	}
	bus, err := p.connectBus(ctx, u.mod.name, u.log)
	if err != nil {
		return err
	}
	u.deps.Bus = bus
	return nil
}

// bind makes u's gRPC server and binds its listener. The process serves
// metrics on a listener of its own (run), so the server has no HTTP side.
func (p *process) bind(u *unit) error {
	cfg := p.common.Server
	cfg.HTTPListenAddress = ""
	opts := append(slices.Clone(p.srvTLS),
		consult.ServerOption(u.mod.name, p.sink),
		grpcserver.WithSigner(p.signer),
		healthGate(u.started))
	srv, err := grpcserver.New(cfg, u.log, u.deps.Registerer, p.reg, opts...)
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	u.srv = srv
	return nil
}

// build makes u's service, gives it what it takes from pkg/llm and
// registers it on u's server.
func (p *process) build(ctx context.Context, u *unit, peers app.Peers) error {
	u.deps.Peers = peers
	svc, err := u.mod.build(p.configs, u.deps)
	if err != nil {
		return fmt.Errorf("start %s: %w", u.mod.name, err)
	}
	closeLLM, err := attachLLM(ctx, u.mod, svc, p.common, u.deps, u.log)
	if err != nil {
		return fmt.Errorf("start %s: %w", u.mod.name, err)
	}
	p.onClose(closeLLM)
	svc.Register(u.srv.GRPC())
	u.svc = svc
	return nil
}

// dial connects lazily to each of names whose address addrs holds; calls
// carry the caller's identity signed by the process's signer.
func (p *process) dial(addrs PeerConfig, names []string) (map[string]*grpc.ClientConn, error) {
	conns := map[string]*grpc.ClientConn{}
	for _, n := range names {
		if addrs[n] == "" || conns[n] != nil {
			continue
		}
		c, err := grpcclient.Dial(addrs[n], p.signer, p.dialTLS...)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", n, err)
		}
		p.onClose(func() { _ = c.Close() })
		conns[n] = c
	}
	return conns, nil
}

// clients are m's connections to its peers, as a service and the gateway
// take them. A peer without a connection stays nil (not a typed nil).
func clients(m *module, conns map[string]*grpc.ClientConn) (app.Peers, gateway.Conns) {
	var peers app.Peers
	var gc gateway.Conns
	for _, n := range m.peers() {
		peer, err := lookup(n)
		if c := conns[n]; c != nil && err == nil && peer.client != nil {
			peer.client(&peers, &gc, c)
		}
	}
	return peers, gc
}

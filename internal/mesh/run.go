package mesh

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/config"
	"sylk.dev/sylk/pkg/logx"
)

// serveStartTimeout bounds a module's start-up: connections, migrations.
const serveStartTimeout = time.Minute

// Serve runs one module until ctx is done. args are its command-line flags.
func Serve(ctx context.Context, name string, args []string, stderr io.Writer) error {
	m, err := lookup(name)
	if err != nil {
		return err
	}
	var common Common
	var configs ServiceConfigs
	if err := parseServe(m, args, stderr, &common, &configs); err != nil {
		return err
	}
	p := newProcess(common, &configs, stderr, logx.New(stderr, common.Log, name, Version), "sylk-")
	defer p.close()
	if err := p.prepare(ctx, "sylk-"+name); err != nil {
		return err
	}
	if !common.TLS.Enabled() {
		p.log.Warn("gRPC between services is plaintext: set -tls.cert-file, -tls.key-file and -tls.ca-file for mutual TLS")
	}
	startCtx, cancel := context.WithTimeout(ctx, serveStartTimeout)
	defer cancel()
	if err := checkStores(startCtx, common, m); err != nil {
		return err
	}
	metrics, err := p.listenMetrics(common.Server.HTTPListenAddress)
	if err != nil {
		return err
	}
	if m.rest {
		if err := p.openRedis(startCtx); err != nil {
			return err
		}
		gw, err := p.startGateway(startCtx, m, common.Peers, p.log, p.reg, configs.Gateway.BootstrapKey)
		if err != nil {
			return err
		}
		p.log.Info("gateway serving", slog.String("addr", gw.Addr()))
		return run(ctx, p.log, metrics, p.reg, nil, gw.Run)
	}
	u, err := p.startService(startCtx, m)
	if err != nil {
		return err
	}
	return run(ctx, p.log, metrics, p.reg, []*unit{u})
}

// parseServe reads the flags of `sylk serve m` into common and configs and
// checks them.
func parseServe(m *module, args []string, stderr io.Writer, common *Common, configs *ServiceConfigs) error {
	fs := flag.NewFlagSet("sylk-"+m.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	common.RegisterFlags(fs)
	configs.RegisterFlags(fs, m)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	return errors.Join(common.Validate(), configs.Validate(m), common.Peers.required(m))
}

// startService is the start-up sequence of one service alone in its
// process (see unit); consultations are logged through its own bus.
func (p *process) startService(ctx context.Context, m *module) (*unit, error) {
	if err := p.openRedis(ctx); err != nil {
		return nil, err
	}
	u := newUnit(m, p.log, p.reg)
	if err := p.connect(ctx, u); err != nil {
		return nil, err
	}
	p.openSink(u.deps.Bus)
	if err := p.bind(u); err != nil {
		return nil, err
	}
	conns, err := p.dial(p.common.Peers, m.peers())
	if err != nil {
		return nil, err
	}
	peers, _ := clients(m, conns)
	if err := p.build(ctx, u, peers); err != nil {
		return nil, err
	}
	return u, nil
}

// startGateway is the gateway's start-up sequence: its schema, the audit
// log, its connections to the services at addrs, the bootstrap key (when
// given) and its listener. Failed authentications are counted in the
// process's Redis.
func (p *process) startGateway(ctx context.Context, m *module, addrs PeerConfig, log *slog.Logger, reg prometheus.Registerer, key string) (*gateway.Gateway, error) {
	pool, err := OpenSchema(ctx, p.common.Postgres, p.common.SchemaPrefix, m.schema)
	if err != nil {
		return nil, err
	}
	p.onClose(pool.Close)
	if err := p.openAudit(ctx); err != nil {
		return nil, err
	}
	conns, err := p.dial(addrs, m.peers())
	if err != nil {
		return nil, err
	}
	_, gc := clients(m, conns)
	cfg := p.configs.Gateway
	cfg.ShutdownDelay = p.common.Server.ShutdownDelay
	if key != "" {
		if err := gateway.EnsureBootstrapKey(ctx, pool, cfg.BootstrapTenant, cfg.BootstrapUser, key); err != nil {
			return nil, err
		}
	}
	gw, err := gateway.New(cfg, log, pool, gc, reg, gateway.WithAudit(p.audit), gateway.WithRedis(p.redis))
	if err != nil {
		return nil, err
	}
	if err := gw.Listen(); err != nil {
		return nil, err
	}
	return gw, nil
}

package mesh

import (
	"cmp"
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

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/toolexec"
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
	c.Services.RegisterFlags(fs, allModules()...)
	setDefault(fs, "nats.url", "")
	setDefault(fs, "grpc.listen-address", "127.0.0.1:0")
	setDefault(fs, "http.listen-address", "127.0.0.1:0")
	setDefault(fs, "gateway.listen-address", "127.0.0.1:8080")
	setDefault(fs, "postgres.max-conns", "4")
	setDefault(fs, "grpc.reflection", "true")
	// On your own machine, your repositories are where you work: your home
	// and the directory sylk dev starts in may be registered by path.
	setDefault(fs, "librarian.allowed-roots", strings.Join(devRoots(), ","))
	fs.StringVar(&c.NATSDataDir, "nats.data-dir", filepath.Join(os.TempDir(), "sylk-dev-nats-"+strconv.Itoa(os.Getuid())), "JetStream directory of the embedded NATS server (used when -nats.url is empty)")
}

// devRoots are the directories sylk dev lets repositories be registered
// under: the user's home and the current directory, each when it is known
// and can be written in the flag's syntax.
func devRoots() []string {
	var roots []string
	home, herr := os.UserHomeDir()
	cwd, cerr := os.Getwd()
	for _, d := range []struct {
		dir string
		err error
	}{{home, herr}, {cwd, cerr}} {
		if d.err == nil && filepath.IsAbs(d.dir) && !strings.ContainsAny(d.dir, ",=:") && !slices.Contains(roots, filepath.Clean(d.dir)) {
			roots = append(roots, filepath.Clean(d.dir))
		}
	}
	return roots
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
	return errors.Join(common.Validate(), c.Services.Validate(allModules()...))
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
	// AllowedRoots are the directories repositories may be registered
	// under by path (-librarian.allowed-roots), in the flag's syntax.
	AllowedRoots string
	done         chan error
	release      func()
}

// Wait blocks until the mesh stops and returns why.
func (d *Dev) Wait() error {
	err := <-d.done
	d.release()
	return err
}

// devStartTimeout bounds the start of the whole mesh.
const devStartTimeout = 2 * time.Minute

// StartDev starts every module in this process and returns once each has
// started. They stop when ctx is done; call Wait to release everything.
func StartDev(ctx context.Context, cfg DevConfig, logOut io.Writer) (_ *Dev, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// One process: the Orchestrator knows the Librarian's clones of URL
	// repositories by their directory.
	if cfg.Services.Orchestrator.CloneDir == "" {
		cfg.Services.Orchestrator.CloneDir = cfg.Services.Librarian.DataDir
	}
	p := newProcess(cfg.Common, &cfg.Services, logOut, logx.New(logOut, cfg.Log, "dev", Version), "sylk-dev-")
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	d := &Dev{done: make(chan error, 1), release: p.close}
	startCtx, cancel := context.WithTimeout(ctx, devStartTimeout)
	defer cancel()
	if err := d.startNATS(p, cfg.NATSDataDir); err != nil {
		return nil, err
	}
	useRunKey(&p.common)
	if err := p.prepare(ctx, "sylk-dev"); err != nil {
		return nil, err
	}
	p.warnAnonymousStores(startCtx)
	d.AllowedRoots = cfg.Services.Librarian.AllowedRoots.String()
	p.log.Info("repositories may be registered by path under the allowed roots only (-librarian.allowed-roots)",
		slog.String("allowed_roots", d.AllowedRoots))
	if err := p.openShared(startCtx); err != nil {
		return nil, err
	}
	units, err := p.startServices(startCtx)
	if err != nil {
		return nil, err
	}
	d.ServiceAddrs = serviceAddrs(units)
	gw, err := d.startGateway(startCtx, p, cfg.AdminKey)
	if err != nil {
		return nil, err
	}
	metrics, err := p.listenMetrics(cmp.Or(cfg.Server.HTTPListenAddress, "127.0.0.1:0"))
	if err != nil {
		return nil, err
	}
	d.MetricsURL = "http://" + metrics.Addr().String() + "/metrics"
	if err := d.serve(ctx, startCtx, p, units, metrics, gw); err != nil {
		return nil, err
	}
	return d, nil
}

// startNATS runs the embedded NATS server unless a server is configured.
// Its URL is kept with its token, for the user's own clients; a
// configured server's is kept without credentials.
func (d *Dev) startNATS(p *process, dataDir string) error {
	d.NATSURL = natsx.RedactURL(p.common.NATS.URL)
	if p.common.NATS.URL != "" {
		return nil
	}
	ns, url, err := natsx.RunEmbedded(dataDir)
	if err != nil {
		return err
	}
	p.onClose(func() { shutdownNATS(ns) })
	p.common.NATS.URL, d.NATSURL = url, url
	return nil
}

// useRunKey makes the services sign the caller identities they pass to
// each other under a key made for this run, unless one is configured (or
// unsigned identities are allowed).
func useRunKey(common *Common) {
	if !common.Internal.Configured() && !common.Internal.AllowUnsigned {
		common.Internal.Key = newKey()
	}
}

// warnAnonymousStores says when the stores take clients without
// credentials: fine on one's own machine, where serve would refuse them.
func (p *process) warnAnonymousStores(ctx context.Context) {
	if open := anonymousStores(ctx, p.common, false); len(open) > 0 && !p.common.Stores.AllowAnonymous {
		who := "any program on this machine can reach them (task commands cannot: -toolexec.network none)"
		if p.configs != nil && p.configs.Worker.Tools.Network == toolexec.NetworkHost {
			who = "task commands can reach them (-toolexec.network host)"
		}
		p.log.Warn("stores accept clients without credentials: "+who+"; fine on your own machine, not for a shared one",
			slog.String("stores", strings.Join(open, ", ")))
	}
}

// openShared opens what the services share in dev: Redis, and a NATS
// connection of its own for the consultations' log.
func (p *process) openShared(ctx context.Context) error {
	if err := p.openRedis(ctx); err != nil {
		return err
	}
	bus, err := p.connectBus(ctx, "consult", p.log)
	if err != nil {
		return err
	}
	p.openSink(bus)
	return nil
}

// startServices runs the start-up sequence of every service (see unit):
// each connects and binds, then, knowing every address, each is built.
// Each logs as itself and labels its metrics with its name.
func (p *process) startServices(ctx context.Context) ([]*unit, error) {
	var units []*unit
	for _, m := range services() {
		u := newUnit(m, logx.New(p.logOut, p.common.Log, m.name, Version), serviceRegisterer(p.reg, m.name))
		if err := p.connect(ctx, u); err != nil {
			return nil, err
		}
		if err := p.bind(u); err != nil {
			return nil, err
		}
		units = append(units, u)
	}
	addrs := PeerConfig(serviceAddrs(units))
	conns, err := p.dial(addrs, moduleNames())
	if err != nil {
		return nil, err
	}
	for _, u := range units {
		peers, _ := clients(u.mod, conns)
		if err := p.build(ctx, u, peers); err != nil {
			return nil, err
		}
	}
	return units, nil
}

func serviceRegisterer(reg prometheus.Registerer, name string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"service": name}, reg)
}

// serviceAddrs are the units' gRPC addresses, by module name.
func serviceAddrs(units []*unit) map[string]string {
	addrs := map[string]string{}
	for _, u := range units {
		addrs[u.mod.name] = u.srv.GRPCAddr()
	}
	return addrs
}

// startGateway readies the gateway on the services' addresses, with key
// (or a new one) as the bootstrap admin's. It serves once every service
// has started (serve).
func (d *Dev) startGateway(ctx context.Context, p *process, key string) (*gateway.Gateway, error) {
	m, err := lookup(Gateway)
	if err != nil {
		return nil, err
	}
	d.AdminKey = cmp.Or(key, newKey())
	gw, err := p.startGateway(ctx, m, d.ServiceAddrs, logx.New(p.logOut, p.common.Log, m.name, Version),
		serviceRegisterer(p.reg, m.name), d.AdminKey)
	if err != nil {
		return nil, err
	}
	d.GatewayURL = "http://" + gw.Addr()
	return gw, nil
}

// serve runs the mesh in the background until ctx is done, and waits
// until every service has started (the REST API opens then), the mesh
// stopped, or startCtx is done.
func (d *Dev) serve(ctx, startCtx context.Context, p *process, units []*unit, metrics net.Listener, gw *gateway.Gateway) error {
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		defer stop()
		d.done <- run(runCtx, p.log, metrics, p.reg, units, gw.Run)
	}()
	for _, u := range units {
		select {
		case <-u.started:
		case err := <-d.done:
			return fmt.Errorf("%s did not start: %w", u.mod.name, cmp.Or(err, context.Cause(ctx), errStoppedStarting))
		case <-startCtx.Done():
			stop()
			return errors.Join(fmt.Errorf("%s did not start: %w", u.mod.name, context.Cause(startCtx)), <-d.done)
		}
	}
	return nil
}

var errStoppedStarting = errors.New("the mesh stopped while starting")

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

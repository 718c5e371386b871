package mesh

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"sylk.dev/sylk/internal/cli"
	"sylk.dev/sylk/pkg/config"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/meshtls"
	"sylk.dev/sylk/pkg/pgstore"
)

const usage = `sylk: a multi-agent system for software work, hosted for a team.

Server commands:
  sylk dev [flags]                 run migrations and the whole mesh in one process
  sylk serve SERVICE [flags]       run one service: %s
  sylk migrate [flags]             apply every schema's migrations
  sylk create-api-key [flags]      create an API key for a tenant's user and print it
  sylk list-api-keys [flags]       list a tenant's API keys (never the keys themselves)
  sylk revoke-api-key [flags]      revoke an API key of a tenant by its id
  sylk healthcheck SERVICE [flags] check the health of a service on this host (exit 0 when serving)
  sylk version                     print the version

Every server flag can also be set through its environment variable: -postgres.dsn
is SYLK_POSTGRES_DSN, -gateway.listen-address is SYLK_GATEWAY_LISTEN_ADDRESS.

`

const usageFooter = `
Run "sylk COMMAND -h" for a command's flags.
`

// printUsage writes the usage text: server commands, then client ones.
func printUsage(w io.Writer) {
	fmt.Fprintf(w, usage, strings.Join(moduleNames(), ", "))
	fmt.Fprint(w, cli.Usage)
	fmt.Fprint(w, usageFooter)
}

// Main runs the sylk command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	if cli.Handles(args[0]) {
		return cli.Run(args, os.Stdin, stdout, stderr)
	}
	ctx, stop := signalContext()
	defer stop()
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "dev":
		err = runDev(ctx, rest, stdout, stderr)
	case "serve":
		if len(rest) == 0 || isHelp(rest[0]) {
			return serviceHelp("serve", len(rest) == 0, stdout, stderr)
		}
		err = Serve(ctx, rest[0], rest[1:], stderr)
	case "migrate":
		err = runMigrate(ctx, rest, stderr)
	case "create-api-key":
		err = runCreateAPIKey(ctx, rest, stdout, stderr)
	case "list-api-keys":
		err = runListAPIKeys(ctx, rest, stdout, stderr)
	case "revoke-api-key":
		err = runRevokeAPIKey(ctx, rest, stdout, stderr)
	case "healthcheck":
		if len(rest) == 0 || isHelp(rest[0]) {
			return serviceHelp("healthcheck", len(rest) == 0, stdout, stderr)
		}
		err = Healthcheck(ctx, rest[0], rest[1:], stderr)
	case "version":
		fmt.Fprintln(stdout, Version)
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
	default:
		fmt.Fprintf(stderr, "sylk: unknown command %q\n\n", cmd)
		printUsage(stderr)
		return 2
	}
	return exitCode(err, stderr)
}

func isHelp(s string) bool {
	return s == "-h" || s == "-help" || s == "--help" || s == "help"
}

// serviceHelp explains a command that names a service: on standard output
// with exit 0 when asked for, on standard error with exit 2 when the
// service is missing.
func serviceHelp(cmd string, missing bool, stdout, stderr io.Writer) int {
	w, code := stdout, 0
	if missing {
		w, code = stderr, 2
		fmt.Fprintf(w, "sylk %s: name a service\n\n", cmd)
	}
	fmt.Fprintf(w, "Usage: sylk %s SERVICE [flags]\n\nServices: %s\n\nRun \"sylk %s SERVICE -h\" for a service's flags.\n",
		cmd, strings.Join(moduleNames(), ", "), cmd)
	return code
}

// ServiceMain runs a single-service binary: its flags, or "healthcheck".
func ServiceMain(service string, args []string) int {
	ctx, stop := signalContext()
	defer stop()
	if len(args) > 0 && args[0] == "healthcheck" {
		return exitCode(Healthcheck(ctx, service, args[1:], os.Stderr), os.Stderr)
	}
	return exitCode(Serve(ctx, service, args, os.Stderr), os.Stderr)
}

// signalContext is done at the first SIGINT or SIGTERM, which begins a
// graceful shutdown. The signals are then no longer caught, so a second one
// ends the process at once instead of waiting for that shutdown (draining
// open event streams can take -drain-timeout).
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-c:
		case <-ctx.Done():
		}
		signal.Stop(c)
		cancel()
	}()
	return ctx, cancel
}

func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(stderr, "sylk: %v\n", err)
		return 1
	}
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sylk dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg DevConfig
	cfg.RegisterFlags(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	cfg.AdminKey = cfg.Services.Gateway.BootstrapKey
	d, err := StartDev(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `Sylk is running. No language model is configured: the built-in local provider
classifies and plans with rules and generates no code.

  Console:   %s/   (sign in with the API key below)
  REST API:  %s   (OpenAPI at %s/openapi.json)
  API key:   %s
  Metrics:   %s
  NATS:      %s
  Repositories by path: under %s only (-librarian.allowed-roots); git URLs anywhere

Try:
  export SYLK_KEY=%s
  curl -s -H "Authorization: Bearer $SYLK_KEY" -X POST %s/v1/sessions -d '{}'

Stop with Ctrl-C.
`, d.GatewayURL, d.GatewayURL, d.GatewayURL, d.AdminKey, d.MetricsURL, d.NATSURL, cmp.Or(d.AllowedRoots, "no directory"), d.AdminKey, d.GatewayURL)
	return d.Wait()
}

func runMigrate(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sylk migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var pg pgstore.Config
	var lc logx.Config
	var prefix string
	pg.RegisterFlags(fs)
	lc.RegisterFlags(fs)
	fs.StringVar(&prefix, "postgres.schema-prefix", "", "prefix of every schema name")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if err := config.Validate(pg, lc); err != nil {
		return err
	}
	return MigrateAll(ctx, pg, prefix, logx.New(stderr, lc, "migrate", Version))
}

// Healthcheck asks a module on this host whether it is serving: its
// grpc.health.v1 for a gRPC service (SERVING once it has started), /healthz
// for the gateway. It reads the listen address flags (and their SYLK_*
// variables) to find the port.
func Healthcheck(ctx context.Context, service string, args []string, stderr io.Writer) error {
	m, err := lookup(service)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("sylk healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc.listen-address", ":9090", "gRPC listen address of the service")
	gwAddr := fs.String("gateway.listen-address", ":8080", "listen address of the gateway")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	var tlsCfg meshtls.Config
	tlsCfg.RegisterFlags(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if m.rest {
		return checkREST(ctx, m.name, local(*gwAddr))
	}
	return checkGRPC(ctx, m.name, local(*grpcAddr), tlsCfg)
}

// checkREST asks addr's /healthz.
func checkREST(ctx context.Context, name, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", name, resp.Status)
	}
	return nil
}

// checkGRPC asks addr's grpc.health.v1, over TLS when tlsCfg has it.
func checkGRPC(ctx context.Context, name, addr string, tlsCfg meshtls.Config) error {
	creds := insecure.NewCredentials()
	if tlsCfg.Enabled() {
		m, err := meshtls.Open(tlsCfg, nil)
		if err != nil {
			return err
		}
		defer m.Close()
		// The service's own certificate names its Service, not this
		// host's loopback address: the chain is checked, not the name.
		creds = credentials.NewTLS(m.ClientConfig(""))
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s", name, resp.GetStatus())
	}
	return nil
}

// local turns a listen address into one to dial on this host.
func local(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

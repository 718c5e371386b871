// Package grpcserver runs a service's gRPC server with health, reflection
// (when enabled), an ordered interceptor chain, Prometheus metrics and
// OpenTelemetry, plus an HTTP port for /metrics and /healthz, and shuts both
// down gracefully.
package grpcserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// Config sets the listen addresses and the shutdown timings.
type Config struct {
	ListenAddress     string
	HTTPListenAddress string
	ShutdownDelay     time.Duration
	DrainTimeout      time.Duration
	MaxRecvBytes      int
	MaxConnectionAge  time.Duration
	// Reflection serves the gRPC reflection API, which lists every
	// service and message: on in `sylk dev`, off otherwise.
	Reflection bool
}

// RegisterFlags registers the server flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenAddress, "grpc.listen-address", ":9090", "gRPC listen address")
	fs.StringVar(&c.HTTPListenAddress, "http.listen-address", ":9091", "HTTP listen address for /metrics and /healthz (empty disables)")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", 0, "time between reporting NOT_SERVING and stopping, so load balancers notice")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 15*time.Second, "time in-flight calls get to finish on shutdown")
	fs.IntVar(&c.MaxRecvBytes, "grpc.max-recv-bytes", 8<<20, "largest request message accepted")
	fs.BoolVar(&c.Reflection, "grpc.reflection", false, "serve the gRPC reflection API (lists every service and message; on by default only in `sylk dev`)")
	fs.DurationVar(&c.MaxConnectionAge, "grpc.max-connection-age", 5*time.Minute, "age after which clients are asked to reconnect, so they re-resolve and spread over new replicas (streams in flight are not cut); 0 disables")
}

// Validate checks the values.
func (c Config) Validate() error {
	var errs []error
	if c.ListenAddress == "" {
		errs = append(errs, errors.New("grpc.listen-address: must be set"))
	}
	if c.ShutdownDelay < 0 || c.DrainTimeout < 0 || c.MaxConnectionAge < 0 {
		errs = append(errs, errors.New("shutdown-delay, drain-timeout and grpc.max-connection-age: must not be negative"))
	}
	if c.MaxRecvBytes < 1024 {
		errs = append(errs, errors.New("grpc.max-recv-bytes: must be at least 1024"))
	}
	return errors.Join(errs...)
}

// Server is a gRPC server plus its HTTP side port.
type Server struct {
	cfg     Config
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	httpSrv *http.Server
	gl, hl  net.Listener
	serving atomic.Bool
}

// Option adjusts the server.
type Option func(*options)

type options struct {
	signer *identity.Signer
	creds  credentials.TransportCredentials
	public []string
	unary  []grpc.UnaryServerInterceptor
	stream []grpc.StreamServerInterceptor
}

// WithPublicMethods lets calls to these full method names (or prefixes ending
// in "/") through without a caller identity. Health and reflection (when
// served) always are.
func WithPublicMethods(methods ...string) Option {
	return func(o *options) { o.public = append(o.public, methods...) }
}

// WithSigner makes the server take a caller identity only with a signature
// signer verifies (identity.Signer); without it any identity sent is taken.
func WithSigner(signer *identity.Signer) Option {
	return func(o *options) { o.signer = signer }
}

// WithCredentials serves over creds (TLS) instead of plaintext.
func WithCredentials(creds credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = creds }
}

// WithInterceptors appends interceptors after the built-in chain.
func WithInterceptors(u []grpc.UnaryServerInterceptor, s []grpc.StreamServerInterceptor) Option {
	return func(o *options) {
		o.unary = append(o.unary, u...)
		o.stream = append(o.stream, s...)
	}
}

// New builds the server. reg receives the RPC metrics; gatherer serves /metrics.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer, gatherer prometheus.Gatherer, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m := newMetrics(reg)
	public := append([]string{"/grpc.health.v1.Health/", "/grpc.reflection."}, o.public...)
	// Interceptor order, outermost first:
	//  1. recovery: a panic anywhere below becomes Internal (with its
	//     ErrorInfo) and never kills the process;
	//  2. metrics and logging: see the final code and duration of every
	//     call, the code being the one the caller gets (3 is inside);
	//  3. public errors: every error leaving the server passes through
	//     apierr.Status, so that it carries an ErrorInfo with a stable
	//     reason and an error that is not a status becomes a generic
	//     Internal, its cause logged, never sent. It sits outside every
	//     interceptor that can end a call (4, 5 and those a service adds),
	//     so their errors get the same treatment as the handlers';
	//  4. identity: reject calls without a caller, except public methods,
	//     and calls whose caller no service of the deployment signed;
	//  5. validation: no string in a request may hold NUL, and requests with a
	//     Validate method are checked before handlers.
	unary := append([]grpc.UnaryServerInterceptor{
		recoveryUnary(log),
		observeUnary(log, m),
		publicUnary(log),
		identityUnary(log, public, o.signer),
		validateUnary(),
	}, o.unary...)
	stream := append([]grpc.StreamServerInterceptor{
		recoveryStream(log),
		observeStream(log, m),
		publicStream(log),
		identityStream(log, public, o.signer),
		validateStream(),
	}, o.stream...)
	sopts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
	}
	if o.creds != nil {
		sopts = append(sopts, grpc.Creds(o.creds))
	}
	if cfg.MaxConnectionAge > 0 {
		// No grace limit: long-lived streams (session events) finish on their own.
		sopts = append(sopts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: cfg.MaxConnectionAge}))
	}
	gs := grpc.NewServer(sopts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	if cfg.Reflection {
		reflection.Register(gs)
	}
	s := &Server{cfg: cfg, log: log, grpc: gs, health: hs}
	if cfg.HTTPListenAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if !s.serving.Load() {
				http.Error(w, "not serving", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// GRPC returns the server to register services on.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Health returns the health server, to report per-service status.
func (s *Server) Health() *health.Server { return s.health }

// Listen binds the listeners, so their addresses are known before Run.
func (s *Server) Listen() error {
	gl, err := net.Listen("tcp", s.cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen grpc %s: %w", s.cfg.ListenAddress, err)
	}
	s.gl = gl
	if s.httpSrv != nil {
		hl, err := net.Listen("tcp", s.cfg.HTTPListenAddress)
		if err != nil {
			_ = gl.Close()
			return fmt.Errorf("listen http %s: %w", s.cfg.HTTPListenAddress, err)
		}
		s.hl = hl
	}
	return nil
}

// GRPCAddr is the bound gRPC address (after Listen).
func (s *Server) GRPCAddr() string { return s.gl.Addr().String() }

// HTTPAddr is the bound HTTP address (after Listen), or "".
func (s *Server) HTTPAddr() string {
	if s.hl == nil {
		return ""
	}
	return s.hl.Addr().String()
}

// Run serves until ctx is done, then shuts down: health NOT_SERVING, wait
// the shutdown delay, drain in-flight calls up to the drain timeout, stop.
func (s *Server) Run(ctx context.Context) error {
	if s.gl == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	s.health.Resume()
	s.serving.Store(true)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.gl); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serve grpc: %w", err)
		}
		return nil
	})
	if s.httpSrv != nil {
		g.Go(func() error {
			if err := s.httpSrv.Serve(s.hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve http: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		s.shutdown()
		return nil
	})
	s.log.Info("serving", slog.String("grpc", s.GRPCAddr()), slog.String("http", s.HTTPAddr()))
	return g.Wait()
}

func (s *Server) shutdown() {
	s.serving.Store(false)
	s.health.Shutdown()
	if s.cfg.ShutdownDelay > 0 {
		s.log.Info("shutting down", slog.Duration(logx.KeyDuration, s.cfg.ShutdownDelay))
		time.Sleep(s.cfg.ShutdownDelay)
	}
	hard := time.AfterFunc(s.cfg.DrainTimeout, s.grpc.Stop)
	s.grpc.GracefulStop()
	hard.Stop()
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
		defer cancel()
		_ = s.httpSrv.Shutdown(ctx)
	}
	s.log.Info("stopped")
}

package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
)

// A module is ready (grpc.health.v1 SERVING, /healthz 200) only once its
// service has started: an app.Starter when it says so, any other service
// once its Run is entered. Its gRPC calls are served from the start.

const (
	healthCheck = "/grpc.health.v1.Health/Check"
	healthWatch = "/grpc.health.v1.Health/Watch"
)

// healthGate makes the server's health answers NOT_SERVING until started
// is closed; from then on they are the health server's own (NOT_SERVING
// again from the start of a shutdown). A watcher is told NOT_SERVING, then
// the health server's answers once started.
func healthGate(started <-chan struct{}) grpcserver.Option {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if info.FullMethod != healthCheck || err != nil || isClosed(started) {
			return resp, err
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != healthWatch || isClosed(started) {
			return handler(srv, ss)
		}
		if err := ss.SendMsg(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}); err != nil {
			return err
		}
		select {
		case <-started:
			return handler(srv, ss)
		case <-ss.Context().Done():
			return status.FromContextError(ss.Context().Err()).Err()
		}
	}
	return grpcserver.WithInterceptors([]grpc.UnaryServerInterceptor{unary}, []grpc.StreamServerInterceptor{stream})
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// allStarted reports whether every unit has started.
func allStarted(units []*unit) bool {
	for _, u := range units {
		if !isClosed(u.started) {
			return false
		}
	}
	return true
}

// awaitStarted waits until every unit has started, or ctx is done.
func awaitStarted(ctx context.Context, units []*unit) error {
	for _, u := range units {
		select {
		case <-u.started:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// run runs the units until ctx is done, and afterStart (the gateway) once
// every unit has started; the first failure stops all. metrics, when not
// nil, serves /metrics and /healthz until all have stopped: /healthz
// answers 200 from when every unit has started until the shutdown begins.
func run(ctx context.Context, log *slog.Logger, metrics net.Listener, gatherer prometheus.Gatherer, units []*unit, afterStart ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	served := make(chan error, 1)
	mctx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMetrics()
	if metrics == nil {
		served <- nil
	} else {
		go func() {
			err := serveMetrics(mctx, metrics, gatherer, func() bool { return gctx.Err() == nil && allStarted(units) })
			if err != nil {
				cancel() // a metrics server that failed stops the units
			}
			served <- err
		}()
	}
	g.Go(func() error { return runUnits(gctx, log, units...) })
	g.Go(func() error {
		if awaitStarted(gctx, units) != nil {
			return nil
		}
		for _, f := range afterStart {
			g.Go(func() error { return f(gctx) })
		}
		return nil
	})
	err := g.Wait()
	stopMetrics()
	if err = errors.Join(err, <-served); err != nil {
		log.Error("stopped with error", logx.Err(err))
	}
	return err
}

// runUnits serves every unit until ctx is done; the first failure stops
// all.
func runUnits(ctx context.Context, log *slog.Logger, units ...*unit) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, u := range units {
		s, starter := u.svc.(app.Starter)
		if starter {
			g.Go(func() error {
				select {
				case <-s.Started():
					close(u.started)
					u.log.Info("started")
				case <-gctx.Done():
				}
				return nil
			})
		}
		g.Go(func() error {
			if !starter {
				close(u.started)
			}
			if err := u.svc.Run(gctx); err != nil {
				// A shutdown that cancels a service mid-start (provisioning
				// streams, loading state) is still a clean shutdown.
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					log.Warn("stopped while starting", slog.String(logx.KeyService, u.mod.name), logx.Err(err))
					return nil
				}
				return fmt.Errorf("%s: %w", u.mod.name, err)
			}
			return nil
		})
		g.Go(func() error {
			if err := u.srv.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", u.mod.name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// serveMetrics serves /metrics, and /healthz as ready says, until ctx is
// done.
func serveMetrics(ctx context.Context, ln net.Listener, g prometheus.Gatherer, ready func() bool) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
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

package mesh

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// plain is a service that does not say when it has started.
type plain struct{}

func (plain) Register(*grpc.Server)         {}
func (plain) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// starting says when it has started.
type starting struct {
	plain
	app.StartSignal
}

// runFake runs svc as a module of its own process, with a metrics
// listener, until the test ends; it returns its gRPC and metrics addresses.
func runFake(t *testing.T, svc app.Service) (grpcAddr, metricsAddr string) {
	t.Helper()
	var common Common
	common.Server = grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: time.Second, MaxRecvBytes: 1 << 20}
	p := newProcess(common, &ServiceConfigs{}, io.Discard, logx.Discard(), "test-")
	u := newUnit(&module{name: "fake"}, logx.Discard(), p.reg)
	require.NoError(t, p.bind(u))
	u.svc = svc
	metrics, err := p.listenMetrics("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(p.close)
	testenv.Start(t, func(ctx context.Context) error { return run(ctx, logx.Discard(), metrics, p.reg, []*unit{u}) })
	return u.srv.GRPCAddr(), metrics.Addr().String()
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A service that says when it has started is ready only then: health
// checks, watchers, /healthz and `sylk healthcheck` agree.
func TestReadyOnceStarted(t *testing.T) {
	t.Parallel()
	svc := &starting{}
	addr, metrics := runFake(t, svc)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	health := healthpb.NewHealthClient(cc)

	resp, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, resp.GetStatus())
	require.ErrorContains(t, Healthcheck(t.Context(), Librarian, []string{"-grpc.listen-address", addr}, io.Discard), "NOT_SERVING")
	require.Equal(t, http.StatusServiceUnavailable, healthz(t, metrics))
	watch, err := health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, first.GetStatus())

	svc.MarkStarted()
	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, next.GetStatus(), "the watcher hears of the start")
	resp, err = health.Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	require.NoError(t, Healthcheck(t.Context(), Librarian, []string{"-grpc.listen-address", addr}, io.Discard))
	require.Equal(t, http.StatusOK, healthz(t, metrics))
}

// A service that does not say is ready once its Run is entered.
func TestReadyWhenRunEntered(t *testing.T) {
	t.Parallel()
	addr, metrics := runFake(t, plain{})
	require.Eventually(t, func() bool {
		return Healthcheck(t.Context(), Librarian, []string{"-grpc.listen-address", addr}, io.Discard) == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, healthz(t, metrics))
}

package grpcserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// probe is a tiny gRPC service registered by hand for these tests.
type probe struct {
	fn func(ctx context.Context) error
}

func (p *probe) register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "sylk.test.Probe",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Call",
			Handler: func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
				req := new(healthpb.HealthCheckRequest)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, _ any) (any, error) {
					return &healthpb.HealthCheckResponse{}, p.fn(ctx)
				}
				return in(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/sylk.test.Probe/Call"}, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler:       func(_ any, ss grpc.ServerStream) error { return p.fn(ss.Context()) },
		}},
	}, p)
}

func start(t *testing.T, p *probe) (*grpc.ClientConn, *prometheus.Registry, string) {
	t.Helper()
	srv, reg := serve(t, p)
	return dial(t, srv, nil), reg, srv.HTTPAddr()
}

// serve runs a server with p registered until the test ends.
func serve(t *testing.T, p *probe, opts ...grpcserver.Option) (*grpcserver.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv, err := grpcserver.New(grpcserver.Config{ListenAddress: "127.0.0.1:0", HTTPListenAddress: "127.0.0.1:0", DrainTimeout: 5 * time.Second, MaxRecvBytes: 1 << 20}, logx.Discard(), reg, reg, opts...)
	require.NoError(t, err)
	p.register(srv.GRPC())
	require.NoError(t, srv.Listen())
	testenv.Start(t, srv.Run)
	return srv, reg
}

// dial connects to srv, signing identities with signer (nil: unsigned).
func dial(t *testing.T, srv *grpcserver.Server, signer *identity.Signer) *grpc.ClientConn {
	t.Helper()
	cc, err := grpcclient.Dial(srv.GRPCAddr(), signer)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func call(ctx context.Context, cc *grpc.ClientConn) error {
	return cc.Invoke(ctx, "/sylk.test.Probe/Call", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
}

// watch opens the probe's stream and returns how it ended.
func watch(ctx context.Context, cc *grpc.ClientConn) error {
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/sylk.test.Probe/Watch")
	if err != nil {
		return err
	}
	if err := s.SendMsg(&healthpb.HealthCheckRequest{}); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(&healthpb.HealthCheckResponse{})
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	var seen identity.Identity
	p := &probe{fn: func(ctx context.Context) error {
		seen, _ = identity.FromContext(ctx)
		return nil
	}}
	cc, reg, httpAddr := start(t, p)
	ctx := context.Background()

	// No identity: Unauthenticated; health is public.
	testenv.RequireReason(t, call(ctx, cc), codes.Unauthenticated, identity.ReasonIdentityMissing)
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status)

	// Identity reaches the handler.
	id := identity.Identity{TenantID: "acme", UserID: "ann", Role: identity.RoleMember}
	require.NoError(t, call(identity.NewContext(ctx, id), cc))
	require.Equal(t, id, seen)

	// Every error carries an ErrorInfo, on calls and on streams: internal
	// errors are masked, statuses pass through (with the code's name as
	// their reason when they have none), apierr errors keep theirs, panics
	// are recovered.
	for name, rpc := range map[string]func(context.Context, *grpc.ClientConn) error{"unary": call, "stream": watch} {
		ctx := identity.NewContext(ctx, id)
		p.fn = func(context.Context) error { return errors.New("db password is hunter2") }
		err = rpc(ctx, cc)
		testenv.RequireReason(t, err, codes.Internal, apierr.ReasonInternal)
		require.NotContains(t, err.Error(), "hunter2", name)
		p.fn = func(context.Context) error { return status.Error(codes.NotFound, "no such session") }
		testenv.RequireReason(t, rpc(ctx, cc), codes.NotFound, "NOT_FOUND")
		p.fn = func(context.Context) error { return fmt.Errorf("load: %w", apierr.NotFound("session", "sessions/x")) }
		err = rpc(ctx, cc)
		testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND")
		require.Equal(t, "session sessions/x not found", status.Convert(err).Message(), name)
		p.fn = func(context.Context) error { return context.DeadlineExceeded }
		testenv.RequireReason(t, rpc(ctx, cc), codes.DeadlineExceeded, apierr.ReasonDeadlineExceeded)
		p.fn = func(context.Context) error { panic("boom") }
		testenv.RequireReason(t, rpc(ctx, cc), codes.Internal, apierr.ReasonInternal)
		testenv.RequireReason(t, rpc(context.Background(), cc), codes.Unauthenticated, identity.ReasonIdentityMissing)
	}

	// Metrics count the code the caller got (a panic, recovered outside
	// them, is not counted).
	require.Equal(t, 2.0, testutil.ToFloat64(mustCounter(t, reg, "/sylk.test.Probe/Call", "NotFound")))
	require.Equal(t, 1.0, testutil.ToFloat64(mustCounter(t, reg, "/sylk.test.Probe/Watch", "Internal")))

	r, err := http.Get("http://" + httpAddr + "/healthz")
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
}

func mustCounter(t *testing.T, reg *prometheus.Registry, method, code string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sylk_grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["code"] == code {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no counter for %s %s", method, code)
	return nil
}

func TestGracefulShutdownDrains(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	p := &probe{fn: func(context.Context) error {
		close(entered)
		<-release
		return nil
	}}
	reg := prometheus.NewRegistry()
	srv, err := grpcserver.New(grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: 10 * time.Second, MaxRecvBytes: 1 << 20}, logx.Discard(), reg, reg)
	require.NoError(t, err)
	p.register(srv.GRPC())
	require.NoError(t, srv.Listen())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	cc, err := grpcclient.Dial(srv.GRPCAddr(), nil)
	require.NoError(t, err)
	defer cc.Close()

	callErr := make(chan error, 1)
	id := identity.Identity{TenantID: "acme", UserID: "ann"}
	go func() { callErr <- call(identity.NewContext(context.Background(), id), cc) }()
	<-entered
	cancel() // SIGTERM: the in-flight call still completes
	close(release)
	require.NoError(t, <-callErr)
	require.NoError(t, <-done)
}

// TestSignedIdentity: a server with a signer takes only identities a client
// with the same key signed; anyone else who reaches its port and names a
// caller, or reuses another caller's signature, is refused.
func TestSignedIdentity(t *testing.T) {
	t.Parallel()
	key := []byte("a key the services of one deployment share")
	signer, err := identity.NewSigner(key)
	require.NoError(t, err)
	var seen identity.Identity
	p := &probe{fn: func(ctx context.Context) error {
		seen, _ = identity.FromContext(ctx)
		return nil
	}}
	srv, _ := serve(t, p, grpcserver.WithSigner(signer))
	ann := identity.Identity{TenantID: "acme", UserID: "ann", Role: identity.RoleMember}
	root := identity.Identity{TenantID: "other", UserID: "root", Role: identity.RoleAdmin}

	// A service of the deployment.
	require.NoError(t, call(identity.NewContext(context.Background(), ann), dial(t, srv, signer)))
	require.Equal(t, ann, seen)

	// Unsigned, signed under another key, ann's signature on another
	// identity, or a signature for another method: refused.
	other, err := identity.NewSigner([]byte("some other deployment's key, long enough"))
	require.NoError(t, err)
	for name, c := range map[string]struct {
		cc  *grpc.ClientConn
		ctx context.Context
	}{
		"unsigned":  {dial(t, srv, nil), identity.NewContext(context.Background(), root)},
		"other key": {dial(t, srv, other), identity.NewContext(context.Background(), root)},
		"reused signature": {dial(t, srv, nil), metadata.AppendToOutgoingContext(identity.AppendOutgoing(context.Background(), root),
			identity.MDSignature, signer.Sign(ann, "/sylk.test.Probe/Call"))},
		"other method": {dial(t, srv, nil), metadata.AppendToOutgoingContext(identity.AppendOutgoing(context.Background(), root),
			identity.MDSignature, signer.Sign(root, "/sylk.test.Probe/Other"))},
	} {
		err := call(c.ctx, c.cc)
		testenv.RequireReason(t, err, codes.Unauthenticated, identity.ReasonIdentityUnsigned)
		require.ErrorContains(t, err, "not signed by a service of this deployment", name)
	}

	// Health needs no caller; a named but unsigned one is still refused.
	plain := dial(t, srv, nil)
	_, err = healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = healthpb.NewHealthClient(plain).Check(identity.AppendOutgoing(context.Background(), root), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

package testenv

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
)

// RequireCode fails the test unless err is a gRPC status with code whose
// message holds each of contains.
func RequireCode(t testing.TB, err error, code codes.Code, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s status, got no error", code)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("want a %s status, got an error that is not a status: %v", code, err)
	}
	if st.Code() != code {
		t.Fatalf("want a %s status, got %s: %s", code, st.Code(), st.Message())
	}
	for _, c := range contains {
		if !strings.Contains(st.Message(), c) {
			t.Fatalf("%s status %q does not say %q", code, st.Message(), c)
		}
	}
}

// RequireReason is RequireCode, and fails the test unless the status also
// carries an ErrorInfo of the Sylk domain (apierr.Domain) with reason, the
// reason clients branch on.
func RequireReason(t testing.TB, err error, code codes.Code, reason string, contains ...string) {
	t.Helper()
	RequireCode(t, err, code, contains...)
	st := status.Convert(err)
	info := apierr.Info(st)
	if info == nil {
		t.Fatalf("%s status %q carries no ErrorInfo, want reason %s", code, st.Message(), reason)
	}
	if info.GetReason() != reason || info.GetDomain() != apierr.Domain {
		t.Fatalf("%s status %q has reason %s in domain %q, want %s in %q", code, st.Message(), info.GetReason(), info.GetDomain(), reason, apierr.Domain)
	}
}

// ServeGRPC serves what register adds on a server with the mesh's
// interceptor chain (grpcserver), on a loopback port, until the test ends,
// and returns a connection to it. The connection sends the caller identity
// of each call's context (identity.AppendOutgoing) unsigned, which the
// server takes. opts are the server's.
func ServeGRPC(t testing.TB, register func(*grpc.Server), opts ...grpcserver.Option) *grpc.ClientConn {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: 5 * time.Second, MaxRecvBytes: 8 << 20}
	srv, err := grpcserver.New(cfg, logx.Discard(), reg, reg, opts...)
	if err != nil {
		t.Fatalf("grpc server: %v", err)
	}
	register(srv.GRPC())
	if err := srv.Listen(); err != nil {
		t.Fatalf("grpc server: %v", err)
	}
	Start(t, srv.Run)
	conn, err := grpcclient.Dial(srv.GRPCAddr(), nil)
	if err != nil {
		t.Fatalf("dial %s: %v", srv.GRPCAddr(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
)

// ServeGRPC serves what register adds on a localhost listener, with the
// mesh's interceptors (pkg/grpcserver), until the test ends, and returns a
// client connection to it.
func ServeGRPC(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	srv, err := grpcserver.New(grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: time.Second, MaxRecvBytes: 1 << 20},
		logx.Discard(), prometheus.NewRegistry(), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("grpc server: %v", err)
	}
	register(srv.GRPC())
	if err := srv.Listen(); err != nil {
		t.Fatalf("grpc listen: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpcclient.Dial(srv.GRPCAddr(), nil)
	if err != nil {
		stop()
		<-done
		t.Fatalf("grpc dial: %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("grpc server: %v", err)
		}
	})
	return conn
}

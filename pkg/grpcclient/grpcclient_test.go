package grpcclient_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/grpcclient"
)

// serveHealth serves grpc.health.v1 on addr ("127.0.0.1:0" for any port)
// until the test ends or the returned server is stopped.
func serveHealth(t *testing.T, addr string) (*grpc.Server, string) {
	t.Helper()
	return serveNamed(t, addr, "")
}

// serveNamed is serveHealth whose health service reports the service name
// (and no other) SERVING, so that a client tells the servers apart.
func serveNamed(t *testing.T, addr, name string) (*grpc.Server, string) {
	t.Helper()
	var ln net.Listener
	require.Eventually(t, func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "listen on %s", addr)
	srv := grpc.NewServer()
	hs := health.NewServer()
	if name != "" {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return srv, ln.Addr().String()
}

// A call made right after its service restarted waits for the connection
// instead of failing UNAVAILABLE while the client backs off from the
// failed reconnection attempts of the restart.
func TestCallRightAfterARestartSucceeds(t *testing.T) {
	t.Parallel()
	srv, addr := serveHealth(t, "127.0.0.1:0")
	cc, err := grpcclient.Dial(addr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	client := healthpb.NewHealthClient(cc)
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	require.NoError(t, check())

	// The service restarts: down, and its client's reconnection attempts
	// fail, then back on the same address.
	srv.Stop()
	require.Eventually(t, func() bool { return status.Code(check()) == codes.Unavailable }, 5*time.Second, 10*time.Millisecond)
	serveHealth(t, addr)
	restarted := time.Now()
	failed := 0
	for {
		err := check()
		if err == nil {
			break
		}
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		failed++
		require.Less(t, time.Since(restarted), 10*time.Second, "never reconnected")
	}
	t.Logf("first call after the restart answered in %s (%d calls failed before)", time.Since(restarted), failed)
	require.Zero(t, failed, "calls after the restart failed")
}

// A target that lists several replicas balances calls over them, and over
// those left when one stops.
func TestListedReplicasAreBalanced(t *testing.T) {
	t.Parallel()
	a, addrA := serveNamed(t, "127.0.0.1:0", "a")
	_, addrB := serveNamed(t, "127.0.0.1:0", "b")
	cc, err := grpcclient.Dial(addrA+", "+addrB, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	client := healthpb.NewHealthClient(cc)
	// served makes 20 calls and counts the replica that answered each:
	// only a knows the name "a".
	served := func() map[string]int {
		out := map[string]int{}
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "a"})
			cancel()
			switch status.Code(err) {
			case codes.OK:
				out["a"]++
			case codes.NotFound:
				out["b"]++
			default:
				out["error: "+err.Error()]++
			}
		}
		return out
	}
	require.Eventually(t, func() bool { got := served(); return len(got) == 2 && got["a"] > 0 && got["b"] > 0 }, 5*time.Second, 10*time.Millisecond,
		"calls reach both replicas")

	a.Stop()
	require.Eventually(t, func() bool { got := served(); return len(got) == 1 && got["b"] == 20 }, 5*time.Second, 10*time.Millisecond,
		"every call goes to the replica left")
}

// A replica list with a malformed address is refused.
func TestMalformedReplicaListIsRefused(t *testing.T) {
	t.Parallel()
	_, err := grpcclient.Dial("127.0.0.1:1, nohostport", nil)
	require.ErrorContains(t, err, `replica address "nohostport"`)
}

package grpcserver_test

import (
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// Reflection lists every service and message of a server: it is off
// unless asked for (`sylk dev` asks).
func TestReflectionOffByDefault(t *testing.T) {
	t.Parallel()
	var cfg grpcserver.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.NoError(t, fs.Parse(nil))
	require.False(t, cfg.Reflection, "reflection is off in the serve configuration")

	for _, on := range []bool{false, true} {
		cfg := grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: 5 * time.Second, MaxRecvBytes: 1 << 20, Reflection: on}
		reg := prometheus.NewRegistry()
		srv, err := grpcserver.New(cfg, logx.Discard(), reg, reg)
		require.NoError(t, err)
		require.NoError(t, srv.Listen())
		testenv.Start(t, srv.Run)
		stream, err := reflectionpb.NewServerReflectionClient(dial(t, srv, nil)).ServerReflectionInfo(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"}}))
		resp, err := stream.Recv()
		if !on {
			require.Equal(t, codes.Unimplemented, status.Code(err), "reflection is not served: %v", err)
			continue
		}
		require.NoError(t, err)
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		require.Contains(t, names, "grpc.health.v1.Health")
	}
}

package archivalist

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

func TestGRPCRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	reg := prometheus.NewRegistry()
	srv, err := grpcserver.New(grpcserver.Config{ListenAddress: "127.0.0.1:0", DrainTimeout: 5 * time.Second, MaxRecvBytes: 4 << 20}, logx.Discard(), reg, reg)
	require.NoError(t, err)
	f.svc.Register(srv.GRPC())
	require.NoError(t, srv.Listen())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	cc, err := grpcclient.Dial(srv.GRPCAddr(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	client := archivalistv1.NewArchivalistServiceClient(cc)

	_, err = client.CreateEntry(context.Background(), &archivalistv1.CreateEntryRequest{Entry: &archivalistv1.Entry{Category: "note", Title: "x"}})
	requireCode(t, err, codes.Unauthenticated)

	call := identity.AppendOutgoing(context.Background(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember})
	session := ids.New()
	created, err := client.CreateEntry(call, &archivalistv1.CreateEntryRequest{Entry: &archivalistv1.Entry{
		Category: "outcome", Title: "Shipped the gateway", Content: "REST edge is live.", SessionId: session,
	}})
	require.NoError(t, err)
	require.Equal(t, "u1", created.GetEntry().GetUserId())

	found, err := client.SearchEntries(call, &archivalistv1.SearchEntriesRequest{Query: "gateway", SessionId: session})
	require.NoError(t, err)
	require.Len(t, found.GetHits(), 1)
	require.True(t, proto.Equal(created.GetEntry(), found.GetHits()[0].GetEntry()))

	_, err = client.SearchEntries(call, &archivalistv1.SearchEntriesRequest{Query: "gateway"})
	requireCode(t, err, codes.InvalidArgument, "session_id: required unless cross_session is set")
	_, err = client.GetEntry(call, &archivalistv1.GetEntryRequest{Name: "entries/" + ids.New()})
	requireCode(t, err, codes.NotFound)
}

package archivalist

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
)

func TestGRPCRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	client := archivalistv1.NewArchivalistServiceClient(testenv.ServeGRPC(t, f.svc.Register))

	_, err := client.CreateEntry(context.Background(), &archivalistv1.CreateEntryRequest{Entry: &archivalistv1.Entry{Category: "note", Title: "x"}})
	testenv.RequireCode(t, err, codes.Unauthenticated)

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
	testenv.RequireCode(t, err, codes.InvalidArgument, "session_id: required unless cross_session is set")
	_, err = client.GetEntry(call, &archivalistv1.GetEntryRequest{Name: "entries/" + ids.New()})
	testenv.RequireCode(t, err, codes.NotFound)
}

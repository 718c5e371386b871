package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/identity"
)

// TestInternalCallsAreSigned: the services' gRPC ports are reachable by
// anything beside them (task commands included), so a call that names a
// caller without the deployment's signature is refused, while the same call
// signed with the internal key is served.
func TestInternalCallsAreSigned(t *testing.T) {
	t.Parallel()
	const key = "an internal key for this test only, 32 bytes or more"
	c := startMesh(t, "-internal.key", key)
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "private"})["session"].(map[string]any)["name"].(string)

	admin := identity.Identity{TenantID: "default", UserID: "admin", Role: identity.RoleAdmin}
	forged := identity.AppendOutgoing(context.Background(), admin)

	plain, err := grpcclient.Dial(c.services["guide"], nil)
	require.NoError(t, err)
	defer plain.Close()
	_, err = guidev1.NewSessionServiceClient(plain).ListSessions(forged, &guidev1.ListSessionsRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "not signed by a service of this deployment")

	orch, err := grpcclient.Dial(c.services["orchestrator"], nil)
	require.NoError(t, err)
	defer orch.Close()
	_, err = orchestratorv1.NewWorkflowServiceClient(orch).ListRuns(forged, &orchestratorv1.ListRunsRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	// Signed with the deployment's key, the same call is served.
	signer, err := identity.NewSigner([]byte(key))
	require.NoError(t, err)
	signed, err := grpcclient.Dial(c.services["guide"], signer)
	require.NoError(t, err)
	defer signed.Close()
	resp, err := guidev1.NewSessionServiceClient(signed).ListSessions(identity.NewContext(context.Background(), admin), &guidev1.ListSessionsRequest{})
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetSessions() {
		names = append(names, s.GetName())
	}
	require.Contains(t, names, sess)
}

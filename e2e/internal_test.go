package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/toolexec"
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

// TestSecretFilesHiddenFromTasks: a key the services read from a file (a
// mounted Secret) is out of reach of the task commands the worker runs.
func TestSecretFilesHiddenFromTasks(t *testing.T) {
	t.Parallel()
	const key = "an internal key read from a file, 32 bytes or more"
	keyFile := filepath.Join(t.TempDir(), "internal-key")
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o600))
	// Workspaces elsewhere than the default (all of the temporary
	// directory, which would hide the file anyway).
	c := startMesh(t, "-internal.key-file", keyFile, "-worker.workspace-root", t.TempDir())
	run := c.waitRun(c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{
		map[string]any{"id": "read", "command": "cat " + keyFile},
	}}}))
	n := nodeMap(run)["read"]
	require.NotContains(t, fmt.Sprint(n["stdout"]), key)
	if toolexec.LandlockABI() == 0 {
		// This kernel cannot confine commands; they run as the worker.
		return
	}
	require.Equal(t, "NODE_STATE_FAILED", n["state"], "%v", n)
	require.Contains(t, fmt.Sprint(n["stderr"]), "Permission denied")
}

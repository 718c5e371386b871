package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/meshtls/meshtlstest"
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

// TestInternalTLS: with -tls.*, the services serve and dial each other over
// mutual TLS. REST works through the gateway to every service it reaches,
// a call to a service's port without a certificate of the deployment's
// authority is refused, the healthcheck command speaks TLS, and task commands
// cannot read the key.
func TestInternalTLS(t *testing.T) {
	t.Parallel()
	ca := meshtlstest.NewCA(t, "e2e mesh")
	files := ca.Write(t, t.TempDir(), "127.0.0.1")
	c := startMesh(t, append(files.Flags(), "-worker.workspace-root", t.TempDir())...)

	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "over TLS"})["session"].(map[string]any)["name"].(string)
	help := c.ok("POST", "/v1/"+sess+"/messages", map[string]any{"text": "/help"})
	require.Equal(t, "guide", help["route"].(map[string]any)["target"])
	run := c.waitRun(c.createRun(map[string]any{"sessionId": strings.TrimPrefix(sess, "sessions/"), "dag": map[string]any{"nodes": []any{
		map[string]any{"id": "hello", "command": "echo hello"},
		map[string]any{"id": "read", "command": "cat " + files.Key},
	}}}))
	nodes := nodeMap(run)
	require.Equal(t, "NODE_STATE_SUCCEEDED", nodes["hello"]["state"], "%v", nodes["hello"])
	require.NotContains(t, fmt.Sprint(nodes["read"]["stdout"]), "PRIVATE KEY")
	if toolexec.LandlockABI() > 0 {
		require.Equal(t, "NODE_STATE_FAILED", nodes["read"]["state"], "%v", nodes["read"])
	}

	ctx := context.Background()
	plain, err := grpcclient.Dial(c.services["guide"], nil)
	require.NoError(t, err)
	defer plain.Close()
	_, err = healthpb.NewHealthClient(plain).Check(ctx, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "plaintext: %v", err)

	rogue := meshtlstest.NewCA(t, "rogue").Write(t, t.TempDir(), "127.0.0.1")
	require.NoError(t, os.WriteFile(rogue.CA, readFile(t, files.CA), 0o600))
	require.Error(t, mesh.Healthcheck(ctx, "guide", append(rogue.Flags(), "-grpc.listen-address", c.services["guide"]), io.Discard),
		"a certificate of another authority")
	require.NoError(t, mesh.Healthcheck(ctx, "guide", append(files.Flags(), "-grpc.listen-address", c.services["guide"]), io.Discard))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

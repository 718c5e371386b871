package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// services are Sylk's deployables; each has a main package at ./cmd/sylk-<name>.
var services = []string{"guide", "architect", "orchestrator", "worker", "librarian", "archivalist", "academic", "gateway"}

// gitServices run git, so their images have it, and read or write the
// repositories of runs, so they mount the volume of repositories at
// repositoriesPath.
var gitServices = []string{"worker", "librarian", "orchestrator"}

// repositoriesPath is where the volume of repositories is mounted.
const repositoriesPath = "/repositories"

// peerServices are the services other services reach by gRPC address
// (SYLK_PEER_<NAME>).
var peerServices = []string{"guide", "architect", "orchestrator", "librarian", "archivalist", "academic"}

// requiredPeers lists the peer addresses a service cannot start without.
var requiredPeers = map[string][]string{
	"architect": {"orchestrator"},
	"gateway":   peerServices,
}

// Ports every service listens on inside its container or pod.
const (
	grpcPort    = 9090
	metricsPort = 9091
	gatewayPort = 8080
)

// The distroless "nonroot" user the images run as.
const nonRootUID = 65532

// repoRoot is the repository root: the deploy module sits one level below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	root := filepath.Dir(wd)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "expected the repository root (with go.mod) above %s", wd)
	return root
}

// requireCommandDir fails unless ./cmd/<bin> is a directory of the repository.
func requireCommandDir(t *testing.T, root, bin string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(root, "cmd", bin))
	require.NoError(t, err, "the image build needs the main package ./cmd/%s", bin)
	require.True(t, fi.IsDir(), "./cmd/%s must be a directory", bin)
}

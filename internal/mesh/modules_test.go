package mesh

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"sylk.dev/sylk/pkg/pgstore"
)

// The module table holds together: unique names, peers that can be
// called, a configuration for each, a constructor for each service.
func TestModuleTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, m := range modules {
		require.False(t, seen[m.name], "%s is in the table twice", m.name)
		seen[m.name] = true
		require.NotNil(t, m.config, m.name)
		require.Equal(t, m.rest, m.build == nil, "%s: every gRPC service, and only those, has a constructor", m.name)
		for _, n := range m.peers() {
			peer, err := lookup(n)
			require.NoError(t, err, "%s calls %s", m.name, n)
			require.NotNil(t, peer.client, "%s calls %s, which no one can call", m.name, n)
			require.NotEqual(t, m.name, n, "%s calls itself", m.name)
		}
		for _, n := range m.needs {
			require.NotContains(t, m.uses, n, "%s both needs and uses %s", m.name, n)
		}
		if m.schema != "" {
			require.True(t, pgstore.ValidSchema(m.schema), m.schema)
		}
	}
	require.Equal(t, []string{"auth", "llm", "audit"}, Schemas[len(Schemas)-3:])
	require.NotContains(t, Schemas, Worker, "the worker keeps no state in Postgres")
}

// The gateway connects to every service that has an API.
func TestGatewayReachesEveryAPI(t *testing.T) {
	t.Parallel()
	gw := mustLookup(t, Gateway)
	conns := map[string]*grpc.ClientConn{}
	for _, m := range modules {
		if m.client == nil {
			continue
		}
		require.Contains(t, gw.needs, m.name)
		c, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		conns[m.name] = c
	}
	_, gc := clients(gw, conns)
	for name, c := range map[string]*grpc.ClientConn{Guide: gc.Guide, Architect: gc.Architect, Orchestrator: gc.Orchestrator,
		Librarian: gc.Librarian, Archivalist: gc.Archivalist, Academic: gc.Academic} {
		require.Same(t, conns[name], c, name)
	}
	// A service gets only the peers it calls, and none it was not given.
	peers, _ := clients(mustLookup(t, Orchestrator), conns)
	require.Same(t, conns[Guide], peers.Guide)
	require.Same(t, conns[Librarian], peers.Librarian, "it checks that a repository to review is registered")
	require.Nil(t, peers.Archivalist)
	peers, _ = clients(mustLookup(t, Architect), map[string]*grpc.ClientConn{Guide: conns[Guide]})
	require.Nil(t, peers.Orchestrator, "an absent peer is a nil interface, not a typed nil")
}

// Each module has its own binary, cmd/sylk-<name>, running it.
func TestEveryModuleHasABinary(t *testing.T) {
	t.Parallel()
	for _, name := range moduleNames() {
		src, err := os.ReadFile(filepath.Join("..", "..", "cmd", "sylk-"+name, "main.go"))
		require.NoError(t, err, name)
		require.Contains(t, string(src), `mesh.ServiceMain("`+name+`", os.Args[1:])`)
	}
	dirs, err := filepath.Glob(filepath.Join("..", "..", "cmd", "sylk-*"))
	require.NoError(t, err)
	for _, d := range dirs {
		name := filepath.Base(d)[len("sylk-"):]
		require.True(t, name == "task-init" || slices.Contains(moduleNames(), name), "cmd/sylk-%s runs no module", name)
	}
}

package librarian

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/testenv"
)

// TestDiscoverToolsSharedCache runs two replicas on one database and one
// Redis prefix: an answer computed by one is served by the other, and a
// change to a configuration file the detection reads invalidates it for
// both.
func TestDiscoverToolsSharedCache(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	replica, _ := replicas(t, rdb)
	a, b := replica(), replica()
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"pyproject.toml": "[project]\nname = 'x'\n", "app/main.py": "print(1)\n"})
	repo := create(t, ctx, a, root, false)
	discover := func(svc *Service, refresh bool) *librarianv1.DiscoverToolsResponse {
		t.Helper()
		resp, err := svc.DiscoverTools(ctx, &librarianv1.DiscoverToolsRequest{Repository: repo.GetName(), Refresh: refresh})
		require.NoError(t, err)
		return resp
	}

	first := discover(a, false)
	require.False(t, first.GetCached())
	require.Equal(t, "unittest", first.GetTestFrameworks()[0].GetId())
	// The answer is stored under a key naming the tenant and repository.
	n, err := rdb.Exists(ctx, rdb.Key("librarian", "tools", "t1", repo.GetId())).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	fromB := discover(b, false)
	require.True(t, fromB.GetCached(), "the other replica serves the shared answer")
	require.Equal(t, first.GetTestFrameworks()[0].GetId(), fromB.GetTestFrameworks()[0].GetId())
	require.Len(t, fromB.GetFormatters(), len(first.GetFormatters()))

	// A change to a file the detection reads invalidates the answer on
	// every replica; the one that recomputes it shares the new answer.
	writeFile(t, root, "pyproject.toml", "[project]\nname = 'x'\n[tool.pytest.ini_options]\n[tool.ruff]\n")
	changed := discover(b, false)
	require.False(t, changed.GetCached())
	require.Equal(t, "pytest", changed.GetTestFrameworks()[0].GetId())
	require.Equal(t, "ruff-format", changed.GetFormatters()[0].GetId())
	fromA := discover(a, false)
	require.True(t, fromA.GetCached())
	require.Equal(t, "pytest", fromA.GetTestFrameworks()[0].GetId())

	// A new configuration file changes the fingerprint too.
	writeFile(t, root, "conftest.py", "")
	require.False(t, discover(a, false).GetCached())
	require.True(t, discover(b, false).GetCached())

	// refresh recomputes and stores.
	require.False(t, discover(b, true).GetCached())
	require.True(t, discover(a, false).GetCached())

	// Another tenant neither sees the repository nor shares its entry.
	_, err = b.DiscoverTools(as(t, "other"), &librarianv1.DiscoverToolsRequest{Repository: repo.GetName()})
	require.Equal(t, codes.NotFound, status.Code(err))
}

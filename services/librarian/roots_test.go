package librarian

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/testenv"
)

// A tenant's own roots are its alone: another tenant is refused there as
// anywhere outside its roots, with the same words whether the directory
// exists or not, and a link inside a root leading to another tenant's root
// is refused too.
func TestAllowedRootsPerTenant(t *testing.T) {
	t.Parallel()
	shared, acme, beta := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{shared, acme, beta} {
		require.NoError(t, os.Mkdir(filepath.Join(d, "repo"), 0o755))
	}
	require.NoError(t, os.Symlink(filepath.Join(acme, "repo"), filepath.Join(beta, "to-acme")))
	h := newHarness(t, false, "-librarian.allowed-roots", shared+",acme="+acme+",beta="+beta)

	create(t, as(t, "acme"), h.svc, filepath.Join(acme, "repo"), false)
	create(t, as(t, "acme"), h.svc, filepath.Join(shared, "repo"), false)
	create(t, as(t, "beta"), h.svc, filepath.Join(beta, "repo"), false)

	refusal := func(path string) string {
		t.Helper()
		_, err := h.svc.CreateRepository(as(t, "beta"), &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Path: path}})
		testenv.RequireReason(t, err, codes.PermissionDenied, reasonPathNotAllowed)
		return status.Convert(err).Message()
	}
	existing := refusal(filepath.Join(acme, "repo"))
	missing := refusal(filepath.Join(acme, "nothing-here"))
	require.Equal(t, existing, refusal(filepath.Join(acme, "repo")+"/"), "the same path spelt otherwise")
	require.Equal(t, "repository.path: "+`"`+filepath.Join(acme, "repo")+`" is not under a directory this deployment allows for your tenant (librarian.allowed-roots)`, existing)
	require.Equal(t, "repository.path: "+`"`+filepath.Join(acme, "nothing-here")+`" is not under a directory this deployment allows for your tenant (librarian.allowed-roots)`, missing)
	link := refusal(filepath.Join(beta, "to-acme"))
	require.NotContains(t, link, acme, "the refusal does not say where the link leads")

	// A tenant with no roots of its own has the shared ones only.
	create(t, as(t, "gamma"), h.svc, filepath.Join(shared, "repo"), false)
	_, err := h.svc.CreateRepository(as(t, "gamma"), &librarianv1.CreateRepositoryRequest{Repository: &librarianv1.Repository{Path: filepath.Join(beta, "repo")}})
	testenv.RequireReason(t, err, codes.PermissionDenied, reasonPathNotAllowed)
}

package natsx

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The embedded server's directory is its user's alone: made or changed to
// 0700, and refused when it is a link (or another user's, as one made first
// in a shared /tmp would be).
func TestEmbeddedDirIsPrivate(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fresh := filepath.Join(root, "fresh")
	require.NoError(t, privateDir(fresh))
	info, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	open := filepath.Join(root, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o755))
	require.NoError(t, privateDir(open))
	info, err = os.Stat(open)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "closed to others")

	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(fresh, link))
	require.ErrorContains(t, privateDir(link), "not a directory")
}

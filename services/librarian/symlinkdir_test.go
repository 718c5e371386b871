package librarian

import (
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// A directory replaced by a symlink leading out of the repository is not
// followed by a delta: the changed paths under it are gone, not read
// through the link.
func TestDeltaDoesNotFollowLinkedDirectories(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"conf/leak.txt": "harmless\n", "main.go": "package main\n"})
	repo := create(t, ctx, h.svc, root, true)

	outside := t.TempDir()
	writeFile(t, outside, "leak.txt", "outsideonlyword\n")
	require.NoError(t, os.RemoveAll(filepath.Join(root, "conf")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "conf")))
	commitAll(t, root, "conf is a link now")

	idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	require.True(t, idx.GetDelta())
	require.Empty(t, search(t, ctx, h.svc, "outsideonlyword"), "nothing outside the repository is indexed")
	require.Equal(t, int64(1), idx.GetRepository().GetFileCount(), "conf/leak.txt left the index")
}

// go.mod is read only inside the repository: a link to a file outside (or
// to a device that never ends) names no module.
func TestGoModOutsideIsNotRead(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, outside, "go.mod", "module outside.example/secret\n")
	root := gitRepo(t, map[string]string{"a/a.go": "package a\n\nfunc Hello() {}\n"})
	require.NoError(t, os.Symlink(filepath.Join(outside, "go.mod"), filepath.Join(root, "go.mod")))
	require.Empty(t, goModulePath(root))
	require.NoError(t, os.Remove(filepath.Join(root, "go.mod")))
	require.NoError(t, os.Symlink(os.DevNull, filepath.Join(root, "go.mod")))
	require.Empty(t, goModulePath(root))
	require.NoError(t, os.Remove(filepath.Join(root, "go.mod")))
	writeFile(t, root, "mod/go.mod", "module inside.example/m\n")
	require.NoError(t, os.Symlink(filepath.Join(root, "mod", "go.mod"), filepath.Join(root, "go.mod")))
	require.Equal(t, "inside.example/m", goModulePath(root))
}

// The ignore files are read as go.mod is: a .gitignore linking outside the
// repository adds no rule, and one of endless lines adds a bounded number.
func TestGitignoreReadInsideAndBounded(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, outside, "ignore", "secret.txt\n")
	root := gitRepo(t, map[string]string{"secret.txt": "x\n"})
	require.NoError(t, os.Symlink(filepath.Join(outside, "ignore"), filepath.Join(root, ".gitignore")))
	var linked ignoreRules
	linked.loadGitignore(root)
	require.False(t, linked.match("secret.txt", false), "a rule from outside the repository")

	require.NoError(t, os.Remove(filepath.Join(root, ".gitignore")))
	writeFile(t, root, ".gitignore", strings.Repeat("*.tmp\r\n", 3*maxIgnoreRules))
	var many ignoreRules
	many.loadGitignore(root)
	require.Len(t, many.rules, maxIgnoreRules)
	require.True(t, many.match("a/b.tmp", false), "a line ending CR LF is read without the CR")
}

// A file is read through the repository root: a directory on its way that
// was swapped for a link leading out after the walk checked it (a race with
// a writer of the checkout) yields nothing, and a FIFO in a file's place
// does not stall the read.
func TestReadStaysInsideTheRoot(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, outside, "leak.txt", "outsideonlyword\n")
	root := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "conf")))
	w := &walker{root: root, maxFileBytes: 1 << 20, chunkLines: 50, maxChunkLines: 100}
	_, reason := w.read(filepath.Join(root, "conf", "leak.txt"), "conf/leak.txt")
	require.Equal(t, skipUnreadable, reason)

	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "pipe.go"), 0o600))
	_, reason = w.read(filepath.Join(root, "pipe.go"), "pipe.go")
	require.Equal(t, skipUnreadable, reason)
}

// A member's ssh or git remote is pinned to the address checked, as an
// http(s) one is: git itself expands the URL to that address (ssh, with
// the service's own options, still checks the name's host key), so a name that answers differently the
// second time leads nowhere else. A host that is no DNS name is refused:
// it would reach ssh's command line.
func TestRemotePinnedToTheAddressChecked(t *testing.T) {
	t.Parallel()
	addr := netip.MustParseAddr("93.184.216.34")
	for _, tt := range []struct{ raw, want, ssh string }{
		{"git://example.com/org/repo.git", "git://93.184.216.34/org/repo.git", ""},
		{"ssh://git@example.com:2222/org/repo.git", "ssh://git@93.184.216.34:2222/org/repo.git", "ssh -i /keys/id -o HostKeyAlias=example.com"},
		{"ssh://Example.COM/repo", "ssh://93.184.216.34/repo", "ssh -i /keys/id -o HostKeyAlias=Example.COM"},
	} {
		u, err := url.Parse(tt.raw)
		require.NoError(t, err)
		pin, err := pinRemote(tt.raw, u, addr, "ssh -i /keys/id")
		require.NoError(t, err)
		args := []string{"-c", pin[0]}
		if tt.ssh != "" {
			require.Equal(t, "core.sshCommand="+tt.ssh, pin[1])
		}
		out, err := exec.Command("git", append(args, "ls-remote", "--get-url", tt.raw)...).Output()
		require.NoError(t, err)
		require.Equal(t, tt.want, strings.TrimSpace(string(out)), tt.raw)
	}
	pin, err := pinRemote("ssh://h/r", &url.URL{Scheme: "ssh", Host: "a;touch x"}, addr, "ssh")
	require.Error(t, err)
	require.Nil(t, pin)
	six, err := pinRemote("git://example.com/r", &url.URL{Scheme: "git", Host: "example.com"}, netip.MustParseAddr("2606:2800:220:1::1"), "ssh")
	require.NoError(t, err)
	require.Equal(t, []string{"url.git://[2606:2800:220:1::1]/.insteadOf=git://example.com/"}, six)
}

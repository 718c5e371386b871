package toolexec

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// sandboxModes are the two ways a command is kept off the host's network:
// namespaces, and Landlock's network rules without them.
func sandboxModes(t *testing.T, cfg Config, f func(t *testing.T, e *Executor, a string)) {
	for _, mode := range []string{"namespaces", "landlock"} {
		t.Run(mode, func(t *testing.T) {
			c := cfg
			if mode == "namespaces" {
				nc := namespacedConfig(t)
				c.Namespaces, c.TaskInit = nc.Namespaces, nc.TaskInit
			} else {
				if LandlockABI() < 4 {
					t.Skip("this kernel has no Landlock network rules")
				}
				c.Namespaces = NamespacesOff
			}
			e, a, _, _ := confinedSetup(t, c)
			ns, _ := e.Namespaced()
			require.Equal(t, mode == "namespaces", ns)
			f(t, e, a)
		})
	}
}

// listen serves a TCP port of the host and a world-writable unix socket,
// as the stores do, and counts what connects.
func listen(t *testing.T) (tcp, sock string, accepted func() int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	sock = filepath.Join(dir, ".s.PGSQL.5432")
	us, err := net.Listen("unix", sock)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(sock, 0o777))
	n := make(chan struct{}, 100)
	for _, l := range []net.Listener{ln, us} {
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				n <- struct{}{}
				_ = c.Close()
			}
		}()
	}
	return ln.Addr().String(), sock, func() int { return len(n) }
}

// By default a command connects to nothing of the host: neither a TCP port
// on loopback or another of its addresses, nor the metadata address, nor
// a unix socket; its own loopback (namespaces) and socket pairs work.
func TestNetworkNoneReachesNothingOfTheHost(t *testing.T) {
	t.Parallel()
	attack := nsAttack(t)
	tcp, sock, accepted := listen(t)
	_, port, _ := net.SplitHostPort(tcp)
	sandboxModes(t, testConfig(), func(t *testing.T, e *Executor, a string) {
		run := func(args ...string) Result {
			res, err := e.Execute(context.Background(), Invocation{Command: attack, Args: args, WorkingDir: a, Workspace: a})
			require.NoError(t, err)
			return res
		}
		for _, target := range [][]string{{"tcp", tcp}, {"tcp", "[::1]:" + port}, {"tcp", hostAddr(t) + ":" + port},
			{"tcp", "169.254.169.254:80"}, {"unix", sock}, {"unix", "/var/run/postgresql/.s.PGSQL.5432"}} {
			res := run("dial", target[0], target[1])
			require.NotZero(t, res.ExitCode, "%v: %s", target, res.Stdout)
			require.NotContains(t, res.Stdout, "connected")
		}
		require.Zero(t, accepted(), "a command reached the host's listener")
		// Pipes and socket pairs (a shell's, Python's) still work.
		res := shell(t, e, a, `python3 -c 'import socket; a, b = socket.socketpair(); a.send(b"pair"); print(b.recv(4).decode())'`)
		require.Equal(t, "pair\n", res.Stdout, res.Stderr)
	})
}

// hostAddr is an address of this host other than loopback, or loopback
// when it has none.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr().String()
		}
	}
	return "127.0.0.1"
}

// In namespaces a command's loopback is its own: a server it starts there
// answers it.
func TestNetworkNoneOwnLoopback(t *testing.T) {
	t.Parallel()
	e, a, _, _ := confinedSetup(t, namespacedConfig(t))
	res := shell(t, e, a, `python3 -c '
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
threading.Thread(target=lambda: s.accept()[0].send(b"own")).start()
c = socket.create_connection(s.getsockname()); print(c.recv(3).decode())'`)
	require.Equal(t, "own\n", res.Stdout, res.Stderr)
}

// The allow-list opens the destinations it names, through the egress
// proxy, and nothing else: a server of the host that is listed answers, one
// that is not is refused by the proxy, and a name that resolves to the
// host is refused unless its address is listed as such.
func TestNetworkAllowList(t *testing.T) {
	t.Parallel()
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed answers") }))
	t.Cleanup(allowed.Close)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other answers") }))
	t.Cleanup(other.Close)
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls answers") }))
	t.Cleanup(tls.Close)
	_, tlsPort, _ := net.SplitHostPort(tls.Listener.Addr().String())
	cfg := testConfig()
	cfg.NetworkAllow = []string{allowed.Listener.Addr().String(), tls.Listener.Addr().String(), "localhost:" + tlsPort}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	certs := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(certs, pemOf(tls), 0o644))
	sandboxModes(t, cfg, func(t *testing.T, e *Executor, a string) {
		curl := func(args ...string) Result {
			res, err := e.Execute(context.Background(), Invocation{Command: "curl",
				Args: append([]string{"-fsS", "--max-time", "5", "--cacert", certs}, args...), WorkingDir: a, Workspace: a})
			require.NoError(t, err)
			return res
		}
		// The test's servers are local, which clients reach directly
		// (NO_PROXY): --noproxy "" sends them through the proxy.
		res := curl("--noproxy", "", "--proxy", proxyOf(e), allowed.URL)
		require.Equal(t, "allowed answers", res.Stdout, res.Stderr)
		res = curl("--noproxy", "", "--proxy", proxyOf(e), tls.URL)
		require.Equal(t, "tls answers", res.Stdout, res.Stderr)
		res = curl("--noproxy", "", "--proxy", proxyOf(e), other.URL)
		require.NotZero(t, res.ExitCode)
		require.NotContains(t, res.Stdout, "other answers")
		// Listed by name, the host is still refused: only its address
		// listed as such is reached.
		res = curl("--noproxy", "", "--proxy", proxyOf(e), "-k", "https://localhost:"+tlsPort)
		require.NotZero(t, res.ExitCode)
		require.NotContains(t, res.Stdout, "tls answers")
		// Without the proxy nothing is reached.
		res = curl("--noproxy", "*", allowed.URL)
		require.NotZero(t, res.ExitCode)
		require.NotContains(t, res.Stdout, "allowed answers")
		st := e.Egress()
		require.GreaterOrEqual(t, st.Allowed, uint64(2))
		require.GreaterOrEqual(t, st.Refused, uint64(2))
		// The variables the task's clients read.
		res = shell(t, e, a, "echo $HTTPS_PROXY $https_proxy $ALL_PROXY")
		require.Equal(t, strings.Repeat(proxyOf(e)+" ", 2)+proxyOf(e)+"\n", res.Stdout)
	})
}

func proxyOf(e *Executor) string { return "http://" + e.proxyAddr() }

func pemOf(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// A name the allow-list lists is refused when it resolves to an address
// that is not public.
func TestEgressRefusesPrivateResolutions(t *testing.T) {
	t.Parallel()
	p, err := newEgressProxy([]string{"localhost:80", "*.example.test:443", "10.1.2.3:22"}, false)
	require.NoError(t, err)
	t.Cleanup(p.close)
	_, err = p.dial(context.Background(), "tcp", "localhost:80")
	require.ErrorIs(t, err, errRefused)
	_, err = p.dial(context.Background(), "tcp", "localhost:81")
	require.ErrorIs(t, err, errRefused)
	_, err = p.dial(context.Background(), "tcp", "10.1.2.4:22")
	require.ErrorIs(t, err, errRefused)
	for _, bad := range []string{"a.b", "host:0", "host:x", "*:443", ":443"} {
		_, err := parseAllowRule(bad)
		require.Error(t, err, bad)
	}
	require.True(t, mustRule(t, "*.example.test:443").match("a.example.test", "443"))
	require.False(t, mustRule(t, "*.example.test:443").match("example.test", "443"))
	for _, a := range []string{"127.0.0.1", "10.0.0.1", "169.254.169.254", "100.64.1.1", "::1", "fe80::1", "fd00::1", "0.0.0.0"} {
		require.False(t, publicAddr(netip.MustParseAddr(a)), a)
	}
	require.True(t, publicAddr(netip.MustParseAddr("140.82.112.3")))
}

func mustRule(t *testing.T, s string) allowRule {
	r, err := parseAllowRule(s)
	require.NoError(t, err)
	return r
}

// A root service's commands run as the task user: root's files are
// theirs to read no more than anyone's, nor to change; their workspace is
// theirs while they run and the service's again after.
func TestNamespacedTaskUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the task user applies to a service that runs as root")
	}
	e, a, _, outside := confinedSetup(t, namespacedConfig(t))
	uid, gid, other := e.TaskUser()
	require.True(t, other)
	rootOnly := filepath.Join(outside, "root-only")
	require.NoError(t, os.WriteFile(rootOnly, []byte("root's secret"), 0o600))
	res := shell(t, e, a, "id -u; id -g; id -G; echo made > mine")
	require.Zero(t, res.ExitCode, res.Stderr)
	require.Equal(t, fmt.Sprintf("%d\n%d\n%d\n", uid, gid, gid), res.Stdout)
	for _, script := range []string{"cat /etc/shadow", "cat " + rootOnly, "chmod 666 " + rootOnly, "touch " + rootOnly,
		"touch -d 2001-01-01 /etc/hostname", "chmod 777 /etc/hostname"} {
		res := shell(t, e, a, script)
		require.NotZero(t, res.ExitCode, script)
		require.NotContains(t, res.Stdout, "root's secret")
		require.NotContains(t, res.Stdout, "root:")
	}
	fi, err := os.Stat(rootOnly)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	// The workspace and what the command made in it are the service's
	// again.
	for _, p := range []string{a, filepath.Join(a, "mine")} {
		require.Equal(t, os.Getuid(), statOwner(t, p), p)
	}
}

// A root service without namespaces refuses to run commands as root
// unless told to, and one with neither namespaces nor Landlock's network
// rules refuses the default network.
func TestRootWithoutNamespacesRefuses(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("applies to a service that runs as root")
	}
	cfg := testConfig()
	cfg.Namespaces = NamespacesOff
	cfg.UnsafeRunTasksAsRoot = false
	b, err := NewBoundary(t.TempDir())
	require.NoError(t, err)
	_, err = New(cfg, b, nil)
	require.ErrorContains(t, err, "toolexec.unsafe-run-tasks-as-root")
	cfg.UnsafeRunTasksAsRoot = true
	cfg.Confine = false
	require.ErrorContains(t, cfg.Validate(), "toolexec.network")
	cfg.Network = NetworkHost
	e, err := New(cfg, b, nil)
	require.NoError(t, err)
	e.Close()
}

func statOwner(t *testing.T, p string) int {
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(p, &st))
	return int(st.Uid)
}

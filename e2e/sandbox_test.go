package e2e

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// storeAddrs are the host:port of the stores the mesh uses.
func storeAddrs(t *testing.T) map[string]string {
	out := map[string]string{}
	for name, raw := range map[string]string{"postgres": testenv.PostgresDSN(), "redis": testenv.RedisURL(), "nats": testenv.NATSURL()} {
		u, err := url.Parse(raw)
		require.NoError(t, err, name)
		out[name] = u.Host
	}
	return out
}

// refused is a node command that prints "refused" when attack fails and
// "REACHED" when it succeeds.
func refused(attack string) string {
	return "if " + attack + " >/dev/null 2>&1; then echo REACHED; else echo refused; fi"
}

// tcpAttack connects to host:port with bash's /dev/tcp.
func tcpAttack(hostport string) string {
	host, port, _ := net.SplitHostPort(hostport)
	return fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s'`, host, port)
}

// The attacks of a member's run node on the host, as code: from a node run
// through the orchestrator and a worker, psql, redis-cli and raw TCP
// connections to each store, to each service's port and to the metadata
// address fail, and so does a connection to PostgreSQL's unix socket; with
// the worker as root, /etc/shadow and a root-only file are unreadable, and
// a file outside the workspace keeps its mode and times.
func TestSandboxAttacksFromARunNode(t *testing.T) {
	c := startMesh(t)
	nodes := map[string]string{
		"psql-tcp":    refused("PGCONNECT_TIMEOUT=5 psql -h 127.0.0.1 -U postgres -c 'select 1'"),
		"psql-socket": refused("PGCONNECT_TIMEOUT=5 psql -h /var/run/postgresql -U postgres -c 'select 1'"),
		"unix-socket": refused(`python3 -c "import socket; socket.socket(socket.AF_UNIX).connect('/var/run/postgresql/.s.PGSQL.5432')"`),
		"redis-cli":   refused("timeout 5 redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG"),
		"metadata":    refused(tcpAttack("169.254.169.254:80")),
	}
	for name, addr := range storeAddrs(t) {
		nodes["tcp-"+name] = refused(tcpAttack(addr))
	}
	for name, addr := range c.services {
		nodes["grpc-"+name] = refused(tcpAttack(addr))
	}
	for name, raw := range map[string]string{"gateway": c.base, "metrics": c.metricsURL} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		nodes["http-"+name] = refused(tcpAttack(u.Host))
	}
	root := os.Geteuid() == 0
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	rootOnly, outside := filepath.Join(dir, "root-only"), filepath.Join(dir, "outside")
	require.NoError(t, os.WriteFile(rootOnly, []byte("root's secret"), 0o600))
	require.NoError(t, os.WriteFile(outside, []byte("outside"), 0o644))
	past := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, os.Chtimes(outside, past, past))
	// The attacks' tools run in the box: a refusal is the sandbox's, not a
	// missing program's.
	nodes["tools"] = `python3 -c 'import socket; socket.socketpair()' && psql --version >/dev/null && redis-cli --version >/dev/null && bash -c 'exec 3</dev/null' && echo present`
	if root {
		nodes["chmod-outside"] = refused("chmod 777 " + outside)
		nodes["touch-outside"] = refused("touch " + outside)
		nodes["shadow"] = refused("cat /etc/shadow")
		nodes["root-only"] = refused("cat " + rootOnly)
		nodes["whoami"] = "id -u"
	}
	var dag []any
	for id, cmd := range nodes {
		dag = append(dag, map[string]any{"id": id, "command": cmd})
	}
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(e2eRepo(t)), "maxConcurrency": 4, "dag": map[string]any{"nodes": dag}}))
	n := nodeMap(run)
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "%v", n)
	for id := range nodes {
		out := strings.TrimSpace(fmt.Sprint(n[id]["stdout"]))
		switch id {
		case "whoami":
			require.NotEqual(t, "0", out, "a task command ran as root")
			continue
		case "tools":
			require.Equal(t, "present", out, "%v", n[id])
			continue
		}
		require.Equal(t, "refused", out, "%s: %v", id, n[id])
	}
	fi, err := os.Stat(outside)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	require.True(t, fi.ModTime().Equal(past), "the file's times changed: %v", fi.ModTime())
	require.EqualValues(t, 1, c.metric("sylk_worker_namespaced"))
}

// Without namespaces (Landlock's network rules, a worker told to run
// commands as root when it is), a node reaches no store nor service port
// either, nor PostgreSQL's unix socket.
func TestSandboxNetworkWithoutNamespaces(t *testing.T) {
	c := startMesh(t, "-toolexec.namespaces", "off", "-toolexec.unsafe-run-tasks-as-root")
	nodes := map[string]string{
		"psql-socket": refused("PGCONNECT_TIMEOUT=5 psql -h /var/run/postgresql -U postgres -c 'select 1'"),
		"metadata":    refused(tcpAttack("169.254.169.254:80")),
	}
	for name, addr := range storeAddrs(t) {
		nodes["tcp-"+name] = refused(tcpAttack(addr))
	}
	for name, addr := range c.services {
		nodes["grpc-"+name] = refused(tcpAttack(addr))
	}
	var dag []any
	for id, cmd := range nodes {
		dag = append(dag, map[string]any{"id": id, "command": cmd})
	}
	run := c.waitRun(c.createRun(map[string]any{"repository": c.register(e2eRepo(t)), "maxConcurrency": 4, "dag": map[string]any{"nodes": dag}}))
	n := nodeMap(run)
	require.Equal(t, "RUN_STATE_SUCCEEDED", run["state"], "%v", n)
	for id := range nodes {
		require.Equal(t, "refused", strings.TrimSpace(fmt.Sprint(n[id]["stdout"])), "%s: %v", id, n[id])
	}
	require.EqualValues(t, 0, c.metric("sylk_worker_namespaced"))
}

// taskWritableDir is a directory of the test that task commands may write
// in (given to -toolexec.confine-writable): as root, a worker runs them as
// the task user, who must pass through its parent and write in it.
func taskWritableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	require.NoError(t, os.Chmod(dir, 0o777))
	return dir
}

//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/identity"
)

// serviceWait bounds a service's start.
const serviceWait = 90 * time.Second

// binaries are the sylk and sylk-task-init programs the suite runs, built
// once into a directory any user may read (task commands run as the task
// user of a root worker, and sylk-task-init is theirs to execute).
type binaries struct {
	sylk, taskInit string
}

// buildBinaries builds the programs as `make dev` does.
func buildBinaries(t testing.TB) binaries {
	t.Helper()
	dir, err := os.MkdirTemp("", "sylk-faults-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "sylk.dev/sylk/cmd/sylk", "sylk.dev/sylk/cmd/sylk-task-init")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return binaries{sylk: filepath.Join(dir, "sylk"), taskInit: filepath.Join(dir, "sylk-task-init")}
}

// service is one `sylk serve <module>` process.
type service struct {
	*proc
	grpcAddr, httpAddr string
}

// restart starts the process and waits until its /healthz says it serves.
func (s *service) restart() error {
	if err := s.start(); err != nil {
		return err
	}
	ok := waitFor(serviceWait, func() bool {
		if !s.running() {
			return true
		}
		resp, err := http.Get("http://" + s.httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok || !s.running() {
		return fmt.Errorf("%s did not become healthy:\n%s", s.name, s.tail(4000))
	}
	return nil
}

// mesh is one scenario's stores and services: orchestrators and workers
// as separate processes. Runs are submitted over gRPC to an Orchestrator
// with a caller identity signed by the deployment's internal key, as the
// gateway does; the runs have no session, so the Orchestrator calls no
// Guide (its -peer.guide points nowhere), and no other service is needed.
type mesh struct {
	t       testing.TB
	dir     string
	bin     binaries
	pg      *pgServer
	redis   *redisServer
	nats    *natsServer
	key     string
	ledger  string
	dupWin  time.Duration
	workers map[string]*service
	orchs   map[string]*service
}

// internalKey is the key the scenario's services sign identities with.
const internalKey = "faults-suite-internal-key-0123456789abcdef"

// newMesh starts the stores of a scenario and applies the migrations with
// `sylk migrate`; services are started with startOrchestrator and
// startWorker.
func newMesh(t testing.TB, bin binaries, tp *pgTemplate, dupWin time.Duration) *mesh {
	t.Helper()
	dir := t.TempDir()
	m := &mesh{t: t, dir: dir, bin: bin, key: internalKey, dupWin: dupWin,
		workers: map[string]*service{}, orchs: map[string]*service{}}
	m.pg = startPostgres(t, tp)
	m.redis = startRedis(t, dir)
	m.nats = startNATS(t, dir)
	m.ledger = ledgerDir(t)
	migrate := exec.Command(bin.sylk, "migrate", "-postgres.dsn", m.pg.dsn(), "-log.level", "warn")
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("sylk migrate: %v\n%s", err, out)
	}
	t.Cleanup(m.stopAll)
	return m
}

// commonFlags are the flags every service gets.
func (m *mesh) commonFlags() []string {
	return []string{
		"-postgres.dsn", m.pg.dsn(),
		"-redis.url", m.redis.url(),
		"-nats.url", m.nats.url(),
		"-nats.duplicate-window", m.dupWin.String(),
		"-internal.key", m.key,
		// The stores are the scenario's own, reachable by no one else.
		"-stores.allow-anonymous",
		"-log.level", "info",
	}
}

// newService describes `sylk serve module` on free ports.
func (m *mesh) newService(module, name string, flags ...string) *service {
	grpcAddr, httpAddr := hostPort(freePort(m.t)), hostPort(freePort(m.t))
	argv := append([]string{m.bin.sylk, "serve", module,
		"-grpc.listen-address", grpcAddr, "-http.listen-address", httpAddr}, m.commonFlags()...)
	argv = append(argv, flags...)
	return &service{proc: newProc(m.dir, name, nil, argv...), grpcAddr: grpcAddr, httpAddr: httpAddr}
}

// startOrchestrator starts an Orchestrator replica named name (its replica
// id, which a restart keeps) with the default lease and resync settings.
func (m *mesh) startOrchestrator(name string) *service {
	m.t.Helper()
	s := m.newService("orchestrator", name,
		"-orchestrator.replica-id", name,
		// Runs without a session never reach the Guide.
		"-peer.guide", "127.0.0.1:1")
	if err := s.restart(); err != nil {
		m.t.Fatal(err)
	}
	m.orchs[name] = s
	return s
}

// startWorker starts a worker named name with slots for every task of a
// scenario, whose task commands may write the ledger directory; flags are
// added to its flags. Its other settings (ack wait, shared slots, task
// namespaces where it may make them) are the defaults.
func (m *mesh) startWorker(name string, concurrency int, flags ...string) *service {
	m.t.Helper()
	// A workspace root of its own, out of /tmp (the default), which the
	// worker hides from task commands: the binaries and the ledger are
	// there. The task user passes through it to its workspaces.
	ws, err := os.MkdirTemp("", "sylk-faults-ws-")
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { _ = os.RemoveAll(ws) })
	if err := os.Chmod(ws, 0o711); err != nil {
		m.t.Fatal(err)
	}
	s := m.newService("worker", name, append([]string{
		"-worker.id", name,
		"-worker.workspace-root", ws,
		"-worker.concurrency", strconv.Itoa(concurrency),
		"-toolexec.slots", strconv.Itoa(4 * concurrency),
		"-toolexec.task-init", m.bin.taskInit,
		"-toolexec.confine-writable", m.ledger}, flags...)...)
	if err := s.restart(); err != nil {
		m.t.Fatal(err)
	}
	m.workers[name] = s
	return s
}

// stopAll stops every service still running, then reports what task
// processes of the scenario are still alive and kills them.
func (m *mesh) stopAll() {
	for _, s := range m.orchs {
		s.stop(syscall.SIGTERM, 20*time.Second)
	}
	for _, s := range m.workers {
		s.stop(syscall.SIGTERM, 20*time.Second)
	}
	killTasks(m.t, m.ledger)
}

// logs is the end of every service's log, for a failed scenario.
func (m *mesh) logs() string {
	var out string
	for _, group := range []map[string]*service{m.orchs, m.workers} {
		for name, s := range group {
			out += "----- " + name + "\n" + s.tail(6000)
		}
	}
	return out
}

// client is a WorkflowService client of one Orchestrator replica.
type client struct {
	conn *grpc.ClientConn
	wf   orchestratorv1.WorkflowServiceClient
}

// dial connects to the Orchestrator at addr, signing the caller identity
// with the internal key.
func (m *mesh) dial(addr string) *client {
	m.t.Helper()
	signer, err := identity.NewSigner([]byte(m.key))
	if err != nil {
		m.t.Fatal(err)
	}
	conn, err := grpcclient.Dial(addr, signer)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { _ = conn.Close() })
	return &client{conn: conn, wf: orchestratorv1.NewWorkflowServiceClient(conn)}
}

// caller is the context of the suite's calls: an admin of a tenant of its
// own.
func caller(ctx context.Context) context.Context {
	return identity.NewContext(ctx, identity.Identity{TenantID: "faults", UserID: "suite", Role: identity.RoleAdmin})
}

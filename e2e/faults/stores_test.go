//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/testenv"
)

// storeWait bounds a store's start.
const storeWait = 60 * time.Second

// The stores of a scenario are its own PostgreSQL, Redis and NATS, started
// as processes on free ports, so that a scenario can stop and restart them
// without disturbing the machine's shared ones or another scenario.

// pgBin is the directory of the newest PostgreSQL server programs.
func pgBin(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	testenv.MissingTool(t, "the PostgreSQL server programs (initdb, pg_ctl)")
	return ""
}

// pgMajor is the major version in a /usr/lib/postgresql/<major>/bin path.
func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// pgOwner says how PostgreSQL's programs are run: as root, which they
// refuse, through runuser as the postgres user, whose IDs the data
// directory gets; otherwise as the test's own user.
type pgOwner struct {
	runuser  string
	uid, gid int
}

// newPGOwner finds the postgres user when the test runs as root.
func newPGOwner(t testing.TB) pgOwner {
	t.Helper()
	if os.Geteuid() != 0 {
		return pgOwner{uid: -1, gid: -1}
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		testenv.MissingTool(t, "a postgres user to run PostgreSQL as (the test runs as root)")
	}
	ru, err := exec.LookPath("runuser")
	if err != nil {
		testenv.MissingTool(t, "runuser")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return pgOwner{runuser: ru, uid: uid, gid: gid}
}

// command is argv run as the owner.
func (o pgOwner) command(argv ...string) *exec.Cmd {
	if o.runuser != "" {
		argv = append([]string{o.runuser, "-u", "postgres", "--"}, argv...)
	}
	return exec.Command(argv[0], argv[1:]...)
}

// chown gives path to the owner.
func (o pgOwner) chown(path string) error {
	if o.uid < 0 {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, o.uid, o.gid)
	})
}

// pgTemplate is a data directory made once by initdb (trust
// authentication), which each scenario copies.
type pgTemplate struct {
	bin   string
	owner pgOwner
	data  string
}

// newPGTemplate runs initdb into a directory removed when the test ends.
func newPGTemplate(t testing.TB) *pgTemplate {
	t.Helper()
	tp := &pgTemplate{bin: pgBin(t), owner: newPGOwner(t)}
	dir := ownedTempDir(t, tp.owner, "sylk-faults-pgtemplate-")
	tp.data = filepath.Join(dir, "data")
	cmd := tp.owner.command(filepath.Join(tp.bin, "initdb"), "-D", tp.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	return tp
}

// ownedTempDir is a new directory under the system's temporary directory,
// owned by owner and removed when the test ends. t.TempDir is not used:
// its parent is private to the test's user, which postgres is not.
func ownedTempDir(t testing.TB, owner pgOwner, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := owner.chown(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pgServer is one scenario's PostgreSQL.
type pgServer struct {
	tp   *pgTemplate
	dir  string
	port int
}

// startPostgres copies the template and starts a server on a free port,
// stopped when the test ends.
func startPostgres(t testing.TB, tp *pgTemplate) *pgServer {
	t.Helper()
	dir := ownedTempDir(t, tp.owner, "sylk-faults-pg-")
	if out, err := exec.Command("cp", "-a", tp.data, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the PostgreSQL template: %v\n%s", err, out)
	}
	p := &pgServer{tp: tp, dir: dir, port: freePort(t)}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop() })
	return p
}

// start starts the server and waits until it takes connections.
func (p *pgServer) start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=300", p.port, p.dir)
	cmd := p.tp.owner.command(filepath.Join(p.tp.bin, "pg_ctl"), "-D", filepath.Join(p.dir, "data"), "-l", filepath.Join(p.dir, "postgres.log"),
		"-w", "-t", strconv.Itoa(int(storeWait.Seconds())), "-o", opts, "start")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("start postgres: %w\n%s\n%s", err, out, p.log())
	}
	return nil
}

// stop stops the server with the fast mode: open sessions are ended, as
// a restart by an operator or an orchestrator does.
func (p *pgServer) stop() error {
	cmd := p.tp.owner.command(filepath.Join(p.tp.bin, "pg_ctl"), "-D", filepath.Join(p.dir, "data"), "-m", "fast", "-w", "stop")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stop postgres: %w\n%s", err, out)
	}
	return nil
}

// log is the server's log.
func (p *pgServer) log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
	return string(b)
}

// dsn is the connection string of the sylk database (the services create
// it at start).
func (p *pgServer) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/sylk?sslmode=disable", p.port)
}

// redisServer is one scenario's Redis: nothing saved, so a restart starts
// empty, as a Redis without persistence does.
type redisServer struct {
	*proc
	port int
}

// startRedis starts redis-server on a free port, stopped when the test ends.
func startRedis(t testing.TB, dir string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.MissingTool(t, "redis-server")
	}
	port := freePort(t)
	r := &redisServer{proc: newProc(dir, "redis", nil, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir), port: port}
	if err := r.restart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.stop(syscall.SIGTERM, 10*time.Second) })
	return r
}

// restart starts the server and waits until it answers PING.
func (r *redisServer) restart() error {
	if err := r.start(); err != nil {
		return err
	}
	if !waitFor(storeWait, r.ready) {
		return fmt.Errorf("redis did not start:\n%s", r.tail(2000))
	}
	return nil
}

// url is the server's URL.
func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// ready reports whether the server answers PING.
func (r *redisServer) ready() bool {
	c := redis.NewClient(&redis.Options{Addr: hostPort(r.port), DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}

// natsServer is one scenario's NATS with JetStream, its store in a
// directory of its own that a restart keeps.
type natsServer struct {
	*proc
	port int
}

// startNATS starts nats-server with JetStream on a free port, stopped when
// the test ends.
func startNATS(t testing.TB, dir string) *natsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
		if _, err := os.Stat(bin); err != nil {
			testenv.MissingTool(t, "nats-server")
		}
	}
	port := freePort(t)
	store := filepath.Join(dir, "jetstream")
	n := &natsServer{proc: newProc(dir, "nats", nil, bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", store), port: port}
	if err := n.restart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stop(syscall.SIGTERM, 10*time.Second) })
	return n
}

// restart starts the server and waits until JetStream answers.
func (n *natsServer) restart() error {
	if err := n.start(); err != nil {
		return err
	}
	if !waitFor(storeWait, n.ready) {
		return fmt.Errorf("nats did not start:\n%s", n.tail(2000))
	}
	return nil
}

// url is the server's URL.
func (n *natsServer) url() string { return "nats://" + hostPort(n.port) }

// ready reports whether JetStream answers an account query.
func (n *natsServer) ready() bool {
	nc, err := nats.Connect(n.url(), nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err == nil
}

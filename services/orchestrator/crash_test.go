package orchestrator_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

// Environment of the crash test's child process.
const (
	envCrashChild  = "SYLK_ORCH_CRASH_CHILD"
	envCrashSchema = "SYLK_ORCH_CRASH_SCHEMA"
	envCrashPrefix = "SYLK_ORCH_CRASH_PREFIX"
	envCrashDag    = "SYLK_ORCH_CRASH_DAG"
)

// TestMain lets the test binary double as an orchestrator replica process
// that the crash test can kill with SIGKILL.
func TestMain(m *testing.M) {
	if os.Getenv(envCrashChild) == "1" {
		os.Exit(crashChild())
	}
	os.Exit(m.Run())
}

func crashConfig(replica string) orchestrator.Config {
	cfg := orchestrator.DefaultConfig()
	cfg.ReplicaID = replica
	cfg.LeaseTTL = time.Second
	cfg.ResyncInterval = 200 * time.Millisecond
	cfg.MaxConcurrencyLimit = 64
	return cfg
}

// crashChild runs replica A: it creates the run, prints its id, and
// schedules it until it is killed.
func crashChild() int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 1
	}
	pool, err := pgstore.Open(ctx, pgstore.Config{DSN: testenv.PostgresDSN(), MaxConns: 4}, os.Getenv(envCrashSchema))
	if err != nil {
		return fail(err)
	}
	bus, err := natsx.Connect(ctx, natsx.Config{URL: testenv.NATSURL(), Prefix: os.Getenv(envCrashPrefix)}, logx.Discard(), "crash-child")
	if err != nil {
		return fail(err)
	}
	svc, err := orchestrator.New(crashConfig("replica-a"), app.Deps{Log: logx.Discard(), DB: pool, Bus: bus, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return fail(err)
	}
	// The streams exist before the run is created, so its first dispatches
	// are published at once.
	if err := topology.EnsureTasks(ctx, bus); err != nil {
		return fail(err)
	}
	if err := topology.EnsureEvents(ctx, bus); err != nil {
		return fail(err)
	}
	go func() { _ = svc.Run(ctx) }()
	raw, err := base64.StdEncoding.DecodeString(os.Getenv(envCrashDag))
	if err != nil {
		return fail(err)
	}
	var d orchestratorv1.Dag
	if err := proto.Unmarshal(raw, &d); err != nil {
		return fail(err)
	}
	resp, err := svc.CreateRun(userCtx("t1"), &orchestratorv1.CreateRunRequest{Dag: &d, MaxConcurrency: 3})
	if err != nil {
		return fail(err)
	}
	fmt.Printf("run=%s\n", resp.GetRun().GetName())
	select {}
}

// TestCrashRecoveryAfterKill kills (SIGKILL) the orchestrator process that
// owns a run in the middle of it; a second replica takes the run over when
// the lease expires and finishes it, with every node completed exactly once.
func TestCrashRecoveryAfterKill(t *testing.T) {
	t.Parallel()
	db, schema := testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	bus := testenv.NATS(t)
	h := &harness{db: db, bus: bus}
	h.startWorker(t, 3)

	// 12 layers of 3, each node depending on the whole previous layer: what
	// is left after the kill takes longer than the lease (1s), so the run
	// cannot end on the results in flight alone, which any replica applies;
	// the second replica has to take it over.
	var nodes []*orchestratorv1.Node
	for l := range 12 {
		for i := range 3 {
			n := cmd(fmt.Sprintf("n%d-%d", l, i), fmt.Sprintf("sleep 0.2; echo l%d-%d", l, i))
			if l > 0 {
				n.DependsOn = []string{fmt.Sprintf("n%d-0", l-1), fmt.Sprintf("n%d-1", l-1), fmt.Sprintf("n%d-2", l-1)}
			}
			nodes = append(nodes, n)
		}
	}
	blob, err := proto.Marshal(dagOf(nodes...))
	require.NoError(t, err)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envCrashChild+"=1", envCrashSchema+"="+schema, envCrashPrefix+"="+bus.Prefix(),
		envCrashDag+"="+base64.StdEncoding.EncodeToString(blob))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	name, ok := strings.CutPrefix(strings.TrimSpace(line), "run=")
	require.True(t, ok, "child said %q", line)
	runID := strings.TrimPrefix(name, "runs/")

	succeeded := func() int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM nodes WHERE run_id = $1 AND state = 'SUCCEEDED'`, runID).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return succeeded() >= 6 }, waitFor, 10*time.Millisecond)
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	var state, owner string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT state, lease_owner FROM runs WHERE id = $1`, runID).Scan(&state, &owner))
	require.Equal(t, "RUNNING", state, "the replica died mid-run")
	require.Equal(t, "replica-a", owner)
	require.Less(t, succeeded(), len(nodes))

	reg := prometheus.NewRegistry()
	b, err := orchestrator.New(crashConfig("replica-b"), app.Deps{Log: logx.Discard(), DB: db, Bus: bus, Registerer: reg})
	require.NoError(t, err)
	testenv.Start(t, b.Run)
	h.svc, h.reg = b, reg
	run := h.waitState(t, userCtx("t1"), name, orchestratorv1.RunState_RUN_STATE_SUCCEEDED)
	for _, n := range run.GetNodes() {
		require.Equal(t, orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, n.GetState(), n.GetNodeId())
		require.Equal(t, int32(1), n.GetAttempt(), "node %s was not dispatched again", n.GetNodeId())
	}
	var attempts, distinct int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT node_id) FROM attempts WHERE run_id = $1`, runID).Scan(&attempts, &distinct))
	require.Equal(t, len(nodes), attempts, "no completion lost or applied twice")
	require.Equal(t, len(nodes), distinct)
	require.NoError(t, db.QueryRow(context.Background(), `SELECT lease_owner FROM runs WHERE id = $1`, runID).Scan(&owner))
	require.Equal(t, "replica-b", owner)
	require.GreaterOrEqual(t, metric(t, reg, "sylk_orchestrator_runs_taken_over_total", ""), 1.0)
}

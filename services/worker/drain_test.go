package worker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// runWorker runs a worker on bus until the returned cancel; done receives
// Run's result.
func runWorker(t *testing.T, cfg Config, bus *natsx.Bus) (svc *Service, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()})
	grantClaims(t, bus)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- svc.Run(ctx); close(ch) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	select {
	case <-svc.Started():
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not start")
	}
	return svc, cancel, ch
}

// publishTask publishes a task of role running command.
func publishTask(t *testing.T, bus *natsx.Bus, role, node, command string) {
	t.Helper()
	d := &taskv1.TaskDispatch{TenantId: "t1", RunId: "r1", NodeId: node, Attempt: 1, Role: role,
		Node: &orchestratorv1.Node{Id: node, Command: command}}
	_, err := bus.Publish(context.Background(), topology.TaskSubject(bus, role), "r1:"+node+":1", d)
	require.NoError(t, err)
}

// nextResult fetches the next task result, nil when none comes within
// wait.
func nextResult(t *testing.T, results jetstream.Consumer, wait time.Duration) *taskv1.TaskResult {
	t.Helper()
	b, err := results.Fetch(1, jetstream.FetchMaxWait(wait))
	require.NoError(t, err)
	for msg := range b.Messages() {
		var r taskv1.TaskResult
		require.NoError(t, proto.Unmarshal(msg.Data(), &r))
		require.NoError(t, msg.Ack())
		return &r
	}
	return nil
}

// A worker asked to stop takes no new task, keeps heartbeating the one it
// runs (past several ack waits) and reports its result before Run
// returns; the task delivered meanwhile runs on another worker.
func TestStoppingWorkerFinishesItsTasks(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	cfg := testConfig(t)
	cfg.Roles, cfg.Concurrency = []string{"tester"}, 1
	cfg.AckWait, cfg.Heartbeat, cfg.DrainTimeout = time.Second, 200*time.Millisecond, time.Minute
	ctx := context.Background()
	require.NoError(t, topology.EnsureTasks(ctx, bus))
	results, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	svc, stop, done := runWorker(t, cfg, bus)

	gate := filepath.Join(t.TempDir(), "go")
	publishTask(t, bus, "tester", "running", "while [ ! -e "+gate+" ]; do sleep 0.05; done; echo finished")
	require.Eventually(t, func() bool { return len(svc.runningTasks()) == 1 }, 20*time.Second, 10*time.Millisecond)
	stop()
	publishTask(t, bus, "tester", "later", "echo later")
	cons, err := bus.EnsureConsumer(ctx, topology.TaskConsumer(bus, "tester", natsx.ConsumerSpec{AckWait: cfg.AckWait}))
	require.NoError(t, err)
	// Three ack waits: the running task is not redelivered, and the
	// later one is not taken.
	require.Never(t, func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumRedelivered > 0 || info.NumAckPending != 1
	}, 3*cfg.AckWait, 50*time.Millisecond)
	select {
	case <-done:
		t.Fatal("Run returned with a task running")
	default:
	}
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	r := nextResult(t, results, 20*time.Second)
	require.NotNil(t, r)
	require.Equal(t, "running", r.GetNodeId())
	require.Equal(t, "finished\n", r.GetStdout())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop once its task was reported")
	}
	require.Nil(t, nextResult(t, results, 200*time.Millisecond), "the later task ran on the stopped worker")
	runWorker(t, cfg, bus)
	r = nextResult(t, results, 20*time.Second)
	require.NotNil(t, r)
	require.Equal(t, "later", r.GetNodeId())
}

// A task still running when the drain timeout ends is stopped and handed
// back at once: it is redelivered well before the ack wait, and the
// stopped worker reports nothing for it.
func TestDrainTimeoutHandsTasksBack(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	cfg := testConfig(t)
	cfg.Roles, cfg.Concurrency = []string{"tester"}, 1
	cfg.AckWait, cfg.DrainTimeout = 30*time.Second, 300*time.Millisecond
	ctx := context.Background()
	require.NoError(t, topology.EnsureTasks(ctx, bus))
	results, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	svc, stop, done := runWorker(t, cfg, bus)
	publishTask(t, bus, "tester", "long", "sleep 600")
	require.Eventually(t, func() bool { return len(svc.runningTasks()) == 1 }, 20*time.Second, 10*time.Millisecond)
	stopped := time.Now()
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop after its drain timeout")
	}
	cons, err := bus.EnsureConsumer(ctx, topology.TaskConsumer(bus, "tester", natsx.ConsumerSpec{AckWait: cfg.AckWait}))
	require.NoError(t, err)
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	require.NoError(t, err)
	var n int
	for msg := range b.Messages() {
		n++
		meta, err := msg.Metadata()
		require.NoError(t, err)
		require.EqualValues(t, 2, meta.NumDelivered)
		require.NoError(t, msg.Term())
	}
	require.Equal(t, 1, n)
	require.Less(t, time.Since(stopped), cfg.AckWait/2, "handed back only by the ack timeout")
	require.Nil(t, nextResult(t, results, 200*time.Millisecond))
}

// The defaults hand a silent worker's tasks to another within 10 s, with
// room for a lost heartbeat, and give agent tasks minutes to finish on a
// stop; a heartbeat slower than half the ack wait is refused.
func TestLifecycleDefaults(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	require.LessOrEqual(t, cfg.AckWait, 10*time.Second)
	require.LessOrEqual(t, 3*cfg.Heartbeat, cfg.AckWait)
	require.GreaterOrEqual(t, cfg.DrainTimeout, 5*time.Minute)
	cfg = testConfig(t)
	cfg.AckWait, cfg.Heartbeat = 4*time.Second, 3*time.Second
	require.ErrorContains(t, cfg.Validate(), "worker.heartbeat")
	cfg.Heartbeat, cfg.DrainTimeout = time.Second, -time.Second
	require.ErrorContains(t, cfg.Validate(), "worker.drain-timeout")
}

package orchestrator_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
	"sylk.dev/sylk/services/orchestrator"
)

const waitFor = 30 * time.Second

type harness struct {
	svc *orchestrator.Service
	reg *prometheus.Registry
	db  *pgxpool.Pool
	bus *natsx.Bus
	// signals is a directory for the test's task commands' flags.
	signals string
	// lib is the fake Librarian runs resolve their repositories with (nil
	// when the test gave its own peers or none).
	lib *fakeLibrarian
}

func userCtx(tenant string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: "u1", Role: identity.RoleAdmin})
}

// newOrchestrator starts an Orchestrator on its own schema and, unless bus
// is given, its own bus prefix.
func newOrchestrator(t *testing.T, db *pgxpool.Pool, bus *natsx.Bus) (*harness, context.CancelFunc) {
	t.Helper()
	return newOrchestratorWith(t, db, bus, nil)
}

// newOrchestratorWith is newOrchestrator with configure applied to the
// test configuration. Its Librarian is a fake (h.lib, h.repo).
func newOrchestratorWith(t *testing.T, db *pgxpool.Pool, bus *natsx.Bus, configure func(*orchestrator.Config)) (*harness, context.CancelFunc) {
	t.Helper()
	lib := newFakeLibrarian()
	h, stop := newOrchestratorPeers(t, db, bus, configure, app.Peers{Librarian: lib.serve(t)})
	h.lib = lib
	return h, stop
}

// newOrchestratorPeers is newOrchestratorWith with peers to call.
func newOrchestratorPeers(t *testing.T, db *pgxpool.Pool, bus *natsx.Bus, configure func(*orchestrator.Config), peers app.Peers) (*harness, context.CancelFunc) {
	t.Helper()
	if db == nil {
		db, _ = testenv.Postgres(t, "orchestrator", migrations.FS("orchestrator"))
	}
	if bus == nil {
		bus = testenv.NATS(t)
	}
	cfg := orchestrator.DefaultConfig()
	cfg.ResyncInterval = 200 * time.Millisecond
	if configure != nil {
		configure(&cfg)
	}
	reg := prometheus.NewRegistry()
	svc, err := orchestrator.New(cfg, app.Deps{Log: logx.Discard(), DB: db, Bus: bus, Registerer: reg, Peers: peers})
	require.NoError(t, err)
	stop := testenv.Start(t, svc.Run)
	// Run provisions the streams; wait until they exist.
	require.Eventually(t, func() bool {
		_, err := bus.JS.Stream(context.Background(), bus.Stream(topology.StreamTasks))
		return err == nil
	}, waitFor, 10*time.Millisecond)
	return &harness{svc: svc, reg: reg, db: db, bus: bus, signals: t.TempDir()}, stop
}

func (h *harness) create(t *testing.T, ctx context.Context, req *orchestratorv1.CreateRunRequest) *orchestratorv1.Run {
	t.Helper()
	resp, err := h.svc.CreateRun(ctx, req)
	require.NoError(t, err)
	return resp.GetRun()
}

func (h *harness) get(t *testing.T, ctx context.Context, name string) *orchestratorv1.Run {
	t.Helper()
	resp, err := h.svc.GetRun(ctx, &orchestratorv1.GetRunRequest{Name: name})
	require.NoError(t, err)
	return resp.GetRun()
}

func (h *harness) waitState(t *testing.T, ctx context.Context, name string, want orchestratorv1.RunState) *orchestratorv1.Run {
	t.Helper()
	var run *orchestratorv1.Run
	require.Eventually(t, func() bool {
		run = h.get(t, ctx, name)
		return run.GetState() == want
	}, waitFor, 20*time.Millisecond, "run %s never reached %s", name, want)
	return run
}

func nodesByID(run *orchestratorv1.Run) map[string]*orchestratorv1.NodeStatus {
	out := map[string]*orchestratorv1.NodeStatus{}
	for _, n := range run.GetNodes() {
		out[n.GetNodeId()] = n
	}
	return out
}

func cmd(id, command string, deps ...string) *orchestratorv1.Node {
	return &orchestratorv1.Node{Id: id, Command: command, DependsOn: deps}
}

func dagOf(nodes ...*orchestratorv1.Node) *orchestratorv1.Dag {
	return &orchestratorv1.Dag{Nodes: nodes}
}

// tasks fetches dispatches as a worker of role would, acknowledging them.
func (h *harness) tasks(t *testing.T, role string, n int) []*taskv1.TaskDispatch {
	t.Helper()
	cons, err := h.bus.EnsureConsumer(context.Background(), topology.TaskConsumer(h.bus, role, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	var out []*taskv1.TaskDispatch
	require.Eventually(t, func() bool {
		batch, err := cons.FetchNoWait(n - len(out))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			var d taskv1.TaskDispatch
			require.NoError(t, proto.Unmarshal(msg.Data(), &d))
			id := fmt.Sprintf("%s:%s:%d", d.GetRunId(), d.GetNodeId(), d.GetAttempt())
			require.Equal(t, id, msg.Headers().Get(jetstream.MsgIDHeader))
			require.Equal(t, id, d.GetFence().GetAttemptId(), "the dispatch is fenced by its message id")
			out = append(out, &d)
			require.NoError(t, msg.Ack())
		}
		return len(out) >= n
	}, waitFor, 20*time.Millisecond)
	return out
}

// noMoreTasks checks that no dispatch for role is waiting.
func (h *harness) noMoreTasks(t *testing.T, role string) {
	t.Helper()
	info, err := h.bus.JS.Consumer(context.Background(), h.bus.Stream(topology.StreamTasks), topology.DurableWorker(role))
	require.NoError(t, err)
	ci, err := info.Info(context.Background())
	require.NoError(t, err)
	require.Zero(t, ci.NumPending)
}

// sendResult reports a node's attempt as a worker would.
func (h *harness) sendResult(t *testing.T, tenant, runID, node string, attempt, exit int32, stdout, msgID string) {
	t.Helper()
	h.publishResult(t, msgID, &taskv1.TaskResult{TenantId: tenant, RunId: runID, NodeId: node, Attempt: attempt, ExitCode: exit,
		Stdout: stdout, Duration: durationpb.New(150 * time.Millisecond), WorkerId: "test-worker"})
}

// publishResult publishes r on the results subject under msgID.
func (h *harness) publishResult(t *testing.T, msgID string, r *taskv1.TaskResult) {
	t.Helper()
	_, err := h.bus.Publish(context.Background(), topology.ResultSubject(h.bus), msgID, r)
	require.NoError(t, err)
}

// resultsDrained waits until the Orchestrator acknowledged every result.
func (h *harness) resultsDrained(t *testing.T, delivered uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := h.bus.JS.Consumer(context.Background(), h.bus.Stream(topology.StreamTasks), topology.DurableResults)
		if err != nil {
			return false
		}
		ci, err := c.Info(context.Background())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Consumer >= delivered
	}, waitFor, 20*time.Millisecond)
}

// events reads a session's event stream.
func (h *harness) events(t *testing.T, tenant, session string, n int) []*eventv1.Event {
	t.Helper()
	cons, err := h.bus.JS.OrderedConsumer(context.Background(), h.bus.Stream(topology.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{topology.SessionEvents(h.bus, tenant, session)},
	})
	require.NoError(t, err)
	var out []*eventv1.Event
	testenv.Consume(t, cons, 100, waitFor, func(ev *eventv1.Event) { out = append(out, ev) }, func() bool { return len(out) >= n })
	return out
}

// waitMetric waits for a metric to reach want: the scheduler updates its
// metrics after the transaction whose effects the test has already seen.
func waitMetric(t *testing.T, reg *prometheus.Registry, name, state string, want float64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := metricValue(reg, name, state)
		require.NoError(c, err)
		assert.Equal(c, want, got, "%s{state=%q}", name, state)
	}, waitFor, 5*time.Millisecond)
}

// metric reads a counter's value, or a histogram's observation count; state
// selects the "state" label when not empty.
func metric(t *testing.T, reg *prometheus.Registry, name, state string) float64 {
	t.Helper()
	v, err := metricValue(reg, name, state)
	require.NoError(t, err)
	return v
}

func metricValue(reg *prometheus.Registry, name, state string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if state != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "state" && l.GetValue() == state }) {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount()), nil
			}
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, nil
}

func countRows(t *testing.T, db *pgxpool.Pool) (runs, nodes int) {
	t.Helper()
	require.NoError(t, db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM nodes)`).Scan(&runs, &nodes))
	return runs, nodes
}

// repoWith makes a git repository holding files.
func repoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	for _, args := range [][]string{{"init", "--quiet"}, {"add", "-A"}, {"commit", "--quiet", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	return dir
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.MissingTool(t, "python3")
	}
}

const calcPy = "def add(a, b):\n    return a + b\n"

const testCalcPy = "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(1, 2), 3)\n"

func action(t *testing.T, h *harness, ctx context.Context, req *orchestratorv1.TaskActionRequest) *orchestratorv1.TaskActionResponse {
	t.Helper()
	resp, err := h.svc.TaskAction(ctx, req)
	require.NoError(t, err)
	return resp
}

func eventTypes(t *testing.T, h *harness, tenant, session string, want ...eventv1.EventType) {
	t.Helper()
	for _, w := range want {
		h.event(t, tenant, session, w)
	}
}

// event waits for the first event of type typ on a session's stream and
// checks that it carries the payload its type says.
func (h *harness) event(t *testing.T, tenant, session string, typ eventv1.EventType) *eventv1.Event {
	t.Helper()
	cons, err := h.bus.JS.OrderedConsumer(context.Background(), h.bus.Stream(topology.StreamEvents),
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{topology.SessionEvents(h.bus, tenant, session)}})
	require.NoError(t, err)
	var found *eventv1.Event
	var seen []eventv1.EventType
	testenv.Consume(t, cons, 100, waitFor, func(ev *eventv1.Event) {
		seen = append(seen, ev.GetType())
		if found == nil && ev.GetType() == typ {
			found = ev
		}
	}, func() bool { return found != nil }, "events seen: %v, want %v", seen, typ)
	require.NoError(t, topology.CheckEvent(found))
	require.Equal(t, topology.AgentOrchestrator, found.GetSource())
	return found
}

// inboxMessage waits for the last message sent to an agent's inbox.
func inboxMessage(t *testing.T, h *harness, agent string) *messagev1.Envelope {
	t.Helper()
	// The inboxes' stream may not exist yet: the orchestrator provisions it
	// when it first sends there.
	require.NoError(t, topology.EnsureAgents(context.Background(), h.bus))
	inbox, err := h.bus.EnsureConsumer(context.Background(), topology.InboxConsumer(h.bus, agent, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	var got *messagev1.Envelope
	testenv.Consume(t, inbox, 10, waitFor, func(env *messagev1.Envelope) {
		if got == nil { // the first: a failed run sends its failure records after it
			got = env
		}
	}, func() bool { return got != nil })
	return got
}

func terminal(s orchestratorv1.RunState) bool {
	return s == orchestratorv1.RunState_RUN_STATE_SUCCEEDED || s == orchestratorv1.RunState_RUN_STATE_FAILED || s == orchestratorv1.RunState_RUN_STATE_CANCELLED ||
		s == orchestratorv1.RunState_RUN_STATE_NO_CHANGES
}

package agenteval

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
)

func smokeTasks(t *testing.T) []Task {
	t.Helper()
	all, err := LoadTasks("tasks")
	require.NoError(t, err)
	tasks, err := SelectTasks(all, SmokeTasks())
	require.NoError(t, err)
	return tasks
}

func startScripts(t *testing.T, tasks []Task) *scriptmodel.Server {
	t.Helper()
	srv, err := StartScripts(tasks)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// requireAllSolved checks a smoke run: every task solved on path, the
// scripts played to their end, and the report says so.
func requireAllSolved(t *testing.T, srv *scriptmodel.Server, tasks []Task, results []TaskResult, path string) {
	t.Helper()
	report := NewReport("openai/scripted", true, time.Now(), results)
	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md))
	t.Logf("\n%s", md.String())
	require.Empty(t, srv.Failures(), "the scripts were not played as written")
	for i, r := range results {
		o := r.outcome(path)
		require.NotNil(t, o, r.ID)
		require.True(t, o.Solved, "%s: %+v", r.ID, *o)
		require.Empty(t, o.Error, r.ID)
		turns := len(tasks[i].Scripts.Sylk)
		if path == PathBaseline {
			turns = len(tasks[i].Scripts.Baseline)
		}
		require.Equal(t, turns, o.Turns, "%s: one turn per scripted turn", r.ID)
		require.Positive(t, o.TokensIn, r.ID)
		require.Positive(t, o.TokensOut, r.ID)
		require.Zero(t, o.Cost, "%s: the scripted model has no price", r.ID)
	}
	total := report.Totals[path]
	require.Equal(t, len(tasks), total.Solved)
	require.InDelta(t, 1.0, total.SolveRate, 1e-9)
}

// The smoke subset through the baseline: the bash-only loop, over the real
// OpenAI-compatible client and the script model, solves every task.
func TestSmokeBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the smoke tasks' commands and tests")
	}
	t.Parallel()
	tasks := smokeTasks(t)
	srv := startScripts(t, tasks)
	b, err := NewBaseline(BaselineConfig{Model: ScriptedModel(srv, llm.OpenAI), WorkDir: t.TempDir()})
	require.NoError(t, err)
	results := Harness{Baseline: b, Parallel: 2}.Run(t.Context(), tasks)
	requireAllSolved(t, srv, tasks, results, PathBaseline)
	for i, r := range results {
		require.Equal(t, "SUBMITTED", r.Baseline.State, r.ID)
		require.Equal(t, len(tasks[i].Scripts.Baseline)-1, r.Baseline.ToolCalls, r.ID)
		require.Nil(t, r.Sylk)
	}
}

// The smoke subset through the mesh, started in this process on the local
// stores: a run of one engineer pipeline node per task, whose patch solves
// it.
func TestSmokeMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the mesh")
	}
	t.Parallel()
	tasks := smokeTasks(t)
	srv := startScripts(t, tasks)
	model := ScriptedModel(srv, llm.OpenAI)
	var logs syncBuffer
	local, err := StartLocalMesh(t.Context(), LocalMeshConfig{PostgresDSN: testenv.PostgresDSN(), RedisURL: testenv.RedisURL(),
		NATSURL: testenv.NATSURL(), Model: model, Log: &logs,
		// Task commands run as in production, in namespaces of their own.
		Flags: []string{"-toolexec.task-init", testenv.TaskInit(t)}})
	require.NoError(t, err, "the local PostgreSQL, Redis and NATS (%s, %s, %s)", testenv.EnvPostgres, testenv.EnvRedis, testenv.EnvNATS)
	t.Cleanup(func() {
		require.NoError(t, local.Close(context.Background()))
		if t.Failed() {
			t.Logf("mesh logs:\n%s", logs.String())
		}
	})
	m := NewMesh(MeshConfig{URL: local.URL(), Key: local.Key(), Model: model, WallTime: 3 * time.Minute, WorkDir: t.TempDir()})
	results := Harness{Sylk: m, Parallel: 2}.Run(t.Context(), tasks)
	requireAllSolved(t, srv, tasks, results, PathSylk)
	for i, r := range results {
		require.Equal(t, "SUCCEEDED", r.Sylk.State, r.ID)
		require.Equal(t, "finished", r.Sylk.Stop, r.ID)
		calls := 0
		for _, turn := range tasks[i].Scripts.Sylk {
			calls += len(turn.Calls)
		}
		require.Equal(t, calls, r.Sylk.ToolCalls, r.ID)
	}
}

// syncBuffer is a buffer the mesh's services write to at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

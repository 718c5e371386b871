package agenteval

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// gateway is a fake of the mesh's REST API: it takes one run, reports it
// running once, then ended as end says, and reports the usage a read late.
type gateway struct {
	t   *testing.T
	end *orchestratorv1.Run

	mu     sync.Mutex
	create *orchestratorv1.CreateRunRequest
	reads  int
	usage  int
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(g.t, "Bearer admin-key", r.Header.Get("Authorization"))
	body, err := io.ReadAll(r.Body)
	require.NoError(g.t, err)
	var resp proto.Message
	switch r.Method + " " + r.URL.Path {
	case "POST /v1/sessions":
		var s guidev1.Session
		require.NoError(g.t, protojson.Unmarshal(body, &s))
		resp = &guidev1.CreateSessionResponse{Session: &guidev1.Session{Name: "sessions/s1", Id: "s1", DisplayName: s.GetDisplayName()}}
	case "POST /v1/repositories":
		var rp librarianv1.Repository
		require.NoError(g.t, protojson.Unmarshal(body, &rp))
		require.DirExists(g.t, filepath.Join(rp.GetPath(), ".git"))
		require.Equal(g.t, "false", r.URL.Query().Get("index"), "a task's checkout is registered, not indexed")
		resp = &librarianv1.CreateRepositoryResponse{Repository: &librarianv1.Repository{Name: "repositories/rp1", Path: rp.GetPath()}}
	case "POST /v1/runs":
		g.create = &orchestratorv1.CreateRunRequest{}
		require.NoError(g.t, protojson.Unmarshal(body, g.create))
		resp = &orchestratorv1.CreateRunResponse{Run: &orchestratorv1.Run{Name: "runs/r1", State: orchestratorv1.RunState_RUN_STATE_PENDING}}
	case "GET /v1/runs/r1":
		g.reads++
		run := &orchestratorv1.Run{Name: "runs/r1", State: orchestratorv1.RunState_RUN_STATE_RUNNING}
		if g.reads > 1 {
			run = g.end
		}
		resp = &orchestratorv1.GetRunResponse{Run: run}
	case "GET /v1/usage":
		require.Equal(g.t, "s1", r.URL.Query().Get("sessionId"))
		g.usage++
		total := &llmv1.UsageRow{}
		if g.usage > 1 {
			total = &llmv1.UsageRow{Requests: 5, InputTokens: 1000, OutputTokens: 100, CostUsd: 0.0123}
		}
		resp = &llmv1.GetUsageReportResponse{Total: total, Currency: "USD"}
	default:
		http.Error(w, `{"code": 5, "message": "not found"}`, http.StatusNotFound)
		return
	}
	b, err := protojson.Marshal(resp)
	require.NoError(g.t, err)
	_, _ = w.Write(b)
}

// solvingPatch is the change the task's baseline script makes.
func solvingPatch(t *testing.T, task Task) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, Checkout(t.Context(), task, dir))
	for _, turn := range task.Scripts.Baseline {
		for _, c := range turn.Calls {
			res, err := RunCommand(t.Context(), dir, c.Args["command"].(string), time.Minute)
			require.NoError(t, err)
			require.False(t, res.TimedOut)
		}
	}
	patch, err := Diff(t.Context(), dir)
	require.NoError(t, err)
	require.NotEmpty(t, patch)
	return patch
}

func meshPath(t *testing.T, g *gateway) *Mesh {
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return NewMesh(MeshConfig{URL: srv.URL, Key: "admin-key", Poll: 10 * time.Millisecond, WorkDir: t.TempDir()})
}

// The mesh path submits the task as one engineer pipeline node on a git
// repository of its files, waits for the run, reads what its agent did
// and what it cost, and judges its patch.
func TestMeshPath(t *testing.T) {
	t.Parallel()
	tasks, err := LoadTasks("tasks")
	require.NoError(t, err)
	var task Task
	for _, tk := range tasks {
		if tk.ID == "py-settings-bool" {
			task = tk
		}
	}
	created := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	g := &gateway{t: t, end: &orchestratorv1.Run{Name: "runs/r1", State: orchestratorv1.RunState_RUN_STATE_SUCCEEDED,
		CreateTime: timestamppb.New(created), EndTime: timestamppb.New(created.Add(42 * time.Second)),
		ResultPatch: solvingPatch(t, task),
		Nodes: []*orchestratorv1.NodeStatus{{NodeId: MeshNode, State: orchestratorv1.NodeState_NODE_STATE_SUCCEEDED,
			Report: &orchestratorv1.TaskReport{Activity: &orchestratorv1.AgentActivity{Turns: 5, ToolCallCount: 6,
				InputTokens: 1000, OutputTokens: 100, StopReason: "finished"}}}}}}
	out := meshPath(t, g).Run(t.Context(), task)

	require.Equal(t, Outcome{Solved: true, State: "SUCCEEDED", Stop: "finished", Turns: 5, ToolCalls: 6, TokensIn: 1000,
		TokensOut: 100, Cost: 0.0123, WallSeconds: 42}, out)
	node := g.create.GetDag().GetNodes()[0]
	require.Equal(t, "s1", g.create.GetSessionId())
	require.Equal(t, "repositories/rp1", g.create.GetRepository(), "the run names the registered repository")
	require.Equal(t, MeshNode, node.GetId())
	require.Equal(t, "engineer", node.GetRole())
	require.True(t, node.GetPipeline())
	require.Equal(t, task.Prompt, node.GetPrompt())
	require.Equal(t, 10*time.Minute, node.GetTimeout().AsDuration())
	require.NoDirExists(t, g.create.GetRepository(), "the task's repository is removed after the run")
	require.Equal(t, 2, g.usage, "the usage report is read until it holds the run's tokens")
}

// A run that changed nothing is not solved, and says why.
func TestMeshPathNoChanges(t *testing.T) {
	t.Parallel()
	task := tinyTask(t)
	g := &gateway{t: t, end: &orchestratorv1.Run{Name: "runs/r1", State: orchestratorv1.RunState_RUN_STATE_NO_CHANGES,
		Nodes: []*orchestratorv1.NodeStatus{{NodeId: MeshNode, State: orchestratorv1.NodeState_NODE_STATE_NO_CHANGES,
			Error: "the model finished without an edit"}}}}
	out := meshPath(t, g).Run(t.Context(), task)
	require.False(t, out.Solved)
	require.Equal(t, "NO_CHANGES", out.State)
	require.Equal(t, "the model finished without an edit", out.Error)
	require.Contains(t, out.TestOutput, "No such file")
}

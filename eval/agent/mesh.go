package agenteval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/llm"
)

// MeshNode is the id of the one node of a task's run.
const MeshNode = "fix"

// MeshConfig configures the mesh path.
type MeshConfig struct {
	// URL is the gateway's base URL, Key an API key of its admin.
	URL, Key string
	// Model is the model the mesh was started with: its prices cost the
	// run's tokens when the usage report has none for its session.
	Model ModelConfig
	// WallTime bounds each task: it is the node's timeout (10 minutes).
	// The harness waits for the run a minute longer, then cancels it.
	WallTime time.Duration
	// Poll is how often the run is read (250ms).
	Poll time.Duration
	// TestTimeout bounds the hidden tests' run (2 minutes).
	TestTimeout time.Duration
	// WorkDir holds the tasks' repositories ("" is the system's temporary
	// directory). The mesh's workers must be able to read it.
	WorkDir string
	// HTTP carries the REST calls (a client with a 30 s timeout when nil).
	HTTP *http.Client
}

func (c MeshConfig) withDefaults() MeshConfig {
	if c.WallTime <= 0 {
		c.WallTime = 10 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.TestTimeout <= 0 {
		c.TestTimeout = 2 * time.Minute
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	return c
}

// Mesh runs tasks through the mesh's REST API, as a user would: a session,
// and in it a run of one engineer pipeline node on the task's repository.
type Mesh struct {
	cfg MeshConfig
}

// NewMesh makes the mesh path.
func NewMesh(cfg MeshConfig) *Mesh { return &Mesh{cfg: cfg.withDefaults()} }

// Run runs task through the mesh and judges the run's patch.
func (m *Mesh) Run(ctx context.Context, task Task) Outcome {
	dir, err := os.MkdirTemp(m.cfg.WorkDir, "sylk-"+task.ID+"-")
	if err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	repo := filepath.Join(dir, "repo")
	if err := Checkout(ctx, task, repo); err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}
	start := time.Now()
	session, err := m.createSession(ctx, task)
	if err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}
	name, err := m.register(ctx, repo)
	if err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}
	run, err := m.createRun(ctx, task, session, name)
	if err != nil {
		return Outcome{State: "ERROR", Error: err.Error()}
	}
	run, waitErr := m.wait(ctx, run.GetName())
	out := runOutcome(run, time.Since(start))
	if waitErr != nil {
		out.Error = waitErr.Error()
	}
	out.Cost, err = m.cost(ctx, session, out)
	if err != nil {
		out.Error = strings.TrimPrefix(out.Error+"; "+err.Error(), "; ")
	}
	judge(ctx, task, dir, m.cfg.TestTimeout, &out, func() (string, error) { return runPatch(run), nil })
	return out
}

// runOutcome reads what the run did: its state, and from its node's
// report the agent's turns, tool calls and tokens. The wall time is the
// run's own, from its creation to its end, when it has both.
func runOutcome(run *orchestratorv1.Run, waited time.Duration) Outcome {
	out := Outcome{State: strings.TrimPrefix(run.GetState().String(), "RUN_STATE_"), WallSeconds: waited.Seconds()}
	if c, e := run.GetCreateTime(), run.GetEndTime(); c != nil && e != nil && e.AsTime().After(c.AsTime()) {
		out.WallSeconds = e.AsTime().Sub(c.AsTime()).Seconds()
	}
	node := meshNode(run)
	if a := node.GetReport().GetActivity(); a != nil {
		out.Stop = a.GetStopReason()
		out.Turns, out.ToolCalls = int(a.GetTurns()), int(a.GetToolCallCount())
		out.TokensIn, out.TokensOut = a.GetInputTokens(), a.GetOutputTokens()
	}
	if run.GetState() != orchestratorv1.RunState_RUN_STATE_SUCCEEDED && node.GetError() != "" {
		out.Error = node.GetError()
	}
	return out
}

func meshNode(run *orchestratorv1.Run) *orchestratorv1.NodeStatus {
	for _, n := range run.GetNodes() {
		if n.GetNodeId() == MeshNode {
			return n
		}
	}
	return nil
}

// runPatch is the run's change: its merged result, or, for a run that did
// not succeed, its node's own patch.
func runPatch(run *orchestratorv1.Run) string {
	if p := run.GetResultPatch(); p != "" {
		return p
	}
	return meshNode(run).GetPatch()
}

func (m *Mesh) createSession(ctx context.Context, task Task) (string, error) {
	var resp guidev1.CreateSessionResponse
	err := m.call(ctx, http.MethodPost, "/v1/sessions", &guidev1.Session{DisplayName: "eval " + task.ID}, &resp)
	if err != nil {
		return "", fmt.Errorf("create a session: %w", err)
	}
	return resp.GetSession().GetId(), nil
}

// register registers the task's checkout at dir with the Librarian (the
// mesh's -librarian.allowed-roots must include it) and returns the
// repository's name: a run names a registered repository, never a path.
func (m *Mesh) register(ctx context.Context, dir string) (string, error) {
	var resp librarianv1.CreateRepositoryResponse
	// A run needs the repository registered, not indexed (the checkout is
	// removed after the run): no index operation is started.
	err := m.call(ctx, http.MethodPost, "/v1/repositories?index=false", &librarianv1.Repository{Path: dir}, &resp)
	if err != nil {
		return "", fmt.Errorf("register the repository: %w", err)
	}
	return resp.GetRepository().GetName(), nil
}

// createRun submits the task: one engineer pipeline node whose prompt is
// the task's, on the registered repository repo.
func (m *Mesh) createRun(ctx context.Context, task Task, session, repo string) (*orchestratorv1.Run, error) {
	req := &orchestratorv1.CreateRunRequest{SessionId: session, Repository: repo, Dag: &orchestratorv1.Dag{
		Nodes: []*orchestratorv1.Node{{Id: MeshNode, Role: "engineer", Pipeline: true,
			Prompt: strings.TrimSpace(task.Prompt), Timeout: durationpb.New(m.cfg.WallTime)}},
	}}
	var resp orchestratorv1.CreateRunResponse
	if err := m.call(ctx, http.MethodPost, "/v1/runs", req, &resp); err != nil {
		return nil, fmt.Errorf("create the run: %w", err)
	}
	return resp.GetRun(), nil
}

// wait reads the run until it ends. Past the task's time and a minute
// more, it cancels the run and returns it as it stands, with an error.
func (m *Mesh) wait(ctx context.Context, name string) (*orchestratorv1.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.WallTime+time.Minute)
	defer cancel()
	tick := time.NewTicker(m.cfg.Poll)
	defer tick.Stop()
	last := &orchestratorv1.Run{Name: name}
	for {
		var resp orchestratorv1.GetRunResponse
		err := m.call(ctx, http.MethodGet, "/v1/"+name, nil, &resp)
		switch {
		case err == nil:
			last = resp.GetRun()
			if ended(last.GetState()) {
				return last, nil
			}
		case ctx.Err() == nil:
			return last, fmt.Errorf("read the run: %w", err)
		}
		select {
		case <-ctx.Done():
			stop, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancelStop()
			_ = m.call(stop, http.MethodPost, "/v1/"+name+":cancel", &orchestratorv1.CancelRunRequest{}, &orchestratorv1.CancelRunResponse{})
			return last, fmt.Errorf("the run did not end within %s; cancelled", m.cfg.WallTime+time.Minute)
		case <-tick.C:
		}
	}
}

func ended(s orchestratorv1.RunState) bool {
	switch s {
	case orchestratorv1.RunState_RUN_STATE_SUCCEEDED, orchestratorv1.RunState_RUN_STATE_FAILED,
		orchestratorv1.RunState_RUN_STATE_CANCELLED, orchestratorv1.RunState_RUN_STATE_NO_CHANGES:
		return true
	}
	return false
}

// cost is what the session's model calls cost, from the mesh's usage
// report (every agent of the run, priced by the gate from the model
// catalogue). Usage records are written as calls end, so the report is
// read until it holds the tokens the node's report counts, for a few
// seconds at most. A report without them (the calls were not attributed
// to the session) leaves the node's tokens priced from the catalogue.
func (m *Mesh) cost(ctx context.Context, session string, out Outcome) (float64, error) {
	fallback := m.cfg.Model.cost(llm.Usage{InputTokens: int(out.TokensIn), OutputTokens: int(out.TokensOut)})
	deadline := time.Now().Add(5 * time.Second)
	for {
		var resp llmv1.GetUsageReportResponse
		if err := m.call(ctx, http.MethodGet, "/v1/usage?sessionId="+url.QueryEscape(session), nil, &resp); err != nil {
			return fallback, fmt.Errorf("read the usage report: %w", err)
		}
		total := resp.GetTotal()
		if total.GetInputTokens() >= out.TokensIn && total.GetRequests() > 0 {
			return total.GetCostUsd(), nil
		}
		if out.TokensIn == 0 || time.Now().After(deadline) {
			return fallback, nil
		}
		select {
		case <-ctx.Done():
			return fallback, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// call makes a REST call: body as protojson, the answer into resp.
func (m *Mesh) call(ctx context.Context, method, path string, body, resp proto.Message) error {
	var r io.Reader
	if body != nil {
		b, err := protojson.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(m.cfg.URL, "/")+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+m.cfg.Key)
	req.Header.Set("Content-Type", "application/json")
	res, err := m.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, oneLine(string(raw)))
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, resp); err != nil {
		return errors.Join(fmt.Errorf("%s %s: read the answer", method, path), err)
	}
	return nil
}

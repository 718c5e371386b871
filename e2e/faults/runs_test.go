//go:build faults

package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// submit creates the scenario's runs on c: run i (tag r<i>) is a chain
// n1 -> n2 -> ... of task commands. It returns the runs' names.
func submit(t *testing.T, m *mesh, c *client) []string {
	t.Helper()
	names := make([]string, runs)
	for i := range runs {
		tag := fmt.Sprintf("r%d", i)
		var nodes []*orchestratorv1.Node
		for n := 1; n <= chain; n++ {
			node := &orchestratorv1.Node{
				Id:      fmt.Sprintf("n%d", n),
				Command: taskCommand(m.ledger, tag, fmt.Sprintf("n%d", n), taskTime),
				Timeout: durationpb.New(5 * time.Minute),
			}
			if n > 1 {
				node.DependsOn = []string{fmt.Sprintf("n%d", n-1)}
			}
			nodes = append(nodes, node)
		}
		ctx, cancel := callCtx()
		resp, err := c.wf.CreateRun(ctx, &orchestratorv1.CreateRunRequest{
			Dag: &orchestratorv1.Dag{Nodes: nodes}, MaxConcurrency: 1, RequestId: fmt.Sprintf("faults-%s-%d", tag, time.Now().UnixNano()),
		})
		cancel()
		require.NoError(t, err, "create run %s", tag)
		names[i] = resp.GetRun().GetName()
	}
	return names
}

// nodeState is what the Orchestrator says of one node at the end.
type nodeState struct {
	state     string
	succeeded bool
	attempt   int32
}

// runState is what the Orchestrator says of one run at the end.
type runState struct {
	state string
	nodes map[string]nodeState
}

// terminal reports whether a run in state s has ended.
func terminal(s orchestratorv1.RunState) bool {
	switch s {
	case orchestratorv1.RunState_RUN_STATE_SUCCEEDED, orchestratorv1.RunState_RUN_STATE_FAILED,
		orchestratorv1.RunState_RUN_STATE_CANCELLED, orchestratorv1.RunState_RUN_STATE_NO_CHANGES:
		return true
	}
	return false
}

// waitRuns waits up to runWait for every run to end, reading them from
// whichever Orchestrator replica is running and answers, and returns their
// final states (a run that did not end keeps its last state).
func waitRuns(t *testing.T, m *mesh, names []string) []runState {
	t.Helper()
	clients := map[string]*client{}
	for name, o := range m.orchs {
		clients[name] = m.dial(o.grpcAddr)
	}
	last := make([]*orchestratorv1.Run, len(names))
	done := waitFor(runWait, func() bool {
		all := true
		for i, n := range names {
			if last[i] != nil && terminal(last[i].GetState()) {
				continue
			}
			if r := getRun(m, clients, n); r != nil {
				last[i] = r
			}
			if last[i] == nil || !terminal(last[i].GetState()) {
				all = false
			}
		}
		return all
	})
	if !done {
		t.Logf("runs not ended after %s", runWait)
	}
	out := make([]runState, len(names))
	for i, r := range last {
		out[i] = runState{state: r.GetState().String(), nodes: map[string]nodeState{}}
		for _, n := range r.GetNodes() {
			out[i].nodes[n.GetNodeId()] = nodeState{state: n.GetState().String(),
				succeeded: n.GetState() == orchestratorv1.NodeState_NODE_STATE_SUCCEEDED, attempt: n.GetAttempt()}
		}
	}
	return out
}

// getRun reads run name from the first running replica that answers.
func getRun(m *mesh, clients map[string]*client, name string) *orchestratorv1.Run {
	for n, c := range clients {
		if !m.orchs[n].running() {
			continue
		}
		ctx, cancel := callCtx()
		resp, err := c.wf.GetRun(ctx, &orchestratorv1.GetRunRequest{Name: name})
		cancel()
		if err == nil {
			return resp.GetRun()
		}
	}
	return nil
}

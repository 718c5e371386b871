package dag_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
)

func node(id string, deps ...string) *orchestratorv1.Node {
	return &orchestratorv1.Node{Id: id, Command: "true", DependsOn: deps}
}

func graph(nodes ...*orchestratorv1.Node) *orchestratorv1.Dag {
	return &orchestratorv1.Dag{Nodes: nodes}
}

func TestValidateLayers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dag  *orchestratorv1.Dag
		want [][]string
	}{
		{"single", graph(node("a")), [][]string{{"a"}}},
		{"independent sorted", graph(node("c"), node("a"), node("b")), [][]string{{"a", "b", "c"}}},
		{"chain", graph(node("c", "b"), node("b", "a"), node("a")), [][]string{{"a"}, {"b"}, {"c"}}},
		{
			"diamond from the spec",
			graph(node("t1"), node("t3", "t1"), node("t2", "t1"), node("t4", "t2", "t3")),
			[][]string{{"t1"}, {"t2", "t3"}, {"t4"}},
		},
		{
			"uneven depths",
			graph(node("a"), node("b", "a"), node("c", "b"), node("d", "a", "c"), node("e")),
			[][]string{{"a", "e"}, {"b"}, {"c"}, {"d"}},
		},
		{
			"prompt only, roles and timeouts",
			graph(
				&orchestratorv1.Node{Id: "plan.1", Prompt: "write it", Role: "engineer"},
				&orchestratorv1.Node{Id: "lint_1", Command: "go vet", Role: "inspector", DependsOn: []string{"plan.1"}, Timeout: durationpb.New(24 * time.Hour)},
				&orchestratorv1.Node{Id: "T-1", Command: "go test", Role: "tester", DependsOn: []string{"plan.1"}, Timeout: durationpb.New(0)},
			),
			[][]string{{"plan.1"}, {"T-1", "lint_1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := dag.Validate(tt.dag)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	tooMany := make([]*orchestratorv1.Node, dag.MaxNodes+1)
	for i := range tooMany {
		tooMany[i] = node(fmt.Sprintf("n%d", i))
	}
	long := strings.Repeat("x", dag.MaxCommandBytes+1)
	tests := []struct {
		name string
		dag  *orchestratorv1.Dag
		want string
	}{
		{"nil dag", nil, "at least one node"},
		{"no nodes", graph(), "at least one node"},
		{"too many nodes", graph(tooMany...), "exceed the limit of 10000"},
		{"nil node", graph(node("a"), nil), "dag.nodes[1]: node is empty"},
		{"missing id", graph(node("")), "dag.nodes[0].id is required"},
		{"bad id char", graph(node("a b")), `dag.nodes[0].id "a b" is invalid`},
		{"bad id start", graph(node("-a")), `dag.nodes[0].id "-a" is invalid`},
		{"id too long", graph(node(strings.Repeat("a", 65))), "is invalid"},
		{"duplicate id", graph(node("a"), node("b"), node("a")), `dag.nodes[2].id "a" duplicates dag.nodes[0]`},
		{"unknown dependency", graph(node("a", "zz")), `node "a": depends_on names unknown node "zz"`},
		{"self dependency", graph(node("a", "a")), `node "a": depends_on names the node itself`},
		{"repeated dependency", graph(node("a"), node("b", "a", "a")), `node "b": depends_on repeats "a"`},
		{"no command nor prompt", graph(&orchestratorv1.Node{Id: "a"}), `node "a": a command or a prompt is required`},
		{"blank command", graph(&orchestratorv1.Node{Id: "a", Command: "  \n"}), "a command or a prompt is required"},
		{"command too long", graph(&orchestratorv1.Node{Id: "a", Command: long}), "command of 65537 bytes exceeds"},
		{"prompt too long", graph(&orchestratorv1.Node{Id: "a", Prompt: long}), "prompt of 65537 bytes exceeds"},
		{"bad role", graph(&orchestratorv1.Node{Id: "a", Command: "x", Role: "librarian"}), `role "librarian" is invalid`},
		{"pipeline as a tester", graph(&orchestratorv1.Node{Id: "a", Command: "x", Role: "tester", Pipeline: true}),
			`node "a": a pipeline runs under role engineer, not "tester"`},
		{"pipeline as an inspector", graph(&orchestratorv1.Node{Id: "a", Command: "x", Role: "inspector", Pipeline: true}),
			`node "a": a pipeline runs under role engineer, not "inspector"`},
		{"negative timeout", graph(&orchestratorv1.Node{Id: "a", Command: "x", Timeout: durationpb.New(-time.Second)}), "out of range"},
		{"timeout too long", graph(&orchestratorv1.Node{Id: "a", Command: "x", Timeout: durationpb.New(25 * time.Hour)}), "out of range"},
		{"malformed timeout", graph(&orchestratorv1.Node{Id: "a", Command: "x", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}), "timeout is invalid"},
		{"two-node cycle", graph(node("a", "b"), node("b", "a")), "dag: cycle in depends_on: a -> b -> a"},
		{"edit of the repository itself", graph(&orchestratorv1.Node{Id: "a", Command: "x", Edits: []*orchestratorv1.FileEdit{{Path: "."}}}),
			`edits[0].path "." must be the relative path of a file`},
		{"edit of a directory", graph(&orchestratorv1.Node{Id: "a", Command: "x", Edits: []*orchestratorv1.FileEdit{{Path: "pkg/"}}}),
			`edits[0].path "pkg/" must be the relative path of a file`},
		{"long cycle, cut in the middle", longCycle(1000), "cycle in depends_on: n0 -> n1 -> n2 -> n3 -> n4 -> n5 -> n6 -> n7 -> n8 -> n9 -> ... (981 more) -> n991"},
		{
			"three-node cycle behind a valid prefix",
			graph(node("root"), node("c", "root", "b"), node("a", "c"), node("b", "a"), node("tail", "a")),
			"dag: cycle in depends_on: a -> c -> b -> a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			layers, err := dag.Validate(tt.dag)
			require.Nil(t, layers)
			var de *dag.Error
			require.True(t, errors.As(err, &de), "want *dag.Error, got %T", err)
			require.Contains(t, de.Error(), tt.want)
		})
	}
}

func TestValidateLargeChain(t *testing.T) {
	t.Parallel()
	nodes := make([]*orchestratorv1.Node, dag.MaxNodes)
	nodes[0] = node("n0")
	for i := 1; i < len(nodes); i++ {
		nodes[i] = node(fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", i-1))
	}
	layers, err := dag.Validate(graph(nodes...))
	require.NoError(t, err)
	require.Len(t, layers, dag.MaxNodes)
	require.Equal(t, []string{"n9999"}, layers[len(layers)-1])
}

func TestRole(t *testing.T) {
	t.Parallel()
	require.Equal(t, dag.RoleEngineer, dag.Role(&orchestratorv1.Node{}))
	require.Equal(t, dag.RoleTester, dag.Role(&orchestratorv1.Node{Role: "tester"}))
}

func TestExecutionOrderIsVerified(t *testing.T) {
	t.Parallel()
	nodes := []*orchestratorv1.Node{
		{Id: "t1", Command: "x"},
		{Id: "t2", Command: "x", DependsOn: []string{"t1"}},
		{Id: "t3", Command: "x", DependsOn: []string{"t1"}},
		{Id: "t4", Command: "x", DependsOn: []string{"t2", "t3"}},
	}
	order := func(layers ...[]string) []*orchestratorv1.Layer {
		var out []*orchestratorv1.Layer
		for _, l := range layers {
			out = append(out, &orchestratorv1.Layer{NodeIds: l})
		}
		return out
	}
	tests := []struct {
		name    string
		order   []*orchestratorv1.Layer
		want    [][]string
		wantErr string
	}{
		{name: "absent: computed", want: [][]string{{"t1"}, {"t2", "t3"}, {"t4"}}},
		{name: "the spec's example", order: order([]string{"t1"}, []string{"t2", "t3"}, []string{"t4"}), want: [][]string{{"t1"}, {"t2", "t3"}, {"t4"}}},
		{name: "a valid serial order", order: order([]string{"t1"}, []string{"t3"}, []string{"t2"}, []string{"t4"}), want: [][]string{{"t1"}, {"t3"}, {"t2"}, {"t4"}}},
		{name: "dependency in the same layer", order: order([]string{"t1", "t2"}, []string{"t3"}, []string{"t4"}), wantErr: `node "t2" (layer 0) must come after its dependency "t1" (layer 0)`},
		{name: "missing node", order: order([]string{"t1"}, []string{"t2", "t3"}), wantErr: `node "t4" is missing`},
		{name: "unknown node", order: order([]string{"t1"}, []string{"t2", "t3", "t9"}, []string{"t4"}), wantErr: `unknown node "t9"`},
		{name: "twice", order: order([]string{"t1"}, []string{"t2", "t3"}, []string{"t4", "t2"}), wantErr: `node "t2" already appears in layer 1`},
		{name: "empty layer", order: order([]string{"t1"}, []string{}, []string{"t2", "t3"}, []string{"t4"}), wantErr: "layer is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := dag.Validate(&orchestratorv1.Dag{Nodes: nodes, ExecutionOrder: tt.order})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRetryPolicyIsValidated(t *testing.T) {
	t.Parallel()
	_, err := dag.Validate(&orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{{Id: "a", Command: "x", Retry: &orchestratorv1.RetryPolicy{Max: -1}}}})
	require.ErrorContains(t, err, `node "a": retry.max`)
	_, err = dag.Validate(&orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{{Id: "a", Command: "x"}},
		Policy: &orchestratorv1.Policy{DefaultRetry: &orchestratorv1.RetryPolicy{Max: 1, Backoff: durationpb.New(-time.Second)}}})
	require.ErrorContains(t, err, "dag.policy.default_retry.backoff")
	d := &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{{Id: "a", Command: "x"}, {Id: "b", Command: "x", Retry: &orchestratorv1.RetryPolicy{Max: 3}}},
		Policy: &orchestratorv1.Policy{DefaultRetry: &orchestratorv1.RetryPolicy{Max: 2}}}
	require.Equal(t, int32(2), dag.Retry(d, d.GetNodes()[0]).GetMax())
	require.Equal(t, int32(3), dag.Retry(d, d.GetNodes()[1]).GetMax())
}

// longCycle is n nodes in one cycle: n(i) depends on n(i+1), the last on n0.
func longCycle(n int) *orchestratorv1.Dag {
	var nodes []*orchestratorv1.Node
	for i := range n {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", (i+1)%n)))
	}
	return graph(nodes...)
}

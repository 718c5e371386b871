package orchestrator

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/topology"
)

// A checkpoint of a large run keeps the first entries of each list and
// counts the rest; each entry is cut to its bound.
func TestWorkflowTextBounds(t *testing.T) {
	var nodes []workflowNode
	for i := range maxWorkflowItems + 10 {
		nodes = append(nodes, workflowNode{id: fmt.Sprintf("n%d", i), layer: int32(i), state: stateSucceeded})
	}
	nodes = append(nodes, workflowNode{id: "slow", layer: 60, state: stateFailed, attempt: 3, err: strings.Repeat("x", 3*maxWorkflowItemBytes)})
	text := workflowText("r1", stateFailed, nodes)
	require.Contains(t, text, "Completed tasks (60):\n- n0\n")
	require.Contains(t, text, "- n49\n- … and 10 more\n")
	require.NotContains(t, text, "- n50\n")
	require.Contains(t, text, "- Current layer: 61 of 61")
	require.Contains(t, text, "- … and 11 more\n", "the execution order is bounded too")
	for _, line := range strings.Split(text, "\n") {
		require.LessOrEqual(t, len(line), maxWorkflowItemBytes+2)
	}
	require.Contains(t, text, "- slow: failed after 3 attempt(s): xxx")
	require.Less(t, strings.Index(text, "Blocked tasks"), strings.Index(text, "Completed tasks"), "what needs attention comes first")

	// However many layers and however long their names, the record stays
	// within the Archivalist's bound, its summary and blocked tasks first.
	nodes = nodes[:0]
	for l := range 200 {
		for i := range 40 {
			nodes = append(nodes, workflowNode{id: fmt.Sprintf("%s-%d-%d", strings.Repeat("n", 40), l, i), layer: int32(l), state: stateFailed, attempt: 1, err: strings.Repeat("e", 900)})
		}
	}
	text = workflowText("r1", stateFailed, nodes)
	require.LessOrEqual(t, len(text), topology.MaxRecordBytes)
	require.Contains(t, text, "- Total nodes: 8000\n")
	require.Contains(t, text, "- … and 7950 more\n")
}

func TestFitOutputs(t *testing.T) {
	small, big := strings.Repeat("s", 100), strings.Repeat("é", 5000) // 10,000 bytes
	nodes := []nodeRow{{Stdout: small}, {Stdout: big, Stderr: big}, {Stderr: small}}
	fitOutputs(nodes, 1<<20)
	require.Equal(t, big, nodes[1].Stdout, "within the budget nothing changes")
	require.False(t, nodes[1].StdoutTruncated)

	fitOutputs(nodes, 6000)
	require.Equal(t, small, nodes[0].Stdout, "a stream under the share keeps everything")
	require.Equal(t, small, nodes[2].Stderr)
	for _, s := range []string{nodes[1].Stdout, nodes[1].Stderr} {
		require.LessOrEqual(t, len(s), 2900)
		require.True(t, utf8.ValidString(s))
		require.Contains(t, s, "bytes not shown")
		require.True(t, strings.HasPrefix(s, "éé") && strings.HasSuffix(s, "éé"), "head and tail are kept")
	}
	require.True(t, nodes[1].StdoutTruncated && nodes[1].StderrTruncated)
}

// Package dag validates the task graphs that the Orchestrator runs (spec
// F-01) and computes their topological layers (spec F-02).
package dag

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// Limits of a valid DAG.
const (
	// MaxNodes is the largest number of nodes a DAG may hold.
	MaxNodes = 10000
	// MaxCommandBytes bounds a node's shell command.
	MaxCommandBytes = 64 << 10
	// MaxPromptBytes bounds a node's agent prompt.
	MaxPromptBytes = 64 << 10
	// MaxNameBytes bounds a node's display name.
	MaxNameBytes = 1 << 10
	// MaxTimeout is the longest timeout a node may ask for.
	MaxTimeout = 24 * time.Hour
	// MaxLoops bounds a pipeline's max_loops.
	MaxLoops = 10
	// MaxEdits and MaxEditBytes bound a node's explicit edits.
	MaxEdits     = 100
	MaxEditBytes = 256 << 10
	// MaxRetries bounds a retry policy's max.
	MaxRetries = 20
	// MaxBackoff bounds a retry policy's first delay.
	MaxBackoff = time.Hour
)

// Roles a node may name; the empty role means RoleEngineer.
const (
	RoleEngineer  = "engineer"
	RoleInspector = "inspector"
	RoleTester    = "tester"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Error describes why a DAG is invalid. Its message is meant for the caller
// (it names the node and field at fault) and is safe to return as is.
type Error struct {
	Msg string
}

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) *Error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// Role returns the node's effective role: its role, or RoleEngineer when
// empty.
func Role(n *orchestratorv1.Node) string {
	if n.GetRole() == "" {
		return RoleEngineer
	}
	return n.GetRole()
}

// Validate checks d and returns its Kahn topological layers: the first layer
// holds the nodes without dependencies, each following layer the nodes whose
// dependencies all lie in earlier layers; ids are sorted within a layer. The
// error, when not nil, is an *Error describing the first problem found; a
// cycle is reported as a path along depends_on edges, e.g. "a -> b -> a"
// (a depends on b, b depends on a).
func Validate(d *orchestratorv1.Dag) ([][]string, error) {
	nodes := d.GetNodes()
	switch {
	case len(nodes) == 0:
		return nil, errorf("dag: at least one node is required")
	case len(nodes) > MaxNodes:
		return nil, errorf("dag: %d nodes exceed the limit of %d", len(nodes), MaxNodes)
	}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if n == nil {
			return nil, errorf("dag.nodes[%d]: node is empty", i)
		}
		id := n.GetId()
		if id == "" {
			return nil, errorf("dag.nodes[%d].id is required", i)
		}
		if !idPattern.MatchString(id) {
			return nil, errorf("dag.nodes[%d].id %q is invalid: want 1-64 characters of [A-Za-z0-9_.-] starting with a letter or digit", i, id)
		}
		if j, dup := index[id]; dup {
			return nil, errorf("dag.nodes[%d].id %q duplicates dag.nodes[%d]", i, id, j)
		}
		index[id] = i
	}
	for i, n := range nodes {
		if err := checkNode(i, n, index); err != nil {
			return nil, err
		}
	}
	if err := checkRetry("dag.policy.default_retry", d.GetPolicy().GetDefaultRetry()); err != nil {
		return nil, err
	}
	computed, err := layers(nodes, index)
	if err != nil || len(d.GetExecutionOrder()) == 0 {
		return computed, err
	}
	return checkOrder(d, index)
}

// checkOrder verifies a DAG's declared execution_order: every node exactly
// once, each in a later layer than all its dependencies. It returns the
// declared layers.
func checkOrder(d *orchestratorv1.Dag, index map[string]int) ([][]string, error) {
	layerOf := make(map[string]int, len(index))
	out := make([][]string, 0, len(d.GetExecutionOrder()))
	for li, l := range d.GetExecutionOrder() {
		if len(l.GetNodeIds()) == 0 {
			return nil, errorf("dag.execution_order[%d]: layer is empty", li)
		}
		for _, id := range l.GetNodeIds() {
			if _, ok := index[id]; !ok {
				return nil, errorf("dag.execution_order[%d]: unknown node %q", li, id)
			}
			if prev, dup := layerOf[id]; dup {
				return nil, errorf("dag.execution_order[%d]: node %q already appears in layer %d", li, id, prev)
			}
			layerOf[id] = li
		}
		out = append(out, slices.Clone(l.GetNodeIds()))
	}
	for _, n := range d.GetNodes() {
		li, ok := layerOf[n.GetId()]
		if !ok {
			return nil, errorf("dag.execution_order: node %q is missing", n.GetId())
		}
		for _, dep := range n.GetDependsOn() {
			if layerOf[dep] >= li {
				return nil, errorf("dag.execution_order: node %q (layer %d) must come after its dependency %q (layer %d)", n.GetId(), li, dep, layerOf[dep])
			}
		}
	}
	return out, nil
}

// Retry is a node's effective retry policy: its own, else the DAG's
// default, else none (nil).
func Retry(d *orchestratorv1.Dag, n *orchestratorv1.Node) *orchestratorv1.RetryPolicy {
	if n.GetRetry() != nil {
		return n.GetRetry()
	}
	return d.GetPolicy().GetDefaultRetry()
}

func checkRetry(field string, r *orchestratorv1.RetryPolicy) *Error {
	if r == nil {
		return nil
	}
	if r.GetMax() < 0 || r.GetMax() > MaxRetries {
		return errorf("%s.max: must be between 0 and %d", field, MaxRetries)
	}
	if b := r.GetBackoff(); b != nil {
		if err := b.CheckValid(); err != nil || b.AsDuration() < 0 || b.AsDuration() > MaxBackoff {
			return errorf("%s.backoff: must be between 0 and %s", field, MaxBackoff)
		}
	}
	return nil
}

func checkNode(i int, n *orchestratorv1.Node, index map[string]int) *Error {
	id := n.GetId()
	seen := make(map[string]bool, len(n.GetDependsOn()))
	for _, dep := range n.GetDependsOn() {
		switch {
		case dep == id:
			return errorf("node %q: depends_on names the node itself", id)
		case seen[dep]:
			return errorf("node %q: depends_on repeats %q", id, dep)
		}
		if _, ok := index[dep]; !ok {
			return errorf("node %q: depends_on names unknown node %q", id, dep)
		}
		seen[dep] = true
	}
	switch {
	case strings.TrimSpace(n.GetCommand()) == "" && strings.TrimSpace(n.GetPrompt()) == "" && len(n.GetEdits()) == 0:
		return errorf("node %q: a command or a prompt is required (or edits)", id)
	case n.GetMaxLoops() < 0 || n.GetMaxLoops() > MaxLoops:
		return errorf("node %q: max_loops must be between 0 and %d", id, MaxLoops)
	case len(n.GetEdits()) > MaxEdits:
		return errorf("node %q: %d edits exceed the limit of %d", id, len(n.GetEdits()), MaxEdits)
	case len(n.GetCommand()) > MaxCommandBytes:
		return errorf("node %q: command of %d bytes exceeds the limit of %d", id, len(n.GetCommand()), MaxCommandBytes)
	case len(n.GetPrompt()) > MaxPromptBytes:
		return errorf("node %q: prompt of %d bytes exceeds the limit of %d", id, len(n.GetPrompt()), MaxPromptBytes)
	case len(n.GetName()) > MaxNameBytes:
		return errorf("node %q: name of %d bytes exceeds the limit of %d", id, len(n.GetName()), MaxNameBytes)
	}
	switch n.GetRole() {
	case "", RoleEngineer, RoleInspector, RoleTester:
	default:
		return errorf("node %q: role %q is invalid: want %s, %s or %s", id, n.GetRole(), RoleEngineer, RoleInspector, RoleTester)
	}
	if n.GetPipeline() && Role(n) != RoleEngineer {
		// Only an engineer worker runs a pipeline: an inspector or tester
		// would run the command alone and skip the checks asked for.
		return errorf("node %q: a pipeline runs under role %s, not %q", id, RoleEngineer, n.GetRole())
	}
	for j, e := range n.GetEdits() {
		p := path.Clean(e.GetPath())
		switch {
		case e.GetPath() == "" || path.IsAbs(p) || p == "." || p == ".." || strings.HasPrefix(p, "../") || p == ".git" ||
			strings.HasPrefix(p, ".git/") || strings.HasSuffix(e.GetPath(), "/"):
			return errorf("node %q: edits[%d].path %q must be the relative path of a file inside the repository", id, j, e.GetPath())
		case len(e.GetContent()) > MaxEditBytes:
			return errorf("node %q: edits[%d] of %d bytes exceeds the limit of %d", id, j, len(e.GetContent()), MaxEditBytes)
		}
	}
	if err := checkRetry(fmt.Sprintf("node %q: retry", id), n.GetRetry()); err != nil {
		return err
	}
	if t := n.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return errorf("node %q: timeout is invalid", id)
		}
		if d := t.AsDuration(); d < 0 || d > MaxTimeout {
			return errorf("node %q: timeout %s is out of range [0, %s]", id, d, MaxTimeout)
		}
	}
	return nil
}

// layers runs Kahn's algorithm over structurally valid nodes.
func layers(nodes []*orchestratorv1.Node, index map[string]int) ([][]string, error) {
	indegree := make([]int, len(nodes))
	dependents := make([][]int, len(nodes))
	for i, n := range nodes {
		indegree[i] = len(n.GetDependsOn())
		for _, dep := range n.GetDependsOn() {
			j := index[dep]
			dependents[j] = append(dependents[j], i)
		}
	}
	var current []int
	for i, d := range indegree {
		if d == 0 {
			current = append(current, i)
		}
	}
	var out [][]string
	placed := 0
	for len(current) > 0 {
		layer := make([]string, len(current))
		var next []int
		for k, i := range current {
			layer[k] = nodes[i].GetId()
			for _, j := range dependents[i] {
				indegree[j]--
				if indegree[j] == 0 {
					next = append(next, j)
				}
			}
		}
		slices.Sort(layer)
		out = append(out, layer)
		placed += len(current)
		current = next
	}
	if placed < len(nodes) {
		return nil, errorf("dag: cycle in depends_on: %s", cycleText(findCycle(nodes, index, indegree)))
	}
	return out, nil
}

// maxCycleShown is how many nodes of a cycle an error names.
const maxCycleShown = 20

// cycleText is a cycle as "a -> b -> a", a long one cut in the middle.
func cycleText(cycle []string) string {
	if len(cycle) <= maxCycleShown {
		return strings.Join(cycle, " -> ")
	}
	half := maxCycleShown / 2
	return fmt.Sprintf("%s -> ... (%d more) -> %s", strings.Join(cycle[:half], " -> "), len(cycle)-maxCycleShown,
		strings.Join(cycle[len(cycle)-half:], " -> "))
}

// findCycle returns one cycle among the nodes Kahn's algorithm left over
// (those with indegree > 0), as ids along depends_on edges, the first id
// repeated at the end. Every leftover node has a leftover dependency, so
// walking dependencies from any leftover node must revisit a node.
func findCycle(nodes []*orchestratorv1.Node, index map[string]int, indegree []int) []string {
	left := func(id string) bool { return indegree[index[id]] > 0 }
	start := ""
	for _, n := range nodes {
		if left(n.GetId()) && (start == "" || n.GetId() < start) {
			start = n.GetId()
		}
	}
	pos := map[string]int{}
	var path []string
	cur := start
	for {
		if p, ok := pos[cur]; ok {
			path = path[p:]
			break
		}
		pos[cur] = len(path)
		path = append(path, cur)
		next := ""
		for _, dep := range nodes[index[cur]].GetDependsOn() {
			if left(dep) && (next == "" || dep < next) {
				next = dep
			}
		}
		cur = next
	}
	// Rotate so the smallest id comes first: the same cycle always reads the same.
	minAt := 0
	for i, id := range path {
		if id < path[minAt] {
			minAt = i
		}
	}
	cycle := append(slices.Clone(path[minAt:]), path[:minAt]...)
	return append(cycle, cycle[0])
}

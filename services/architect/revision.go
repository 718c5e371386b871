package architect

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
)

// Revisions without a model. The local planner applies one instruction per
// revision, in these words (case does not matter; a step is its number,
// from 1 in the plan's order, or its id):
//
//	change step N to <text>   task N's prompt becomes <text>, its name the text's first line
//	remove step N             task N goes; the tasks after it take over its dependencies
//	add a step: <text>        a new engineer task doing <text>, after every other task
//
// Any other feedback makes a version with the same tasks that records the
// feedback and says that no model could apply it.
var (
	changeStep = regexp.MustCompile(`(?is)^(?:change|replace|rewrite) step #?(\S+?):? (?:to|with|into)\s*:?\s+(.+)$`)
	removeStep = regexp.MustCompile(`(?i)^(?:remove|delete|drop) step #?(\S+)$`)
	addStep    = regexp.MustCompile(`(?is)^add (?:a |another |one more )?step(?:\s*:\s*|\s+(?:to|that)\s+)(.+)$`)
)

// offlineHow lists the revisions the local planner applies.
const offlineHow = `without a model a revision can be "change step N to <text>", "remove step N" or "add a step: <text>"`

// reviseOffline is the local planner's revision of r's current version.
func reviseOffline(r Revision) Draft {
	cur := r.current()
	out := Draft{Title: cur.GetTitle(), Planner: plannerLocal}
	feedback := strings.TrimRight(strings.TrimSpace(r.Feedback), ".!")
	d, err := applyFeedback(cur.GetDag(), feedback)
	if err != nil {
		out.DAG = proto.Clone(cur.GetDag()).(*orchestratorv1.Dag)
		out.Notes = []string{fmt.Sprintf("No model is configured, so this feedback was recorded but not applied (%v): the tasks are unchanged; %s.",
			err, offlineHow)}
		return out
	}
	out.DAG = d
	return out
}

// applyFeedback applies one offline instruction to a copy of d.
func applyFeedback(d *orchestratorv1.Dag, feedback string) (*orchestratorv1.Dag, error) {
	d = proto.Clone(d).(*orchestratorv1.Dag)
	if m := changeStep.FindStringSubmatch(feedback); m != nil {
		n, err := stepOf(d, m[1])
		if err != nil {
			return nil, err
		}
		text := strings.TrimSpace(m[2])
		n.Prompt, n.Name = text, titleOf(text)
		return d, nil
	}
	if m := removeStep.FindStringSubmatch(feedback); m != nil {
		n, err := stepOf(d, m[1])
		if err != nil {
			return nil, err
		}
		if len(d.GetNodes()) == 1 {
			return nil, fmt.Errorf("step %s is the plan's only task", m[1])
		}
		removeNode(d, n)
		return d, nil
	}
	if m := addStep.FindStringSubmatch(feedback); m != nil {
		text := strings.TrimSpace(m[1])
		d.Nodes = append(d.Nodes, &orchestratorv1.Node{Id: freeID(d), Name: titleOf(text), Role: dag.RoleEngineer,
			Prompt: text, Pipeline: true, DependsOn: sinks(d)})
		return d, nil
	}
	return nil, fmt.Errorf("it is none of the revisions the local planner knows")
}

// stepOf finds the task ref names: its number in d's order, or its id.
func stepOf(d *orchestratorv1.Dag, ref string) (*orchestratorv1.Node, error) {
	if i, err := strconv.Atoi(ref); err == nil {
		if i < 1 || i > len(d.GetNodes()) {
			return nil, fmt.Errorf("there is no step %d: the plan has %d", i, len(d.GetNodes()))
		}
		return d.GetNodes()[i-1], nil
	}
	for _, n := range d.GetNodes() {
		if strings.EqualFold(n.GetId(), ref) {
			return n, nil
		}
	}
	return nil, fmt.Errorf("there is no step %q", clip(ref, 40))
}

// removeNode drops n from d; the tasks that depended on it depend on what
// it depended on instead.
func removeNode(d *orchestratorv1.Dag, n *orchestratorv1.Node) {
	d.Nodes = slices.DeleteFunc(d.Nodes, func(m *orchestratorv1.Node) bool { return m == n })
	for _, m := range d.GetNodes() {
		i := slices.Index(m.GetDependsOn(), n.GetId())
		if i < 0 {
			continue
		}
		deps := slices.Delete(slices.Clone(m.GetDependsOn()), i, i+1)
		for _, inherited := range n.GetDependsOn() {
			if !slices.Contains(deps, inherited) {
				deps = append(deps, inherited)
			}
		}
		m.DependsOn = deps
	}
}

// sinks are the ids of d's tasks no other task depends on.
func sinks(d *orchestratorv1.Dag) []string {
	needed := map[string]bool{}
	for _, n := range d.GetNodes() {
		for _, dep := range n.GetDependsOn() {
			needed[dep] = true
		}
	}
	var out []string
	for _, n := range d.GetNodes() {
		if !needed[n.GetId()] {
			out = append(out, n.GetId())
		}
	}
	return out
}

// freeID is an id for a new task of d: "step-<n>", n its position.
func freeID(d *orchestratorv1.Dag) string {
	for i := len(d.GetNodes()) + 1; ; i++ {
		id := "step-" + strconv.Itoa(i)
		if !slices.ContainsFunc(d.GetNodes(), func(n *orchestratorv1.Node) bool { return n.GetId() == id }) {
			return id
		}
	}
}

// noDiff is the diff of a version whose tasks are those of the one before.
const noDiff = "no change to the tasks"

// diffDAGs says, for a person, what changed from one version's tasks to
// the next's: tasks added, removed and changed (with what changed).
func diffDAGs(prevTitle string, prev *orchestratorv1.Dag, nextTitle string, next *orchestratorv1.Dag) string {
	var parts []string
	if prevTitle != nextTitle {
		parts = append(parts, fmt.Sprintf("title %q became %q", prevTitle, nextTitle))
	}
	before := map[string]*orchestratorv1.Node{}
	for _, n := range prev.GetNodes() {
		before[n.GetId()] = n
	}
	after := map[string]bool{}
	for i, n := range next.GetNodes() {
		after[n.GetId()] = true
		old, ok := before[n.GetId()]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("added step %d %q (%s): %s", i+1, n.GetId(), dag.Role(n), clip(n.GetName(), 80)))
		default:
			if what := nodeChanges(old, n); len(what) > 0 {
				parts = append(parts, fmt.Sprintf("changed step %d %q: %s", i+1, n.GetId(), strings.Join(what, ", ")))
			}
		}
	}
	for i, n := range prev.GetNodes() {
		if !after[n.GetId()] {
			parts = append(parts, fmt.Sprintf("removed step %d %q (%s)", i+1, n.GetId(), clip(n.GetName(), 80)))
		}
	}
	if len(parts) == 0 {
		return noDiff
	}
	return strings.Join(parts, "; ")
}

// nodeChanges lists what differs between two versions of a task.
func nodeChanges(a, b *orchestratorv1.Node) []string {
	var out []string
	if a.GetName() != b.GetName() {
		out = append(out, fmt.Sprintf("name %q", clip(b.GetName(), 80)))
	}
	if dag.Role(a) != dag.Role(b) {
		out = append(out, "role "+dag.Role(a)+" → "+dag.Role(b))
	}
	if a.GetPrompt() != b.GetPrompt() {
		out = append(out, "prompt")
	}
	if a.GetCommand() != b.GetCommand() {
		out = append(out, "command")
	}
	if a.GetDoneWhen() != b.GetDoneWhen() {
		out = append(out, "done when")
	}
	if a.GetPipeline() != b.GetPipeline() {
		out = append(out, fmt.Sprintf("pipeline %t", b.GetPipeline()))
	}
	if d := listChange(a.GetDependsOn(), b.GetDependsOn()); d != "" {
		out = append(out, "depends on "+d)
	}
	if d := listChange(a.GetFiles(), b.GetFiles()); d != "" {
		out = append(out, "files "+d)
	}
	return out
}

// listChange says what was added to and removed from a list ("" when
// nothing was).
func listChange(a, b []string) string {
	var parts []string
	for _, v := range b {
		if !slices.Contains(a, v) {
			parts = append(parts, "+"+v)
		}
	}
	for _, v := range a {
		if !slices.Contains(b, v) {
			parts = append(parts, "-"+v)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, " ") + ")"
}

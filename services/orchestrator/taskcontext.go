package orchestrator

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// Selective context (spec H-01..H-05): each task gets only the plan and
// design sections it cites, the spec in full, the PRD's Problem Statement
// and Goals, and a compact project context.

// Limits of a task's context.
const (
	maxTaskContextBytes    = 64 << 10
	maxProjectContextBytes = 2000 // about 500 tokens
)

// Limits of a run's context: every task's context is drawn from the same
// documents, so a run's cost grows with their size and with the sections its
// tasks cite.
const (
	// maxContextDocBytes bounds each context document.
	maxContextDocBytes = 256 << 10
	// maxCitedSections bounds the distinct plan ids (with the parents they
	// fall back to) and the distinct design ids a run's tasks cite.
	maxCitedSections = 1000
	// maxCitationBytes bounds a cited id.
	maxCitationBytes = 128
)

// checkContext checks a run's context documents and its nodes' citations
// against the limits above.
func checkContext(rc *orchestratorv1.RunContext, nodes []*orchestratorv1.Node) error {
	for _, doc := range []struct{ field, text string }{
		{"plan", rc.GetPlan()}, {"design", rc.GetDesign()}, {"spec", rc.GetSpec()}, {"prd", rc.GetPrd()}, {"project", rc.GetProject()},
	} {
		if len(doc.text) > maxContextDocBytes {
			return fmt.Errorf("context.%s: %d bytes exceed the limit of %d", doc.field, len(doc.text), maxContextDocBytes)
		}
	}
	hasPlan, hasDesign := strings.TrimSpace(rc.GetPlan()) != "", strings.TrimSpace(rc.GetDesign()) != ""
	if !hasPlan && !hasDesign {
		return nil // citations without documents cost nothing
	}
	plan, design := map[string]bool{}, map[string]bool{}
	for _, n := range nodes {
		refs := ParseReferences(n.GetSources())
		for _, id := range slices.Concat(refs.Plan, refs.Design) {
			if len(id) > maxCitationBytes {
				return fmt.Errorf("node %q: sources: a cited id is over %d bytes", n.GetId(), maxCitationBytes)
			}
		}
		if hasPlan {
			for _, id := range refs.Plan {
				// The id and each parent it may fall back to.
				id = strings.ToLower(id)
				plan[id] = true
				for i := strings.LastIndexByte(id, '.'); i > 0; i = strings.LastIndexByte(id, '.') {
					id = id[:i]
					plan[id] = true
				}
			}
		}
		if hasDesign {
			for _, id := range refs.Design {
				design[strings.ToLower(id)] = true
			}
		}
		if len(plan) > maxCitedSections || len(design) > maxCitedSections {
			return fmt.Errorf("node %q: sources: the run's tasks cite over %d distinct plan or design sections", n.GetId(), maxCitedSections)
		}
	}
	return nil
}

var (
	planRefPattern   = regexp.MustCompile(`(?i)^Plan\s+(?:Step\s+)?(\w+(?:\.\w+)*)`)
	designRefPattern = regexp.MustCompile(`(?i)^Design\s+(?:Component\s+)?(\w[-\w]*)`)
	headingPattern   = regexp.MustCompile(`^(#{1,6})\s+(.+?)\s*#*\s*$`)
)

// References are a task's citations, split (on commas) by kind.
type References struct {
	Plan, Design []string
}

// ParseReferences reads "Plan 1A.1, Design auth-flow, Spec 3" citations;
// spec references are informational (the spec is given in full).
func ParseReferences(sources []string) References {
	var r References
	for _, src := range sources {
		for _, part := range strings.Split(src, ",") {
			part = strings.TrimSpace(part)
			if m := planRefPattern.FindStringSubmatch(part); m != nil {
				r.Plan = append(r.Plan, m[1])
			} else if m := designRefPattern.FindStringSubmatch(part); m != nil {
				r.Design = append(r.Design, m[1])
			}
		}
	}
	return r
}

// Section returns the part of a markdown document under the first heading
// that contains id: from that heading to the next heading of the same or a
// higher level (spec H-04). Headings inside fenced code blocks are ignored.
func Section(doc, id string) (string, bool) {
	o := newOutline(doc)
	h := o.find(id)
	return o.text(h), h >= 0
}

// outline is a markdown document read once for all the tasks of a run: its
// lines, its headings outside code fences, and the sections looked up so
// far, so that a task's citation costs at most a look at the headings.
type outline struct {
	lines    []string
	headings []heading
	// found maps a looked-up id (lower case) to its heading, or -1.
	found map[string]int
}

// heading is a heading's line, its level, its text in lower case, and its
// section once assembled.
type heading struct {
	line, level int
	text        string
	section     *string
}

func newOutline(doc string) *outline {
	o := &outline{lines: strings.Split(doc, "\n"), found: map[string]int{}}
	fence := false
	for i, l := range o.lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if m := headingPattern.FindStringSubmatch(l); m != nil {
			o.headings = append(o.headings, heading{line: i, level: len(m[1]), text: strings.ToLower(m[2])})
		}
	}
	return o
}

// find returns the index of the first heading that contains id, or -1.
func (o *outline) find(id string) int {
	if id == "" {
		return -1
	}
	id = strings.ToLower(id)
	if h, ok := o.found[id]; ok {
		return h
	}
	h := slices.IndexFunc(o.headings, func(h heading) bool { return strings.Contains(h.text, id) })
	o.found[id] = h
	return h
}

// text is the section under heading h: up to the next heading of the same
// or a higher level.
func (o *outline) text(h int) string {
	if h < 0 {
		return ""
	}
	hd := &o.headings[h]
	if hd.section == nil {
		end := len(o.lines)
		for _, next := range o.headings[h+1:] {
			if next.level <= hd.level {
				end = next.line
				break
			}
		}
		s := strings.TrimRight(strings.Join(o.lines[hd.line:end], "\n"), "\n")
		hd.section = &s
	}
	return *hd.section
}

// planStep finds a plan step's heading, falling back to its parent's ("1A.1"
// to "1A"), or -1.
func (o *outline) planStep(id string) int {
	for {
		if h := o.find(id); h >= 0 {
			return h
		}
		i := strings.LastIndexByte(id, '.')
		if i <= 0 {
			return -1
		}
		id = id[:i]
	}
}

// runDocs are a run's context documents, read once for all its tasks.
type runDocs struct {
	rc           *orchestratorv1.RunContext
	plan, design *outline
	// The documents each task gets as a whole, within the task's bound.
	wholePlan, wholeDesign, spec, prd, project string
}

func newRunDocs(rc *orchestratorv1.RunContext) *runDocs {
	d := &runDocs{rc: rc}
	if rc == nil {
		return d
	}
	whole := func(doc string) string { return truncateMiddle(strings.TrimSpace(doc), maxTaskContextBytes) }
	d.plan, d.design = newOutline(rc.GetPlan()), newOutline(rc.GetDesign())
	d.wholePlan, d.wholeDesign, d.spec = whole(rc.GetPlan()), whole(rc.GetDesign()), whole(rc.GetSpec())
	if prd := rc.GetPrd(); strings.TrimSpace(prd) != "" {
		o := newOutline(prd)
		var parts []string
		for _, h := range []string{"Problem Statement", "Goals"} {
			if i := o.find(h); i >= 0 {
				parts = append(parts, o.text(i))
			}
		}
		d.prd = truncateMiddle(strings.Join(parts, "\n\n"), maxTaskContextBytes)
	}
	if p := strings.TrimSpace(rc.GetProject()); p != "" {
		d.project = truncateMiddle(p, maxProjectContextBytes)
	}
	return d
}

// TaskContext assembles a task's context from the run's documents.
func TaskContext(rc *orchestratorv1.RunContext, n *orchestratorv1.Node) string {
	return newRunDocs(rc).taskContext(n)
}

func (d *runDocs) taskContext(n *orchestratorv1.Node) string {
	if d.rc == nil {
		return ""
	}
	refs := ParseReferences(n.GetSources())
	var b strings.Builder
	scoped := func(title, whole string, o *outline, ids []string, find func(string) int) {
		if whole == "" {
			return
		}
		var parts []string
		seen := map[int]bool{}
		size := 0
		// Past the task's bound, more sections would only be cut out.
		for _, id := range ids {
			if size > maxTaskContextBytes {
				break
			}
			if h := find(id); h >= 0 && !seen[h] {
				seen[h] = true
				s := o.text(h)
				parts = append(parts, s)
				size += len(s)
			}
		}
		if len(parts) == 0 {
			// Nothing cited, or the citations were not found: the whole
			// document.
			parts = []string{whole}
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", title, strings.Join(parts, "\n\n"))
	}
	scoped("Plan", d.wholePlan, d.plan, refs.Plan, d.plan.planStep)
	scoped("Design", d.wholeDesign, d.design, refs.Design, d.design.find)
	if d.spec != "" {
		fmt.Fprintf(&b, "## Spec\n\n%s\n\n", d.spec)
	}
	if d.prd != "" {
		fmt.Fprintf(&b, "## PRD\n\n%s\n\n", d.prd)
	}
	if d.project != "" {
		fmt.Fprintf(&b, "## Project\n\n%s\n\n", d.project)
	}
	return truncateMiddle(strings.TrimRight(b.String(), "\n"), maxTaskContextBytes)
}

// withTaskContext is the node as dispatched: its selective context and the
// run's intent set (a client's own values of these output-only fields are
// dropped).
func withTaskContext(docs *runDocs, n *orchestratorv1.Node) *orchestratorv1.Node {
	rc := docs.rc
	c := docs.taskContext(n)
	if c == "" && n.GetTaskContext() == "" && len(rc.GetKeyConstraints())+len(rc.GetSuccessCriteria())+
		len(n.GetKeyConstraints())+len(n.GetSuccessCriteria()) == 0 {
		return n
	}
	out := proto.Clone(n).(*orchestratorv1.Node)
	out.TaskContext = c
	// The run's intent, against which the pipeline checks corrections
	// (spec A-12).
	out.KeyConstraints, out.SuccessCriteria = rc.GetKeyConstraints(), rc.GetSuccessCriteria()
	return out
}

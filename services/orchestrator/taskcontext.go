package orchestrator

import (
	"fmt"
	"regexp"
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
	if id == "" {
		return "", false
	}
	lines := strings.Split(doc, "\n")
	start, level := -1, 0
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		m := headingPattern.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if start >= 0 {
			if len(m[1]) <= level {
				return strings.TrimRight(strings.Join(lines[start:i], "\n"), "\n"), true
			}
			continue
		}
		if strings.Contains(strings.ToLower(m[2]), strings.ToLower(id)) {
			start, level = i, len(m[1])
		}
	}
	if start < 0 {
		return "", false
	}
	return strings.TrimRight(strings.Join(lines[start:], "\n"), "\n"), true
}

// planSection finds a plan step, falling back to its parent ("1A.1" to
// "1A"); ok is false when neither is found.
func planSection(doc, id string) (string, bool) {
	for {
		if s, ok := Section(doc, id); ok {
			return s, true
		}
		i := strings.LastIndexByte(id, '.')
		if i <= 0 {
			return "", false
		}
		id = id[:i]
	}
}

// TaskContext assembles a task's context from the run's documents.
func TaskContext(rc *orchestratorv1.RunContext, n *orchestratorv1.Node) string {
	if rc == nil {
		return ""
	}
	refs := ParseReferences(n.GetSources())
	var b strings.Builder
	scoped := func(title, doc string, ids []string, find func(string, string) (string, bool)) {
		if strings.TrimSpace(doc) == "" {
			return
		}
		var parts []string
		seen := map[string]bool{}
		for _, id := range ids {
			if s, ok := find(doc, id); ok && !seen[s] {
				seen[s] = true
				parts = append(parts, s)
			}
		}
		if len(parts) == 0 {
			// Nothing cited, or the citations were not found: the whole
			// document.
			parts = []string{strings.TrimSpace(doc)}
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", title, strings.Join(parts, "\n\n"))
	}
	scoped("Plan", rc.GetPlan(), refs.Plan, planSection)
	scoped("Design", rc.GetDesign(), refs.Design, Section)
	if s := strings.TrimSpace(rc.GetSpec()); s != "" {
		fmt.Fprintf(&b, "## Spec\n\n%s\n\n", s)
	}
	if prd := rc.GetPrd(); strings.TrimSpace(prd) != "" {
		var parts []string
		for _, h := range []string{"Problem Statement", "Goals"} {
			if s, ok := Section(prd, h); ok {
				parts = append(parts, s)
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "## PRD\n\n%s\n\n", strings.Join(parts, "\n\n"))
		}
	}
	if p := strings.TrimSpace(rc.GetProject()); p != "" {
		fmt.Fprintf(&b, "## Project\n\n%s\n\n", truncateMiddle(p, maxProjectContextBytes))
	}
	return truncateMiddle(strings.TrimRight(b.String(), "\n"), maxTaskContextBytes)
}

// withTaskContext is the node as dispatched: its selective context and the
// run's intent set (a client's own values of these output-only fields are
// dropped).
func withTaskContext(rc *orchestratorv1.RunContext, n *orchestratorv1.Node) *orchestratorv1.Node {
	c := TaskContext(rc, n)
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

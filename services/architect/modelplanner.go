package architect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
)

// agentType attributes the Architect's model calls in usage records.
const agentType = "architect"

// SetLLMGate makes the Architect draft plans through the LLM gate, in the
// planning priority class, with each call's usage attributed to the
// caller's tenant and session and to the architect. With only the offline
// `local` provider configured, the gate's answer is that provider's
// rule-based plan. Call it before the service serves requests.
func (s *Service) SetLLMGate(g *gate.Gate) {
	s.planner = &gatePlanner{gate: g}
}

// gatePlanner asks a model, through the gate, for a plan in a JSON format.
type gatePlanner struct {
	gate *gate.Gate
}

// planSystem is the system prompt of a planning call, followed by what was
// found before planning. The `local` provider answers it with its rules (it
// asks for a JSON plan).
const planSystem = `You are the Architect of a software engineering team. Break the user's request into a plan: a small DAG of tasks for these roles: "engineer" (changes code in the repository; the Inspector then reviews its change and the Tester tests it, and their findings go back to it until both pass), "tester" (writes or runs tests on its own), "inspector" (reviews on its own).
Answer with a JSON plan and nothing else, in this form:
{"title": "<short title>", "nodes": [{"id": "<short-id>", "role": "engineer|inspector|tester", "name": "<step name>", "prompt": "<full instructions for the agent>", "files": ["<path>", ...], "done_when": "<what must hold for the task to be done>", "depends_on": ["<id>", ...]}]}
Ids are unique lowercase words; depends_on names earlier nodes only; every prompt must stand alone (repeat the relevant part of the request). In files, name the files each task changes, drawing on the code found below; in done_when, say what a reviewer or a test can check. Every engineer task changes code: it reads and searches the code itself, so no task only surveys. Use 1 to 8 nodes; a small change is one engineer task. An engineer task whose change needs neither review nor tests may say "pipeline": false. Heed the past failures and decisions below.`

// reviseAsk introduces the user's feedback on the plan a model drafted.
const reviseAsk = "Revise the plan: "

// reviseAnswer ends a revision request.
const reviseAnswer = "\n\nAnswer with the whole revised plan, in the same JSON form and nothing else."

type sessionKey struct{}

// withSession carries the plan's session to the planner (usage attribution).
func withSession(ctx context.Context, sessionID string) context.Context {
	return context.WithValue(ctx, sessionKey{}, sessionID)
}

// Offline implements Planner: the gate has only the offline provider.
func (p *gatePlanner) Offline() bool { return p.gate.Providers().Default().Name() == llm.Local }

// Draft implements Planner.
func (p *gatePlanner) Draft(ctx context.Context, b Brief) (Draft, error) {
	return p.complete(ctx, b, []llm.Message{{Role: llm.RoleUser, Content: b.Request}}, 2048+5*llm.EstimateTokens(b.Request))
}

// Revise implements Planner. The model sees the conversation of the plan:
// the request, each version as the JSON plan it answered, the feedback
// that led to the next, and last the new feedback. Offline, the local
// planner's revisions apply.
func (p *gatePlanner) Revise(ctx context.Context, r Revision) (Draft, error) {
	if p.Offline() {
		return reviseOffline(r), nil
	}
	msgs := []llm.Message{{Role: llm.RoleUser, Content: r.Request}}
	for i, v := range r.Versions {
		if i > 0 {
			msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: reviseAsk + v.GetFeedback() + reviseAnswer})
		}
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: planJSON(v.GetTitle(), v.GetDag())})
	}
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: reviseAsk + r.Feedback + reviseAnswer})
	current := planJSON(r.current().GetTitle(), r.current().GetDag())
	return p.complete(ctx, r.Brief, msgs, 2048+5*llm.EstimateTokens(r.Request)+2*llm.EstimateTokens(current))
}

// complete asks the model for a plan and parses its answer.
func (p *gatePlanner) complete(ctx context.Context, b Brief, msgs []llm.Message, maxTokens int) (Draft, error) {
	who, _ := identity.FromContext(ctx)
	session, _ := ctx.Value(sessionKey{}).(string)
	system := planSystem
	if !p.Offline() {
		// The offline provider reads none of it, and answers by keywords
		// that the findings might hold.
		system += "\n\n" + consultationText(b.Repository, b.Consultation)
	}
	resp, err := p.gate.Complete(ctx, &llm.Request{
		System:    system,
		Messages:  msgs,
		MaxTokens: maxTokens,
		Priority:  llm.PriorityPlanning,
		Attribution: llm.Attribution{TenantID: who.TenantID, UserID: who.UserID, SessionID: session, AgentType: agentType,
			AgentID: agentType},
	})
	if err != nil {
		return Draft{}, modelError(err)
	}
	d, title, err := parsePlan(resp.Content)
	if err != nil {
		return Draft{}, unusablePlan(err)
	}
	if title == "" {
		title = b.Request
	}
	planner := resp.Model
	if resp.Provider == llm.Local || planner == llm.Local || planner == "" {
		planner = plannerLocal
	}
	return Draft{Title: titleOf(title), DAG: d, Planner: planner}, nil
}

// jsonNode is a task in the JSON plan a model answers with.
type jsonNode struct {
	ID        string   `json:"id"`
	Role      string   `json:"role"`
	Name      string   `json:"name"`
	Prompt    string   `json:"prompt"`
	Files     []string `json:"files,omitempty"`
	DoneWhen  string   `json:"done_when,omitempty"`
	DependsOn []string `json:"depends_on,omitempty"`
	// Pipeline is true for an engineer task unless it says false.
	Pipeline *bool `json:"pipeline,omitempty"`
}

type jsonPlan struct {
	Title string     `json:"title"`
	Nodes []jsonNode `json:"nodes"`
}

// Bounds of the files a task names.
const (
	maxNodeFiles    = 20
	maxNodeFileSize = 300
)

// parsePlan reads the JSON plan in a model's answer (the outermost object,
// so a fenced or introduced answer works too) into a DAG; the caller
// validates the DAG. An engineer task runs as a pipeline (Engineer,
// Inspector, Tester) unless it says "pipeline": false.
func parsePlan(text string) (*orchestratorv1.Dag, string, error) {
	i, j := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if i < 0 || j < i {
		return nil, "", errors.New("no JSON object in the answer")
	}
	var p jsonPlan
	if err := json.Unmarshal([]byte(text[i:j+1]), &p); err != nil {
		return nil, "", fmt.Errorf("malformed JSON plan: %w", err)
	}
	if len(p.Nodes) == 0 {
		return nil, "", errors.New("the plan has no nodes")
	}
	d := &orchestratorv1.Dag{}
	for _, n := range p.Nodes {
		role := strings.ToLower(strings.TrimSpace(n.Role))
		switch role {
		case dag.RoleEngineer, dag.RoleInspector, dag.RoleTester:
		default:
			return nil, "", fmt.Errorf("node %q: unknown role %q", n.ID, n.Role)
		}
		name := strings.TrimSpace(n.Name)
		if name == "" {
			name = n.ID
		}
		d.Nodes = append(d.Nodes, &orchestratorv1.Node{Id: strings.TrimSpace(n.ID), Name: name, Role: role, Prompt: n.Prompt,
			DependsOn: n.DependsOn, Files: cleanFiles(n.Files), DoneWhen: strings.TrimSpace(n.DoneWhen),
			Pipeline: role == dag.RoleEngineer && (n.Pipeline == nil || *n.Pipeline)})
	}
	return d, strings.TrimSpace(p.Title), nil
}

// cleanFiles trims the files a task names, dropping empty, repeated and
// oversized ones, up to maxNodeFiles.
func cleanFiles(in []string) []string {
	var out []string
	for _, f := range in {
		f = strings.TrimSpace(f)
		if f != "" && len(f) <= maxNodeFileSize && !slices.Contains(out, f) && len(out) < maxNodeFiles {
			out = append(out, f)
		}
	}
	return out
}

// planJSON is a plan version in the JSON form a model answers with.
func planJSON(title string, d *orchestratorv1.Dag) string {
	p := jsonPlan{Title: title}
	for _, n := range d.GetNodes() {
		jn := jsonNode{ID: n.GetId(), Role: dag.Role(n), Name: n.GetName(), Prompt: n.GetPrompt(), Files: n.GetFiles(),
			DoneWhen: n.GetDoneWhen(), DependsOn: n.GetDependsOn()}
		if jn.Role == dag.RoleEngineer && !n.GetPipeline() {
			jn.Pipeline = new(bool)
		}
		p.Nodes = append(p.Nodes, jn)
	}
	b, _ := json.Marshal(p) // plain strings and slices: cannot fail
	return string(b)
}

package architect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// planSystem is the system prompt of a planning call. The `local` provider
// answers it with its rules (it asks for a JSON plan).
const planSystem = `You are the Architect of a software engineering team. Break the user's request into a plan: a small DAG of tasks for these roles: "engineer" (changes code), "inspector" (reviews a change), "tester" (writes and runs tests).
Answer with a JSON plan and nothing else, in this form:
{"title": "<short title>", "nodes": [{"id": "<short-id>", "role": "engineer|inspector|tester", "name": "<step name>", "prompt": "<full instructions for the agent>", "depends_on": ["<id>", ...]}]}
Ids are unique lowercase words; depends_on names earlier nodes only; every prompt must stand alone (repeat the relevant part of the request). Use 2 to 8 nodes and end with verification by a tester.`

type sessionKey struct{}

// withSession carries the plan's session to the planner (usage attribution).
func withSession(ctx context.Context, sessionID string) context.Context {
	return context.WithValue(ctx, sessionKey{}, sessionID)
}

// Draft implements Planner.
func (p *gatePlanner) Draft(ctx context.Context, request string) (Draft, error) {
	who, _ := identity.FromContext(ctx)
	session, _ := ctx.Value(sessionKey{}).(string)
	resp, err := p.gate.Complete(ctx, &llm.Request{
		System:    planSystem,
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: request}},
		MaxTokens: 2048 + 5*llm.EstimateTokens(request),
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
		title = request
	}
	planner := resp.Model
	if resp.Provider == llm.Local || planner == llm.Local || planner == "" {
		planner = plannerLocal
	}
	return Draft{Title: titleOf(title), DAG: d, Planner: planner}, nil
}

type jsonPlan struct {
	Title string `json:"title"`
	Nodes []struct {
		ID        string   `json:"id"`
		Role      string   `json:"role"`
		Name      string   `json:"name"`
		Prompt    string   `json:"prompt"`
		DependsOn []string `json:"depends_on"`
	} `json:"nodes"`
}

// parsePlan reads the JSON plan in a model's answer (the outermost object,
// so a fenced or introduced answer works too) into a DAG; the caller
// validates the DAG.
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
		d.Nodes = append(d.Nodes, &orchestratorv1.Node{Id: strings.TrimSpace(n.ID), Name: name, Role: role, Prompt: n.Prompt, DependsOn: n.DependsOn})
	}
	return d, strings.TrimSpace(p.Title), nil
}

package guide

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/topology"
)

// TestInboxConsumersAreRead checks inboxConsumers against the services'
// code: an agent's inbox is read where a service runs pkg/inbox with that
// agent (inbox.Config{Agent: topology.AgentX}) or consumes it itself
// (topology.InboxConsumer / topology.ConsumeInbox with topology.AgentX).
func TestInboxConsumersAreRead(t *testing.T) {
	t.Parallel()
	consts := topologyAgents(t)
	found := map[string]string{}
	files, err := filepath.Glob("../*/*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		service := "services/" + filepath.Base(filepath.Dir(path))
		ast.Inspect(f, func(n ast.Node) bool {
			for _, agent := range consumedAgents(n) {
				value, ok := consts[agent]
				require.True(t, ok, "%s: topology.%s is no agent constant", path, agent)
				found[value] = service
			}
			return true
		})
	}
	require.Equal(t, found, inboxConsumers, "inboxConsumers must list exactly the inboxes the services read")
}

// consumedAgents are the topology.Agent* constants n consumes the inbox of.
func consumedAgents(n ast.Node) []string {
	switch x := n.(type) {
	case *ast.CompositeLit:
		if sel, ok := x.Type.(*ast.SelectorExpr); ok && isPkgSel(sel, "inbox", "Config") {
			for _, el := range x.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if key, isIdent := kv.Key.(*ast.Ident); ok && isIdent && key.Name == "Agent" {
					if v, ok := kv.Value.(*ast.SelectorExpr); ok && isPkgSel(v, "topology", v.Sel.Name) {
						return []string{v.Sel.Name}
					}
				}
			}
		}
	case *ast.CallExpr:
		fn, ok := x.Fun.(*ast.SelectorExpr)
		if ok && (isPkgSel(fn, "topology", "InboxConsumer") || isPkgSel(fn, "topology", "ConsumeInbox")) {
			for _, arg := range x.Args {
				if v, ok := arg.(*ast.SelectorExpr); ok && isPkgSel(v, "topology", v.Sel.Name) && strings.HasPrefix(v.Sel.Name, "Agent") {
					return []string{v.Sel.Name}
				}
			}
		}
	}
	return nil
}

func isPkgSel(sel *ast.SelectorExpr, pkg, name string) bool {
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// topologyAgents reads the Agent* constants of pkg/topology.
func topologyAgents(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../pkg/topology/topology.go", nil, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(name.Name, "Agent") {
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out[name.Name] = v
				}
			}
		}
	}
	require.Equal(t, topology.AgentArchitect, out["AgentArchitect"])
	return out
}

// TestRouteTargets: every agent the Guide can route a request to is one
// whose inbox a service reads (inboxConsumers): the classifier's targets
// over its whole keyword table, the direct skills, the model classifier's
// answers, /plan, /reroute and the agents a reroute or a question to the
// user may offer, the agents' requests, and stored failures' suggestions.
func TestRouteTargets(t *testing.T) {
	t.Parallel()
	read := func(agent, from string) {
		t.Helper()
		_, ok := inboxConsumers[agent]
		require.True(t, ok, "%s routes to %q, whose inbox no service reads", from, agent)
	}
	c := newKeywordClassifier()
	for _, text := range classifierSamples() {
		cl, err := c.Classify(context.Background(), text)
		require.NoError(t, err)
		if cl.Target != "" {
			read(cl.Target, "the classifier on "+strconv.Quote(text))
		}
		for _, cand := range cl.Candidates {
			read(cand, "the classifier's candidates on "+strconv.Quote(text))
		}
	}
	require.Equal(t, topology.AgentArchitect, classify(t, c, "fix typo in README").Target, "a trivial change is planned")

	for _, text := range []string{"show me the retry loop", "show me ParseConfig", "what is ParseConfig?"} {
		cl, ok := directSkill(text)
		require.True(t, ok, text)
		read(cl.Target, "the direct skill on "+strconv.Quote(text))
	}

	agents := slices.Concat(slices.Collect(maps.Values(topologyAgents(t))), topology.Roles, []string{"Engineer", " tester ", "user", "designer"})
	for _, agent := range agents {
		cl, err := parseLLMAnswer(`{"intent_type":"EXPLICIT","target":"` + agent + `","confidence":0.9,"candidates":["` + agent + `","tester"]}`)
		if err == nil && cl.Target != "" {
			read(cl.Target, "the model classifier answering "+strconv.Quote(agent))
		}
		for _, cand := range cl.Candidates {
			read(cand, "the model classifier's candidates")
		}
		// /reroute, a declining agent's suggestion, a stored failure's agent.
		if to, ok := routeTarget(agent); ok {
			read(to, "routeTarget("+strconv.Quote(agent)+")")
		}
	}

	res, err := (&Service{}).planCommand(context.Background(), &commandEnv{}, "add a --version flag to cmd/foo")
	require.NoError(t, err)
	read(res.route.Target, "/plan")
	for _, agent := range routableAgents {
		read(agent, "routableAgents (/reroute, the user's choice, escalated reroutes)")
	}
	for _, p := range agentPurposes {
		read(p.agent, "the clarification's options")
	}
	for typ, agent := range requestTypes {
		if agent != "classify" {
			read(agent, "an agent's "+typ.String())
		}
	}
}

// A route to an inbox no service reads is refused before anything is
// stored or published.
func TestNoRouteToAnUnreadInbox(t *testing.T) {
	t.Parallel()
	s := &Service{}
	m := message{ID: "m", SessionID: "s", Route: outcomeRoute{Target: topology.RoleEngineer, Tier: tierClassifier}}
	require.ErrorContains(t, s.sealEnvelope(ownerIdentity("t1", "u1"), &m), "no service reads its inbox")
	m.Route.Target = topology.AgentArchitect
	require.NoError(t, s.sealEnvelope(ownerIdentity("t1", "u1"), &m))
	require.NotEmpty(t, m.Envelope)
}

// classifierSamples are texts over the keyword classifier's whole table:
// each rule's phrase alone, as an imperative on a file, with an
// identifier, as a trivial edit and as work on an issue, and a few
// sentences.
func classifierSamples() []string {
	out := []string{"fix typo in README", "fix issue #42 and open a pull request", "improve the performance",
		"where is ParseConfig defined", "how did we handle the auth migration last month", "hello"}
	for _, d := range keywordDomains {
		for _, r := range d.rules {
			p := strings.Join(r.phrase, " ")
			out = append(out, p, p+" the README typo", "please "+p+" ParseConfig in config.go", p+" for issue #12")
		}
	}
	return out
}

func classify(t *testing.T, c Classifier, text string) Classification {
	t.Helper()
	cl, err := c.Classify(context.Background(), text)
	require.NoError(t, err)
	return cl
}

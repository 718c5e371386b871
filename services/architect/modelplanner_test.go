package architect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/scriptmodel"
	"sylk.dev/sylk/pkg/testenv"
)

// usageRecords keeps the gate's usage records in memory.
type usageRecords struct {
	mu   sync.Mutex
	recs []llm.UsageRecord
}

func (r *usageRecords) Record(_ context.Context, rec llm.UsageRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

func (r *usageRecords) all() []llm.UsageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]llm.UsageRecord(nil), r.recs...)
}

func gateFor(t *testing.T, f fixture, cfg gate.Config, providers ...llm.Provider) (*gate.Gate, *usageRecords) {
	t.Helper()
	reg, err := llm.NewRegistry(providers[0].Name(), providers...)
	require.NoError(t, err)
	recs := &usageRecords{}
	g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: testenv.Redis(t), Signals: signal.NewNATS(f.bus), Usage: recs})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	f.svc.SetLLMGate(g)
	return g, recs
}

// With only the offline provider, the plan comes through the gate from its
// rules, and the call is recorded for the tenant, session and architect.
func TestPlannerThroughGateLocalProvider(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	g, recs := gateFor(t, f, gate.DefaultConfig(), local.New())
	parent := newSession()
	resp, err := f.svc.CreatePlan(as("t1", "u1"), &architectv1.CreatePlanRequest{Parent: parent, Request: "fix the crash when the invoice total is empty"})
	require.NoError(t, err)
	p := resp.GetPlan()
	require.Equal(t, "local", p.GetPlanner())
	require.Equal(t, "Fix the crash when the invoice total is empty", p.GetTitle())
	var steps []string
	for _, n := range p.GetDag().GetNodes() {
		steps = append(steps, n.GetId()+":"+n.GetRole())
	}
	require.Equal(t, []string{"reproduce:tester", "fix:engineer", "inspect:inspector", "verify:tester"}, steps)
	_, err = dag.Validate(p.GetDag())
	require.NoError(t, err)

	g.Close() // the usage writer stores what it holds
	rs := recs.all()
	require.Len(t, rs, 1)
	r := rs[0]
	require.Equal(t, "t1", r.TenantID)
	require.Equal(t, strings.TrimPrefix(parent, "sessions/"), r.SessionID)
	require.Equal(t, "architect", r.AgentType)
	require.Equal(t, llm.Local, r.Provider)
	require.Equal(t, "ok", r.Outcome)
	require.Positive(t, r.InputTokens)
}

// A model behind an OpenAI-format server drafts the plan; its answer is
// parsed, validated and attributed. A malformed answer and an exhausted
// budget come back as clear statuses.
func TestPlannerThroughGateModelProvider(t *testing.T) {
	t.Parallel()
	plan := `{"title": "Version endpoint", "nodes": [
	  {"id": "impl", "role": "engineer", "name": "Implement", "prompt": "Add GET /version to the gateway."},
	  {"id": "review", "role": "inspector", "name": "Review", "prompt": "Review the /version change.", "depends_on": ["impl"]},
	  {"id": "test", "role": "tester", "name": "Test", "prompt": "Test GET /version.", "depends_on": ["review"]}]}`
	var mu sync.Mutex
	var systems []string
	answer := "Here is the plan:\n```json\n" + plan + "\n```"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		systems = append(systems, fmt.Sprint(req.Messages[0].Content))
		text := answer
		if strings.Contains(string(body), "malformed") {
			text = "I would rather not plan this."
		}
		mu.Unlock()
		content, _ := json.Marshal(text)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%s}}],"usage":{"prompt_tokens":321,"completion_tokens":123,"total_tokens":444}}`, content)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, false)
	cfg := gate.DefaultConfig()
	cfg.SessionTokens = 20_000
	g, recs := gateFor(t, f, cfg, openai.New(llm.ProviderOptions{APIKey: "sk-test", BaseURL: srv.URL + "/v1", HTTPClient: srv.Client()}), local.New())

	parent := newSession()
	resp, err := f.svc.CreatePlan(as("t2", "u1"), &architectv1.CreatePlanRequest{Parent: parent, Request: "add a /version endpoint to the gateway"})
	require.NoError(t, err)
	p := resp.GetPlan()
	require.Equal(t, "gpt-4.1", p.GetPlanner())
	require.Equal(t, "Version endpoint", p.GetTitle())
	require.Len(t, p.GetDag().GetNodes(), 3)
	require.Equal(t, []string{"review"}, p.GetDag().GetNodes()[2].GetDependsOn())
	mu.Lock()
	require.Contains(t, systems[0], "You are the Architect")
	mu.Unlock()

	_, err = f.svc.CreatePlan(as("t2", "u1"), &architectv1.CreatePlanRequest{Parent: parent, Request: "malformed request"})
	testenv.RequireCode(t, err, codes.Unavailable, "could not be used")

	// The session's budget (20,000 tokens) cannot hold another reservation
	// of a huge request.
	_, err = f.svc.CreatePlan(as("t2", "u1"), &architectv1.CreatePlanRequest{Parent: parent, Request: strings.Repeat("add a field to the invoice ", 500)})
	testenv.RequireCode(t, err, codes.ResourceExhausted, "session token budget exceeded")

	g.Close()
	rs := recs.all()
	require.Len(t, rs, 2, "the refused call never reached the provider")
	r := rs[0]
	require.Equal(t, "t2", r.TenantID)
	require.Equal(t, strings.TrimPrefix(parent, "sessions/"), r.SessionID)
	require.Equal(t, "architect", r.AgentType)
	require.Equal(t, llm.OpenAI, r.Provider)
	require.Equal(t, "gpt-4.1", r.Model)
	require.Equal(t, 321, r.InputTokens)
	require.Equal(t, 123, r.OutputTokens)
	require.Positive(t, r.CostUSD)
}

// scriptGate makes f's Architect plan through a gate whose only provider
// is the OpenAI-compatible client talking to a script server.
func scriptGate(t *testing.T, f fixture, scripts ...scriptmodel.Script) *scriptmodel.Server {
	t.Helper()
	srv, err := scriptmodel.New(scripts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	lc := testenv.FromFlags[llm.Config](t)
	lc.OpenAI.APIKey, lc.OpenAI.BaseURL = "sk-test", srv.URL+"/v1"
	reg, err := provider.New(lc)
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	f.svc.SetLLMGate(g)
	return srv
}

// A model plans from what was found before planning: the consultation is
// in its prompt, and its tasks name their files and done criteria. It
// revises its plan in the same conversation: the request, its plan, the
// feedback; an answer it cannot use stores no version.
func TestModelPlansAndRevises(t *testing.T) {
	t.Parallel()
	v1 := `{"title": "Fix the failing test in pkg/x", "nodes": [{"id": "fix", "role": "engineer", "name": "Fix Add",
	  "prompt": "Make Add in pkg/x/x.go return the sum, so that TestAdd passes.", "files": ["pkg/x/x.go", " pkg/x/x.go", ""],
	  "done_when": "go test ./pkg/x passes"}]}`
	v2 := `{"title": "Fix the failing test in pkg/x", "nodes": [{"id": "fix", "role": "engineer", "name": "Fix Add",
	  "prompt": "Make Add in pkg/x/x.go return the sum, so that TestAdd passes.", "files": ["pkg/x/x.go"], "done_when": "go test ./pkg/x passes"},
	  {"id": "negative", "role": "engineer", "name": "Test negative numbers", "prompt": "Add a test of Add with negative numbers.",
	  "files": ["pkg/x/x_test.go"], "done_when": "the new test passes", "depends_on": ["fix"], "pipeline": false}]}`
	f, p := newFlow(t, Config{})
	srv := scriptGate(t, f, scriptmodel.Script{Match: "fix the failing test in pkg/x", Turns: []scriptmodel.Turn{
		scriptmodel.Say(v1),
		scriptmodel.Say("```json\n" + v2 + "\n```").Then("Revise the plan: also test negative numbers"),
		scriptmodel.Say("I would rather not.").Then("Revise the plan: make it shorter"),
	}})
	ctx := as("t1", "u1")
	created, err := f.svc.CreatePlan(ctx, &architectv1.CreatePlanRequest{Parent: p.guide.session("repositories/r1", nil),
		Request: "fix the failing test in pkg/x"})
	require.NoError(t, err)
	plan := created.GetPlan()
	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, reqs[0].Model, plan.GetPlanner())
	require.Empty(t, plan.GetNotes(), "a model carries the tasks out, on the session's repository")
	for _, want := range []string{"You are the Architect", `"files"`, `"done_when"`, "Repository: repositories/r1", "- pkg/x/x.go:3-9 Add",
		"Codebase health: repositories/r1 (calc): index ready", "- go test ./pkg/x timed out on a 2s deadline", "- keep pkg/x free of dependencies"} {
		require.Contains(t, reqs[0].System, want)
	}
	require.Equal(t, "fix the failing test in pkg/x", reqs[0].Messages[0].Content)
	fix := plan.GetDag().GetNodes()[0]
	require.Equal(t, []string{"pkg/x/x.go"}, fix.GetFiles())
	require.Equal(t, "go test ./pkg/x passes", fix.GetDoneWhen())
	require.True(t, fix.GetPipeline(), "an engineer task is a pipeline unless it says otherwise")
	require.NotContains(t, fix.GetPrompt(), "What was found", "a model's tasks are its own")

	revised, err := f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: plan.GetName(), Feedback: "also test negative numbers"})
	require.NoError(t, err)
	rp := revised.GetPlan()
	require.Equal(t, int32(2), rp.GetVersion())
	require.Equal(t, []string{"fix", "negative"}, nodeIDs(rp.GetDag()))
	require.False(t, rp.GetDag().GetNodes()[1].GetPipeline())
	require.Equal(t, `added step 2 "negative" (engineer): Test negative numbers`, rp.GetVersions()[1].GetDiff())
	require.Equal(t, reqs[0].Model, rp.GetVersions()[1].GetPlanner())
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.revised.WithLabelValues("model", "true")))
	reqs = srv.Requests()
	require.Len(t, reqs, 2)
	msgs := reqs[1].Messages
	require.Len(t, msgs, 3)
	require.Equal(t, "fix the failing test in pkg/x", msgs[0].Content)
	require.Equal(t, "assistant", msgs[1].Role)
	require.Equal(t, planJSON(plan.GetTitle(), plan.GetDag()), msgs[1].Content, "the model sees the plan it revises")
	require.True(t, strings.HasPrefix(msgs[2].Content, "Revise the plan: also test negative numbers"))

	_, err = f.svc.RevisePlan(ctx, &architectv1.RevisePlanRequest{Name: plan.GetName(), Feedback: "make it shorter"})
	testenv.RequireReason(t, err, codes.Unavailable, reasonPlannerUnavailable, "could not be used")
	require.Len(t, srv.Requests()[2].Messages, 5, "the whole conversation: request, v1, feedback, v2, feedback")
	got, err := f.svc.GetPlan(ctx, &architectv1.GetPlanRequest{Name: plan.GetName()})
	require.NoError(t, err)
	require.Equal(t, int32(2), got.GetPlan().GetVersion())
	require.Len(t, got.GetPlan().GetVersions(), 2)
	require.Empty(t, srv.Failures())
}

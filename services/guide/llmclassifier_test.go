package guide

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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// chatServer is an OpenAI-compatible chat completions endpoint whose answer
// content is given by answer; it records the request bodies it was sent.
type chatServer struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (c *chatServer) start(t *testing.T, status int, answer func(user string) string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.bodies = append(c.bodies, body)
		c.mu.Unlock()
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"error":{"message":"invalid request","type":"invalid_request_error"}}`)
			return
		}
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		user, _ := last["content"].(string)
		content, _ := json.Marshal(answer(user))
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"cc1","object":"chat.completion","created":1,"model":"router-small",
			"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":%s}}],
			"usage":{"prompt_tokens":120,"completion_tokens":40,"total_tokens":160}}`, content)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// newLLMClassifier builds the classifier on a real gate and the openai
// provider pointed at baseURL.
func newLLMClassifier(t *testing.T, baseURL string, timeout time.Duration) (*LLMClassifier, *prometheus.Registry) {
	t.Helper()
	reg, err := provider.New(llm.Config{Provider: llm.OpenAI, MaxTokens: 512,
		OpenAI: llm.ProviderConfig{BaseURL: baseURL, APIKey: "test-key", Fast: "router-small"}})
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	metrics := prometheus.NewRegistry()
	return NewLLMClassifier(g, LLMClassifierConfig{Timeout: timeout}, logx.Discard(), metrics), metrics
}

func TestLLMClassifierModelAnswer(t *testing.T) {
	t.Parallel()
	var srv chatServer
	url := srv.start(t, http.StatusOK, func(string) string {
		return "Here is the routing:\n```json\n" + `{"intent_type":"EXPLORATORY","target":"librarian","knowledge_intent":"locate",
			"subject":"Retry Policy","time_scope":"","key_constraints":["only the gateway"],"success_criteria":[],
			"confidence":0.92,"candidates":["librarian","archivalist"],"reason":"asks where code lives"}` + "\n```"
	})
	c, metrics := newLLMClassifier(t, url, 5*time.Second)
	got, err := c.Classify(as("acme", "alice"), "where do we keep the retry policy in the gateway?")
	require.NoError(t, err)
	require.Equal(t, "librarian", got.Target)
	require.Equal(t, gateExploratory, got.IntentType)
	require.Equal(t, "LOCATE", got.KnowledgeIntent)
	require.Equal(t, "retry_policy", got.Subject)
	require.InDelta(t, 0.92, got.Confidence, 1e-9)
	require.Equal(t, []string{"only the gateway"}, got.KeyConstraints)
	require.Equal(t, []string{"librarian", "archivalist"}, got.Candidates)
	require.Contains(t, got.Reason, "model: asks where code lives")
	require.InDelta(t, 1, testutil.ToFloat64(c.outcomes.WithLabelValues("model")), 0)
	require.NotNil(t, metrics)

	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Len(t, srv.bodies, 1)
	body := srv.bodies[0]
	require.Equal(t, "router-small", body["model"], "the fast alias is used")
	require.InDelta(t, 0, body["temperature"], 0)
	msgs := body["messages"].([]any)
	require.Len(t, msgs, 2)
	require.Equal(t, "system", msgs[0].(map[string]any)["role"])
	require.Contains(t, msgs[0].(map[string]any)["content"], "Intent types: TRIVIAL")
	require.Equal(t, "where do we keep the retry policy in the gateway?", msgs[1].(map[string]any)["content"])
}

func TestLLMClassifierFallback(t *testing.T) {
	t.Parallel()
	const text = "fix typo in README"
	offline, err := newModelClassifier().Classify(context.Background(), text)
	require.NoError(t, err)
	tests := []struct {
		name    string
		status  int
		answer  string
		hang    bool
		outcome string
	}{
		{name: "provider error", status: http.StatusBadRequest, outcome: "error"},
		{name: "not JSON", status: http.StatusOK, answer: "I think the engineer should do it.", outcome: "bad_answer"},
		{name: "unknown target", status: http.StatusOK, outcome: "bad_answer",
			answer: `{"intent_type":"EXPLICIT","target":"janitor","confidence":0.9}`},
		{name: "unknown intent type", status: http.StatusOK, outcome: "bad_answer",
			answer: `{"intent_type":"URGENT","target":"architect","confidence":0.9}`},
		{name: "confidence out of range", status: http.StatusOK, outcome: "bad_answer",
			answer: `{"intent_type":"EXPLICIT","target":"architect","confidence":7}`},
		{name: "wrong knowledge intent", status: http.StatusOK, outcome: "bad_answer",
			answer: `{"intent_type":"EXPLORATORY","target":"librarian","knowledge_intent":"HISTORICAL","confidence":0.9}`},
		{name: "timeout", hang: true, outcome: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var url string
			timeout := 5 * time.Second
			if tt.hang {
				release := make(chan struct{})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-r.Context().Done():
					case <-release:
					}
				}))
				t.Cleanup(srv.Close)
				t.Cleanup(func() { close(release) })
				url, timeout = srv.URL+"/v1", 200*time.Millisecond
			} else {
				var srv chatServer
				url = srv.start(t, tt.status, func(string) string { return tt.answer })
			}
			c, _ := newLLMClassifier(t, url, timeout)
			got, err := c.Classify(as("acme", "alice"), text)
			require.NoError(t, err)
			require.Equal(t, offline.Target, got.Target, "the offline rules answer")
			require.Equal(t, offline.IntentType, got.IntentType)
			require.InDelta(t, offline.Confidence, got.Confidence, 1e-9)
			require.Equal(t, offline.Reason+" (offline rules: model "+tt.outcome+")", got.Reason)
			require.InDelta(t, 1, testutil.ToFloat64(c.outcomes.WithLabelValues(tt.outcome)), 0)
		})
	}
}

func TestParseLLMAnswer(t *testing.T) {
	t.Parallel()
	got, err := parseLLMAnswer(`{"intent_type":"trivial","target":"architect","subject":"readme","confidence":0.95}`)
	require.NoError(t, err)
	require.Equal(t, topology.AgentArchitect, got.Target, "a trivial change is planned too")
	require.Equal(t, gateTrivial, got.IntentType)
	got, err = parseLLMAnswer(`{"intent_type":"TRIVIAL","target":"engineer","subject":"readme","confidence":0.95,"candidates":["tester"]}`)
	require.NoError(t, err)
	require.Equal(t, topology.AgentArchitect, got.Target, "a worker role is the Architect's to plan")
	require.Equal(t, []string{topology.AgentArchitect}, got.Candidates)

	got, err = parseLLMAnswer(`{"intent_type":"AMBIGUOUS","target":"academic","confidence":0.4,"candidates":["academic","librarian","nobody"]}`)
	require.NoError(t, err)
	require.Empty(t, got.Target, "an ambiguous message is asked about")
	require.Equal(t, []string{"academic", "librarian"}, got.Candidates)

	got, err = parseLLMAnswer(`{"intent_type":"EXPLORATORY","target":"archivalist","knowledge_intent":"","subject":"cache rollout",
		"time_scope":"last_week","confidence":0.85}`)
	require.NoError(t, err)
	require.Equal(t, "GENERAL", got.KnowledgeIntent)
	require.Equal(t, "last_week", got.TimeScope)
	require.Equal(t, "cache_rollout", got.Subject)

	_, err = parseLLMAnswer(`{"intent_type":"EXPLORATORY","target":"archivalist","time_scope":"someday","confidence":0.85}`)
	require.ErrorIs(t, err, errBadAnswer)
	_, err = parseLLMAnswer(`{"intent_type":"EXPLICIT","target":"architect"}`)
	require.ErrorIs(t, err, errBadAnswer, "a missing confidence is not taken as 0")
}

// TestLLMClassifierRoutes drives SendMessage with the model-backed
// classifier: the model's decision routes the message, and with the model
// down the offline rules still do.
func TestLLMClassifierRoutes(t *testing.T) {
	t.Parallel()
	var srv chatServer
	url := srv.start(t, http.StatusOK, func(user string) string {
		if strings.Contains(user, "caching layer") {
			return `{"intent_type":"EXPLORATORY","target":"academic","subject":"caching_layer","confidence":0.88,"reason":"external knowledge"}`
		}
		return `{"intent_type":"AMBIGUOUS","target":"","confidence":0.3,"candidates":["librarian","academic"]}`
	})
	f := newFixture(t)
	c, _ := newLLMClassifier(t, url, 5*time.Second)
	f.svc.SetClassifier(c)
	ctx := as("acme", "alice")
	sess := f.createSession(t, ctx, "llm")
	academic := inboxReader(t, f.bus, "academic")

	resp := f.send(t, ctx, sess, "what should a caching layer for this look like?")
	require.Equal(t, "academic", resp.GetRoute().GetTarget())
	require.Equal(t, tierClassifier, resp.GetRoute().GetTier())
	env := nextEnvelope(t, academic)
	require.Equal(t, "caching_layer", env.GetStructuredIntent().GetSubject())
	require.Equal(t, gateExploratory, env.GetStructuredIntent().GetIntentType())

	resp = f.send(t, ctx, sess, "hmm, thoughts?")
	require.Empty(t, resp.GetRoute().GetTarget(), "a low-confidence model answer asks the user")
	clar, err := f.svc.ListClarifications(ctx, &guidev1.ListClarificationsRequest{Parent: sess.GetName()})
	require.NoError(t, err)
	require.Len(t, clar.GetClarifications(), 1)
	require.Contains(t, clar.GetClarifications()[0].GetOptions(), "librarian")
}

// TestSetLLMGate: the mesh hands every service its gate; the Guide takes
// the model classifier only when a real provider is configured.
func TestSetLLMGate(t *testing.T) {
	t.Parallel()
	newGate := func(cfg llm.Config) *gate.Gate {
		reg, err := provider.New(cfg)
		require.NoError(t, err)
		g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t)})
		require.NoError(t, err)
		t.Cleanup(g.Close)
		return g
	}
	f := newFixture(t)
	f.svc.cfg.LLMClassifier = true
	f.svc.SetLLMGate(newGate(llm.Config{MaxTokens: 64}))
	require.IsType(t, &ModelClassifier{}, f.svc.classifier, "only the offline local provider: the rules classify")

	var srv chatServer
	url := srv.start(t, http.StatusOK, func(string) string { return `{}` })
	f.svc.SetLLMGate(newGate(llm.Config{Provider: llm.OpenAI, MaxTokens: 64, OpenAI: llm.ProviderConfig{BaseURL: url}}))
	require.IsType(t, &LLMClassifier{}, f.svc.classifier)

	off := newFixture(t)
	off.svc.SetLLMGate(newGate(llm.Config{Provider: llm.OpenAI, MaxTokens: 64, OpenAI: llm.ProviderConfig{BaseURL: url}}))
	require.IsType(t, &ModelClassifier{}, off.svc.classifier, "-guide.llm-classifier=false")
}

// usageRecords keeps the usage records a gate stores.
type usageRecords struct {
	mu   sync.Mutex
	recs []llm.UsageRecord
}

func (u *usageRecords) Record(_ context.Context, r llm.UsageRecord) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.recs = append(u.recs, r)
	return nil
}

// The classifier's model call is recorded for the user whose message it
// classifies, so that it is in that member's usage report.
func TestLLMClassifierUsageCarriesTheUser(t *testing.T) {
	t.Parallel()
	var srv chatServer
	url := srv.start(t, http.StatusOK, func(string) string {
		return `{"intent_type":"EXPLORATORY","target":"librarian","confidence":0.9,"reason":"where code lives"}`
	})
	reg, err := provider.New(llm.Config{Provider: llm.OpenAI, MaxTokens: 512,
		OpenAI: llm.ProviderConfig{BaseURL: url, APIKey: "test-key", Fast: "router-small"}})
	require.NoError(t, err)
	var usage usageRecords
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: reg, Redis: testenv.Redis(t), Usage: &usage})
	require.NoError(t, err)
	c := NewLLMClassifier(g, LLMClassifierConfig{Timeout: 5 * time.Second}, logx.Discard(), prometheus.NewRegistry())
	_, err = c.Classify(as("acme", "alice"), "where is the retry policy?")
	require.NoError(t, err)
	g.Close() // stores the queued records

	usage.mu.Lock()
	defer usage.mu.Unlock()
	require.Len(t, usage.recs, 1)
	require.Equal(t, "acme", usage.recs[0].TenantID)
	require.Equal(t, "alice", usage.recs[0].UserID)
}

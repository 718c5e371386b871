package gate_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/testenv"
)

// Planted keys, built at run time so the repository holds none.
var (
	awsID   = "AKIA" + "Q7ZP2LK3XW4RT6VN"
	awsKey  = "wJ8rXk2N" + "q9Vt4LpZ7yHb3MfC6sRd1GeA0uTj5WnE"
	ghToken = "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
)

// recorder is a provider endpoint that keeps every request body.
type recorder struct {
	mu     sync.Mutex
	bodies []string
}

func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, string(b))
	r.mu.Unlock()
	ok(w, "fine")
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.bodies, "\n")
}

func secretsGate(t *testing.T, policy string) (*gate.Gate, *recorder, *prometheus.Registry) {
	t.Helper()
	rec := &recorder{}
	hs := fake.Server(t, rec.serve)
	reg, err := llm.NewRegistry(llm.OpenAI, openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client()}))
	require.NoError(t, err)
	cfg := gate.DefaultConfig()
	cfg.Secrets = policy
	metrics := prometheus.NewRegistry()
	g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: testenv.Redis(t), Registerer: metrics})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g, rec, metrics
}

func plantedRequest() *llm.Request {
	return &llm.Request{
		System: "You deploy with the key " + awsID + ".",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "aws_secret_access_key = " + awsKey + "\nplease check it"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read", Arguments: `{"token":"` + ghToken + `"}`}}},
			{Role: llm.RoleTool, ToolCallID: "c1", Content: "ok"},
		},
		Attribution: llm.Attribution{TenantID: "t1", AgentType: "engineer"},
	}
}

func TestPromptSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	g, rec, metrics := secretsGate(t, gate.SecretsRedact)
	in := plantedRequest()
	_, err := g.Complete(t.Context(), in)
	require.NoError(t, err)
	sent := rec.all()
	for _, s := range []string{awsID, awsKey, ghToken} {
		require.NotContains(t, sent, s)
	}
	require.Contains(t, sent, "[REDACTED:aws-access-token]")
	require.Contains(t, sent, "[REDACTED:github-fine-grained-pat]")
	require.Contains(t, sent, "please check it", "the rest of the prompt is sent")
	require.Contains(t, in.Messages[0].Content, awsKey, "the caller's request is left as it was")
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, metrics, "redacted", "aws-access-token")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, metrics, "redacted", "github-fine-grained-pat")), 0)
}

func TestPromptSecretsAreRejected(t *testing.T) {
	t.Parallel()
	g, rec, metrics := secretsGate(t, gate.SecretsReject)
	_, err := g.Complete(t.Context(), plantedRequest())
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	st, _ := status.FromError(err)
	require.NotContains(t, st.Message(), awsID)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	require.NotNil(t, info)
	require.Equal(t, gate.ReasonPromptSecret, info.GetReason())
	require.Contains(t, info.GetMetadata()["rules"], "aws-access-token")
	require.Empty(t, rec.all(), "nothing reached the provider")
	require.InDelta(t, 1, testutil.ToFloat64(counter(t, metrics, "rejected", "github-fine-grained-pat")), 0)

	_, err = g.Complete(t.Context(), req("no secrets here", "engineer", false))
	require.NoError(t, err, "a clean prompt passes")
}

// counter finds sylk_llm_secrets_total{action,rule} in reg.
func counter(t *testing.T, reg *prometheus.Registry, action, rule string) prometheus.Counter {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sylk_llm_secrets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["action"] == action && labels["rule"] == rule {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no sylk_llm_secrets_total{action=%q,rule=%q}", action, rule)
	return nil
}

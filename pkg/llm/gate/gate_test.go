package gate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/internal/fake"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/llm/ratelimit"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
)

// server is an OpenAI-format fake whose behaviour each test scripts by the
// user message's text.
type server struct {
	mu       sync.Mutex
	arrivals []string
	handle   func(w http.ResponseWriter, r *http.Request, text string, n int)
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	body := string(b)
	i := strings.Index(body, `"content":"`)
	text := body[i+len(`"content":"`):]
	text = text[:strings.Index(text, `"`)]
	s.mu.Lock()
	s.arrivals = append(s.arrivals, text)
	n := 0
	for _, a := range s.arrivals {
		if a == text {
			n++
		}
	}
	s.mu.Unlock()
	s.handle(w, r, text, n)
}

func (s *server) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.arrivals...)
}

func ok(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"done %s"}}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`, text)
}

func newGate(t *testing.T, rdb *redisx.Client, sig signal.Publisher, srv *server, cfg gate.Config, rec gate.Recorder) *gate.Gate {
	t.Helper()
	var ps []llm.Provider
	ps = append(ps, local.New())
	def := llm.Local
	if srv != nil {
		hs := fake.Server(t, srv.serve)
		ps = append(ps, openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: hs.URL + "/v1", HTTPClient: hs.Client()}))
		def = llm.OpenAI
	}
	reg, err := llm.NewRegistry(def, ps...)
	require.NoError(t, err)
	g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: rdb, Signals: sig, Usage: rec, MaxTokens: 64,
		Retry: llm.RetryPolicies{
			llm.TierTransient: {MaxRetries: 2, Initial: time.Millisecond, Multiplier: 2},
			llm.TierDegrading: {MaxRetries: 2, Initial: time.Millisecond, Multiplier: 2},
			llm.TierRateLimit: {MaxRetries: 3, Initial: time.Millisecond, Multiplier: 2, UseRetryAfter: true},
		}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g
}

func req(text, agent string, user bool) *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}},
		Attribution: llm.Attribution{TenantID: "t1", SessionID: "s1", AgentType: agent, UserInvoked: user}}
}

func TestUserQueueFirstThenPriority(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		if text == "hold" {
			<-release
		}
		ok(w, text)
	}}
	cfg := gate.DefaultConfig()
	cfg.PipelineSlots = 1
	cfg.UserPreemption = false
	g := newGate(t, testenv.Redis(t), nil, srv, cfg, nil)
	ctx := t.Context()

	var wg sync.WaitGroup
	call := func(text, agent string, user bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.Complete(ctx, req(text, agent, user))
			require.NoError(t, err)
		}()
	}
	call("hold", "engineer", false)
	require.Eventually(t, func() bool { return len(srv.order()) == 1 }, 5*time.Second, time.Millisecond)
	call("tester", "tester", false)       // 40
	call("architect", "architect", false) // 80
	call("engineer", "engineer", false)   // 60
	// Wait until the three are queued behind the slot.
	require.Eventually(t, func() bool {
		return testutilQueued(g) == 3
	}, 5*time.Second, time.Millisecond)
	_, err := g.Complete(ctx, req("user", "guide", true))
	require.NoError(t, err, "a user request runs without waiting for the pipeline slot")
	close(release)
	wg.Wait()
	require.Equal(t, []string{"hold", "user", "architect", "engineer", "tester"}, srv.order())
}

func testutilQueued(g *gate.Gate) int { return g.Queued() }

func TestUserPreemptsLowestPipelineCall(t *testing.T) {
	t.Parallel()
	releaseB := make(chan struct{})
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		switch {
		case text == "A" && n == 1:
			<-r.Context().Done() // runs until preempted
			return
		case text == "B":
			select {
			case <-releaseB:
			case <-r.Context().Done():
				return
			}
		}
		ok(w, text)
	}}
	cfg := gate.DefaultConfig()
	cfg.PipelineSlots = 2
	rdb := testenv.Redis(t)
	bus := testenv.NATS(t)
	sig := signal.NewNATS(bus)
	var preempted atomic.Int32
	sub, err := sig.Subscribe(func(s *llmv1.Signal) { preempted.Add(1) }, llmv1.SignalType_SIGNAL_TYPE_REQUEST_PREEMPTED)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	rec := &records{}
	g := newGate(t, rdb, sig, srv, cfg, rec)
	ctx := t.Context()

	results := make(chan string, 2)
	for _, x := range []struct{ text, agent string }{{"A", "tester"}, {"B", "engineer"}} {
		go func() {
			r, err := g.Complete(ctx, req(x.text, x.agent, false))
			if err != nil {
				results <- "error: " + err.Error()
				return
			}
			results <- r.Content
		}()
	}
	require.Eventually(t, func() bool { return len(srv.order()) == 2 }, 5*time.Second, time.Millisecond)
	r, err := g.Complete(ctx, req("U", "guide", true))
	require.NoError(t, err)
	require.Equal(t, "done U", r.Content)
	require.Equal(t, "done A", <-results, "the preempted 40 is re-queued and completes")
	close(releaseB)
	require.Equal(t, "done B", <-results, "the 60 is untouched")
	require.Equal(t, 1, count(srv.order(), "B"), "B ran once")
	require.Equal(t, 2, count(srv.order(), "A"), "A ran twice")
	require.Eventually(t, func() bool { return preempted.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	g.Close()
	require.Equal(t, []string{"preempted", "ok", "ok", "ok"}, rec.outcomesSorted())
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

type records struct {
	mu  sync.Mutex
	got []llm.UsageRecord
}

func (r *records) Record(_ context.Context, u llm.UsageRecord) error {
	r.mu.Lock()
	r.got = append(r.got, u)
	r.mu.Unlock()
	return nil
}

func (r *records) outcomesSorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.got {
		if u.Outcome != "ok" {
			out = append([]string{u.Outcome}, out...)
		} else {
			out = append(out, u.Outcome)
		}
	}
	return out
}

// A 429 seen by one replica pauses both; PauseAll goes out once.
func TestRateLimitSharedByTwoGates(t *testing.T) {
	t.Parallel()
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		if text == "first" && n == 1 {
			fake.JSONError(w, 429, "1", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		ok(w, text)
	}}
	rdb := testenv.Redis(t)
	sig := signal.NewNATS(testenv.NATS(t))
	var pauses, resumes atomic.Int32
	sub, err := sig.Subscribe(func(s *llmv1.Signal) {
		switch s.GetType() {
		case llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL:
			pauses.Add(1)
		case llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL:
			resumes.Add(1)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	g1 := newGate(t, rdb, sig, srv, gate.DefaultConfig(), nil)
	g2 := newGate(t, rdb, sig, srv, gate.DefaultConfig(), nil)
	ctx := t.Context()

	// g2 has called the provider: its local view trusts it, so its calls
	// skip Redis until the PauseAll from g1 reaches it.
	_, err = g2.Complete(ctx, req("warm", "engineer", false))
	require.NoError(t, err)
	require.True(t, g2.FastPath(llm.OpenAI))

	done := make(chan error, 1)
	go func() {
		_, err := g1.Complete(ctx, req("first", "engineer", false))
		done <- err
	}()
	require.Eventually(t, func() bool { return len(srv.order()) == 2 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		ok, _, err := g2.Limiter().CanProceed(ctx, llm.OpenAI)
		return err == nil && !ok
	}, 5*time.Second, time.Millisecond, "the other replica is paused too")
	require.Eventually(t, func() bool { return !g2.FastPath(llm.OpenAI) }, 5*time.Second, time.Millisecond,
		"the PauseAll signal stops the other replica's fast path")

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = g2.Complete(short, req("second", "engineer", true))
	require.ErrorIs(t, err, context.DeadlineExceeded, "even a user request waits out the shared backoff")
	require.Equal(t, []string{"warm", "first"}, srv.order(), "nothing reached the provider during the backoff")

	require.NoError(t, <-done, "the rate-limited call is retried after the backoff")
	_, err = g2.Complete(ctx, req("second", "engineer", false))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pauses.Load() == 1 && resumes.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
}

// PauseAll and ResumeAll from one replica are acknowledged by both (B-20).
func TestPauseAndResumeAckedByBothReplicas(t *testing.T) {
	t.Parallel()
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		if text == "first" && n == 1 {
			fake.JSONError(w, 429, "", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		ok(w, text)
	}}
	rdb := testenv.Redis(t)
	sig := signal.NewNATS(testenv.NATS(t))
	type acked struct {
		s   *llmv1.Signal
		res signal.AckResult
		err error
	}
	got := make(chan acked, 4)
	cfg := gate.DefaultConfig()
	cfg.BackoffBase = 50 * time.Millisecond
	mk := func(id string) *gate.Gate {
		reg, err := llm.NewRegistry(llm.OpenAI, openai.New(llm.ProviderOptions{APIKey: "k", BaseURL: fake.Server(t, srv.serve).URL + "/v1"}))
		require.NoError(t, err)
		g, err := gate.New(cfg, gate.Deps{Providers: reg, Redis: rdb, Signals: sig, ReplicaID: id,
			OnAcks: func(s *llmv1.Signal, res signal.AckResult, err error) { got <- acked{s, res, err} }})
		require.NoError(t, err)
		t.Cleanup(g.Close)
		return g
	}
	g1, g2 := mk("replica-1"), mk("replica-2")
	require.Equal(t, "replica-2", g2.ReplicaID())
	live, err := g1.Replicas(t.Context())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"replica-1", "replica-2"}, live)

	_, err = g1.Complete(t.Context(), req("first", "engineer", false))
	require.NoError(t, err, "retried after the backoff")
	for _, want := range []llmv1.SignalType{llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL, llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL} {
		select {
		case a := <-got:
			require.Equal(t, want, a.s.GetType())
			require.NoError(t, a.err)
			require.Empty(t, a.res.Missing)
			var ids []string
			for _, ack := range a.res.Acks {
				ids = append(ids, ack.GetSubscriberId())
				wantState := llmv1.SignalAckState_SIGNAL_ACK_STATE_PAUSED
				if want == llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL {
					wantState = llmv1.SignalAckState_SIGNAL_ACK_STATE_RESUMED
				}
				require.Equal(t, wantState, ack.GetState())
			}
			require.ElementsMatch(t, []string{"replica-1", "replica-2"}, ids)
		case <-time.After(10 * time.Second):
			t.Fatalf("no acks for %s", want)
		}
	}
}

// The soft-limit counters live in Redis: two replicas sharing them warn
// once per level per period (B-15, C-11), and never pause.
func TestSoftLimitWarnsOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	sig := signal.NewNATS(testenv.NATS(t))
	var warnings atomic.Int32
	var level atomic.Int32
	sub, err := sig.Subscribe(func(s *llmv1.Signal) {
		warnings.Add(1)
		level.Store(int32(s.GetLevel()))
	}, llmv1.SignalType_SIGNAL_TYPE_QUOTA_WARNING)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	cfg := gate.DefaultConfig()
	cfg.SoftRequests, cfg.SoftPeriod, cfg.WarnAt = 10, time.Hour, 0.8
	gates := []*gate.Gate{newGate(t, rdb, sig, nil, cfg, nil), newGate(t, rdb, sig, nil, cfg, nil)}
	for i := range 9 {
		_, err := gates[i%2].Complete(t.Context(), req("classify this", "librarian", false))
		require.NoError(t, err)
	}
	for _, g := range gates {
		g.Close() // writes the batched counters
	}
	st, err := gates[0].Limiter().State(t.Context(), llm.Local)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Warning, st.State, "9 of 10 requests: over the 80% mark")
	require.Eventually(t, func() bool { return warnings.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, level.Load())
	g3 := newGate(t, rdb, sig, nil, cfg, nil)
	_, err = g3.Complete(t.Context(), req("classify this", "librarian", false))
	require.NoError(t, err, "a soft limit never pauses")
	g3.Close()
	require.Eventually(t, func() bool { return warnings.Load() == 2 && level.Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"the tenth request reaches the critical level: one more warning")
}

// Two gates on one Redis under concurrent load never exceed a budget.
func TestBudgetNeverExceededByTwoGates(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	const limit = 20_000
	cfg := gate.DefaultConfig()
	cfg.TenantTokens = limit
	cfg.PipelineSlots = 8
	recs := &records{}
	gates := []*gate.Gate{newGate(t, rdb, nil, nil, cfg, recs), newGate(t, rdb, nil, nil, cfg, recs)}
	ctx := t.Context()
	var used, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gates[w%2]
			for i := range 25 {
				r := req(strings.Repeat("word ", 20+(w*i)%40)+"classify this", "librarian", w%4 == 0)
				r.SessionID = fmt.Sprintf("s%d", w)
				resp, err := g.Complete(ctx, r)
				if err != nil {
					require.ErrorIs(t, err, budget.ErrTenantBudgetExceeded)
					refused.Add(1)
					continue
				}
				used.Add(int64(resp.Usage.Total()))
			}
		}()
	}
	wg.Wait()
	require.Positive(t, refused.Load(), "the load exceeds the budget")
	require.LessOrEqual(t, used.Load(), int64(limit))
	for _, g := range gates {
		g.Close() // settles run after the calls return
	}
	u, err := gates[1].Budgets().Used(ctx, budget.Scope{Tenant: "t1"})
	require.NoError(t, err)
	require.Equal(t, used.Load(), u[1], "settled to actual usage, reservations released")
}

func TestBreakerOpensOnDegradingProvider(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		calls.Add(1)
		fake.JSONError(w, 502, "", `{"error":{"message":"bad gateway","type":"server_error"}}`)
	}}
	g := newGate(t, testenv.Redis(t), nil, srv, gate.DefaultConfig(), nil)
	ctx := t.Context()
	_, err := g.Complete(ctx, req("x", "engineer", false))
	require.Equal(t, 502, llm.StatusOf(err))
	require.EqualValues(t, 3, calls.Load(), "max counts retries after the first attempt")
	_, err = g.Complete(ctx, req("y", "engineer", false))
	require.Error(t, err)
	require.EqualValues(t, 5, calls.Load(), "the fifth consecutive failure opens the breaker")
	_, err = g.Complete(ctx, req("z", "engineer", false))
	require.ErrorIs(t, err, gate.ErrCircuitOpen)
	require.Equal(t, "MODEL_PROVIDER_UNAVAILABLE", apierr.Reason(err), "a client sees it as Unavailable")
	require.EqualValues(t, 5, calls.Load(), "an open breaker fails fast")
}

// A breaker opened by one replica stops the other's fast path (the
// CircuitStateChange signal, else the next state read): its calls fail fast.
func TestBreakerOpenedByOneReplicaStopsTheOther(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := &server{handle: func(w http.ResponseWriter, r *http.Request, text string, n int) {
		calls.Add(1)
		if text == "bad" {
			fake.JSONError(w, 502, "", `{"error":{"message":"bad gateway","type":"server_error"}}`)
			return
		}
		ok(w, text)
	}}
	rdb := testenv.Redis(t)
	sig := signal.NewNATS(testenv.NATS(t))
	g1 := newGate(t, rdb, sig, srv, gate.DefaultConfig(), nil)
	g2 := newGate(t, rdb, sig, srv, gate.DefaultConfig(), nil)
	ctx := t.Context()
	_, err := g2.Complete(ctx, req("good", "engineer", false))
	require.NoError(t, err)
	require.True(t, g2.FastPath(llm.OpenAI))
	// Failures on g1 until its breaker is open (how many calls that takes
	// depends on how many retries fit in each call's time, which a loaded
	// machine changes): what is tested is that g2 learns of it.
	for i := 0; !errors.Is(err, gate.ErrCircuitOpen); i++ {
		require.Less(t, i, 10, "g1's breaker never opened")
		_, err = g1.Complete(ctx, req("bad", "engineer", false))
		require.Error(t, err)
	}
	require.Eventually(t, func() bool { return !g2.FastPath(llm.OpenAI) }, 5*time.Second, time.Millisecond)
	before := calls.Load()
	_, err = g2.Complete(ctx, req("good", "engineer", false))
	require.ErrorIs(t, err, gate.ErrCircuitOpen)
	require.Equal(t, before, calls.Load(), "nothing reached the provider")
}

func TestStreamThroughGate(t *testing.T) {
	t.Parallel()
	rec := &records{}
	reg := prometheus.NewRegistry()
	providers, err := llm.NewRegistry(llm.Local, local.New())
	require.NoError(t, err)
	g, err := gate.New(gate.DefaultConfig(), gate.Deps{Providers: providers, Redis: testenv.Redis(t), Usage: rec, Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	r := req("write a function", "engineer", false)
	r.TaskID = "task-1"
	r.MaxTokens = 10
	acc := llm.NewAccumulator(llm.Local, local.Model)
	require.NoError(t, g.Stream(t.Context(), r, acc.Handler(nil)))
	require.Equal(t, local.NoCodeNotice[:40], acc.Response().Content, "cut to max tokens")
	g.Close()
	require.Len(t, rec.got, 1)
	u := rec.got[0]
	require.Equal(t, "ok", u.Outcome)
	require.Equal(t, "task-1", u.TaskID)
	require.Equal(t, llm.Local, u.Provider)
	require.Equal(t, acc.Response().Usage.OutputTokens, u.OutputTokens)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sylk_llm_requests_total Model calls through the gate, by provider and outcome (ok, error, refused).
# TYPE sylk_llm_requests_total counter
sylk_llm_requests_total{outcome="ok",provider="local"} 1
`), "sylk_llm_requests_total"))
}

func TestUnknownProviderAndCancel(t *testing.T) {
	t.Parallel()
	g := newGate(t, testenv.Redis(t), nil, nil, gate.DefaultConfig(), nil)
	r := req("x", "", false)
	r.Provider = "nope"
	_, err := g.Complete(t.Context(), r)
	require.ErrorIs(t, err, llm.ErrUnknownProvider)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = g.Complete(ctx, req("x", "", false))
	require.True(t, errors.Is(err, context.Canceled))
}

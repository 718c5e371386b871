// Package gate is the one way agents call language models (B-01): a priority
// queue with a user queue that is drained first and never rejects (B-13,
// B-26, C-14), user preemption of the lowest-priority pipeline call, token
// budgets reserved atomically in Redis (B-16), the shared adaptive rate
// limiter (B-14), per-provider circuit breakers shared through Redis (B-36),
// retries by error tier (B-40), and an attributed usage record per call
// (B-17).
//
// The queues are per replica; everything that must hold across replicas
// (backoff, budgets, breakers, soft limits) lives in Redis, and the signals
// (PauseAll, ResumeAll, QuotaWarning, RequestPreempted) go out over NATS.
package gate

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/breaker"
	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/llm/fanout"
	"sylk.dev/sylk/pkg/llm/ratelimit"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
)

// Errors.
var (
	// ErrPreempted is the cancellation cause of a pipeline call preempted by
	// a user request; the gate re-queues the call, callers never see it.
	ErrPreempted = errors.New("llm gate: preempted by a user request")
	// ErrCircuitOpen is returned while a provider's breaker is open: an
	// apierr Unavailable (MODEL_PROVIDER_UNAVAILABLE) naming the provider,
	// which a client sees as it is. It wraps breaker.ErrOpen.
	ErrCircuitOpen = apierr.Unavailable("MODEL_PROVIDER_UNAVAILABLE", "llm gate: %v", breaker.ErrOpen).Wrap(breaker.ErrOpen)
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("llm gate: closed")
)

// Recorder stores usage records (pkg/llm/usage.Store implements it).
type Recorder interface {
	Record(ctx context.Context, r llm.UsageRecord) error
}

// TenantProviders resolves per-tenant provider clients (creds.Providers).
type TenantProviders interface {
	Get(ctx context.Context, tenant, provider string) (llm.Provider, bool, error)
}

// Deps are what the gate is built from.
type Deps struct {
	Providers *llm.Registry
	Redis     *redisx.Client
	// Signals publishes the control signals; nil drops them.
	Signals signal.Publisher
	// Usage stores usage records; nil keeps none.
	Usage      Recorder
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// MaxTokens is the answer limit applied when a request sets none.
	MaxTokens int
	// Classifier and Retry default to the seed's (B-32, B-40).
	Classifier *llm.Classifier
	Retry      llm.RetryPolicies
	// Tenants, when set, gives a tenant's own provider client (a key stored
	// through the credentials API), used instead of the configured one.
	Tenants TenantProviders
	// StreamBus, when set, publishes every streamed chunk on NATS and lets a
	// StreamControl cancel stop a generation (pkg/llm/fanout).
	StreamBus *natsx.Bus
	// Fitter, when set, fits every request into its model's context window
	// (B-18) and, when a provider still rejects a prompt as too long, fits it
	// once more into 85% of the window and retries (P-07).
	Fitter *llm.Fitter
	// Breaker gives each provider's breaker settings; default breaker.LLM.
	Breaker func(provider string) breaker.Settings
	// Clock is for tests; default time.Now.
	Clock func() time.Time
	// ReplicaID names this gate among the replicas that acknowledge
	// PauseAll and ResumeAll (B-20); default a random id.
	ReplicaID string
	// OnAcks, when set, is told who acknowledged each PauseAll and ResumeAll
	// this replica sent (err wraps signal.ErrAckTimeout when some live
	// replica did not); missing acks are also logged.
	OnAcks func(s *llmv1.Signal, res signal.AckResult, err error)
}

type metrics struct {
	requests   *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	cost       *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	wait       *prometheus.HistogramVec
	preempted  prometheus.Counter
	admissions *prometheus.CounterVec
	retries    *prometheus.CounterVec
	secrets    *prometheus.CounterVec
	queueDepth prometheus.GaugeFunc
	active     prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, g *Gate) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: "sylk_llm_requests_total", Help: "Model calls through the gate, by provider and outcome (ok, error, refused)."}, []string{"provider", "outcome"}),
		tokens:   f.NewCounterVec(prometheus.CounterOpts{Name: "sylk_llm_tokens_total", Help: "Tokens used, by provider and direction (input, output)."}, []string{"provider", "direction"}),
		cost:     f.NewCounterVec(prometheus.CounterOpts{Name: "sylk_llm_cost_usd_total", Help: "Cost in USD from the model catalogue, by provider."}, []string{"provider"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "sylk_llm_request_duration_seconds", Help: "Provider call time, by provider.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"provider"}),
		wait: f.NewHistogramVec(prometheus.HistogramOpts{Name: "sylk_llm_gate_wait_seconds", Help: "Time from submission to the provider call, by class (user, pipeline).",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5, 1, 5, 30, 300}}, []string{"class"}),
		preempted:  f.NewCounter(prometheus.CounterOpts{Name: "sylk_llm_preemptions_total", Help: "Pipeline calls preempted by user requests."}),
		admissions: f.NewCounterVec(prometheus.CounterOpts{Name: "sylk_llm_gate_admissions_total", Help: "Admission checks, by path: local (the local view and budget leases) or redis (the shared limiter and breaker read in Redis)."}, []string{"path"}),
		retries:    f.NewCounterVec(prometheus.CounterOpts{Name: "sylk_llm_retries_total", Help: "Retried calls, by error tier."}, []string{"tier"}),
		secrets: f.NewCounterVec(prometheus.CounterOpts{Name: "sylk_llm_secrets_total",
			Help: "Secrets found in prompts and embedding inputs at the gate, by action (redacted, rejected) and detector rule."}, []string{"action", "rule"}),
		queueDepth: f.NewGaugeFunc(prometheus.GaugeOpts{Name: "sylk_llm_gate_queued_requests", Help: "Pipeline calls waiting for a slot."}, func() float64 {
			g.mu.Lock()
			defer g.mu.Unlock()
			return float64(len(g.queue))
		}),
		active: f.NewGaugeFunc(prometheus.GaugeOpts{Name: "sylk_llm_gate_active_pipeline_requests", Help: "Pipeline calls holding a slot."}, func() float64 {
			g.mu.Lock()
			defer g.mu.Unlock()
			return float64(len(g.active))
		}),
	}
}

// Gate admits, limits and records model calls.
type Gate struct {
	cfg        Config
	providers  *llm.Registry
	limiter    *ratelimit.Limiter
	budgets    *budget.Budgets
	breakers   *breaker.Registry
	sig        signal.Publisher
	log        *slog.Logger
	m          *metrics
	classifier *llm.Classifier
	retry      llm.RetryPolicies
	maxTokens  int
	now        func() time.Time
	tenants    TenantProviders
	fitter     *llm.Fitter
	streamBus  *natsx.Bus
	rdb        *redisx.Client
	leases     *budget.Leases
	view       *view
	unsub      func()
	rawSig     signal.Publisher
	replicaID  string
	onAcks     func(*llmv1.Signal, signal.AckResult, error)
	syncStop   chan struct{}
	syncWG     sync.WaitGroup

	mu          sync.Mutex
	queue       tickets
	active      map[*ticket]struct{}
	userPending int
	seq         uint64

	usage    Recorder
	usageMu  sync.RWMutex
	usageCh  chan llm.UsageRecord
	closed   bool
	writerWG sync.WaitGroup
	// bg tracks post-call bookkeeping goroutines.
	bg sync.WaitGroup
}

// New builds a gate; Close stops its usage writer.
func New(cfg Config, d Deps) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Providers == nil || d.Redis == nil {
		return nil, errors.New("llm gate: providers and Redis are required")
	}
	g := &Gate{
		cfg: cfg, providers: d.Providers, sig: d.Signals, usage: d.Usage, log: d.Log,
		classifier: d.Classifier, retry: d.Retry, maxTokens: d.MaxTokens, now: d.Clock, tenants: d.Tenants, fitter: d.Fitter, streamBus: d.StreamBus,
		active: map[*ticket]struct{}{},
	}
	if g.sig == nil {
		g.sig = signal.Discard{}
	}
	g.replicaID = d.ReplicaID
	if g.replicaID == "" {
		g.replicaID = uuid.NewString()
	}
	g.rawSig, g.onAcks = g.sig, d.OnAcks
	if b, ok := g.sig.(broadcaster); ok {
		g.sig = acking{g: g, b: b}
	}
	if g.log == nil {
		g.log = logx.Discard()
	}
	g.log = g.log.With(logx.KeyComponent, "llm-gate")
	if g.classifier == nil {
		g.classifier = llm.DefaultClassifier()
	}
	if g.retry == nil {
		g.retry = llm.DefaultRetryPolicies()
	}
	if g.maxTokens <= 0 {
		g.maxTokens = 4096
	}
	if g.now == nil {
		g.now = time.Now
	}
	reg := d.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	g.m = newMetrics(reg, g)
	g.rdb = d.Redis
	g.limiter = ratelimit.New(d.Redis, cfg.rateSettings(), g.sig, ratelimit.WithClock(g.now))
	g.budgets = budget.New(d.Redis, cfg.limits())
	g.leases = budget.NewLeases(g.budgets, cfg.LeaseTokens, cfg.LeaseIdle, func(err error) { g.log.Warn("budget lease", logx.Err(err)) })
	g.view = newView(cfg.StateRefresh)
	bs := d.Breaker
	if bs == nil {
		bs = func(string) breaker.Settings { return breaker.LLM }
	}
	g.breakers = breaker.New(d.Redis, func(res string) breaker.Settings { return bs(res) }, breaker.WithClock(g.now),
		breaker.WithOnChange(func(ctx context.Context, c breaker.Change) {
			g.publish(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_CIRCUIT_STATE_CHANGE, Provider: c.Resource,
				Reason: c.From.String() + " -> " + c.To.String()})
		}))
	lctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.load(lctx); err != nil {
		return nil, fmt.Errorf("llm gate: load Redis scripts: %w", err)
	}
	g.register(lctx)
	if err := g.subscribe(); err != nil {
		return nil, fmt.Errorf("llm gate: subscribe to signals: %w", err)
	}
	if g.usage != nil {
		g.usageCh = make(chan llm.UsageRecord, cfg.UsageBuffer)
		g.writerWG.Add(1)
		go g.writeUsage()
	}
	g.syncStop = make(chan struct{})
	g.syncWG.Add(1)
	go g.syncLoop(g.syncStop)
	return g, nil
}

// Limiter exposes the shared rate limiter (state reports, tests).
func (g *Gate) Limiter() *ratelimit.Limiter { return g.limiter }

// Budgets exposes the budgets (reports, tests).
func (g *Gate) Budgets() *budget.Budgets { return g.budgets }

// Leases exposes the budget leases the gate reserves from (reports,
// benchmarks).
func (g *Gate) Leases() *budget.Leases { return g.leases }

// Breakers exposes the breakers (manual reset).
func (g *Gate) Breakers() *breaker.Registry { return g.breakers }

// Providers returns the provider registry.
func (g *Gate) Providers() *llm.Registry { return g.providers }

// Close waits for post-call bookkeeping, writes the batched counters,
// returns unused budget leases, then stops the usage writer after it has
// stored what is buffered. Calls must have returned before Close; a second
// Close does nothing.
func (g *Gate) Close() {
	g.bg.Wait()
	g.usageMu.Lock()
	first := !g.closed
	if first {
		g.closed = true
		if g.usageCh != nil {
			close(g.usageCh)
		}
	}
	g.usageMu.Unlock()
	if first {
		close(g.syncStop)
		g.syncWG.Wait()
		if g.unsub != nil {
			g.unsub()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		g.sync(ctx, "", true)
		cancel()
	}
	g.writerWG.Wait()
}

// BatchRecorder stores many usage records in one round trip
// (pkg/llm/usage.Store implements it); the writer uses it when the
// Recorder has it.
type BatchRecorder interface {
	RecordBatch(ctx context.Context, rs []llm.UsageRecord) error
}

// maxUsageBatch bounds one batched write of usage records.
const maxUsageBatch = 500

func (g *Gate) writeUsage() {
	defer g.writerWG.Done()
	br, batched := g.usage.(BatchRecorder)
	buf := make([]llm.UsageRecord, 0, maxUsageBatch)
	for r := range g.usageCh {
		if !batched {
			g.storeUsage(r)
			continue
		}
		buf = append(buf[:0], r)
	drain:
		for len(buf) < maxUsageBatch {
			select {
			case r, ok := <-g.usageCh:
				if !ok {
					break drain
				}
				buf = append(buf, r)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := br.RecordBatch(ctx, buf); err != nil {
			g.log.Error("store usage records", logx.Err(err), slog.Int("records", len(buf)))
		}
		cancel()
	}
}

func (g *Gate) storeUsage(r llm.UsageRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.usage.Record(ctx, r); err != nil {
		g.log.Error("store usage record", logx.Err(err), slog.String("provider", r.Provider))
	}
}

func (g *Gate) record(r llm.UsageRecord) {
	if g.usage == nil {
		return
	}
	g.usageMu.RLock()
	defer g.usageMu.RUnlock()
	if g.closed {
		g.storeUsage(r)
		return
	}
	select {
	case g.usageCh <- r:
	default:
		g.storeUsage(r) // never drop a record: a full buffer costs this call the write
	}
}

func (g *Gate) publish(ctx context.Context, s *llmv1.Signal) {
	if err := g.sig.Publish(ctx, s); err != nil {
		g.log.WarnContext(ctx, "publish llm signal", slog.String("signal", s.GetType().String()), logx.Err(err))
	}
}

// ticket is one request's place in the pipeline queue.
type ticket struct {
	prio   int
	seq    uint64
	index  int // in the heap; -1 when not queued
	ready  chan struct{}
	cancel context.CancelCauseFunc // of the running attempt, nil between attempts
}

type tickets []*ticket

func (q tickets) Len() int { return len(q) }
func (q tickets) Less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio > q[j].prio
	}
	return q[i].seq < q[j].seq
}
func (q tickets) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *tickets) Push(x any) {
	t := x.(*ticket)
	t.index = len(*q)
	*q = append(*q, t)
}
func (q *tickets) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	t.index = -1
	return t
}

// dispatchLocked admits pipeline tickets while no user request waits and a
// slot is free: the user queue is always drained first (B-26).
func (g *Gate) dispatchLocked() {
	for g.userPending == 0 && len(g.active) < g.cfg.PipelineSlots && len(g.queue) > 0 {
		t := heap.Pop(&g.queue).(*ticket)
		g.active[t] = struct{}{}
		t.ready <- struct{}{}
	}
}

// admit waits for a pipeline slot.
func (g *Gate) admit(ctx context.Context, t *ticket) error {
	g.mu.Lock()
	heap.Push(&g.queue, t)
	g.dispatchLocked()
	g.mu.Unlock()
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		if t.index >= 0 {
			heap.Remove(&g.queue, t.index)
		} else {
			<-t.ready // admitted concurrently: give the slot back
			delete(g.active, t)
			g.dispatchLocked()
		}
		g.mu.Unlock()
		return context.Cause(ctx)
	}
}

func (g *Gate) release(t *ticket) {
	g.mu.Lock()
	delete(g.active, t)
	g.dispatchLocked()
	g.mu.Unlock()
}

// preemptLocked cancels the lowest-priority running pipeline call (the most
// recent among equals) when every pipeline slot is busy.
func (g *Gate) preemptLocked() *ticket {
	if !g.cfg.UserPreemption || len(g.active) < g.cfg.PipelineSlots {
		return nil
	}
	var victim *ticket
	for t := range g.active {
		if t.cancel == nil {
			continue
		}
		if victim == nil || t.prio < victim.prio || (t.prio == victim.prio && t.seq > victim.seq) {
			victim = t
		}
	}
	if victim != nil {
		victim.cancel(ErrPreempted)
		victim.cancel = nil
	}
	return victim
}

// Complete runs req to the end through the gate.
func (g *Gate) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	return g.do(ctx, req, func(ctx context.Context, p llm.Provider, r *llm.Request) (*llm.Response, bool, error) {
		cctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
		defer cancel()
		resp, err := p.Complete(cctx, r)
		return resp, false, err
	})
}

// Stream runs req through the gate, handing every chunk to h. A stream that
// fails before any content is retried like a completion; one that fails
// after content was delivered returns the error (the handler has seen the
// error chunk and keeps its partial answer). A preempted pipeline stream is
// re-queued and starts again with a new start chunk.
func (g *Gate) Stream(ctx context.Context, req *llm.Request, h llm.Handler) error {
	if g.streamBus != nil {
		r := *req
		if r.ID == "" {
			r.ID = uuid.NewString()
		}
		req = &r
		cctx, stop, err := fanout.WithControl(ctx, g.streamBus, r.TenantID, r.ID)
		if err != nil {
			return fmt.Errorf("llm gate: stream control: %w", err)
		}
		defer stop()
		ctx = cctx
	}
	_, err := g.do(ctx, req, func(ctx context.Context, p llm.Provider, r *llm.Request) (*llm.Response, bool, error) {
		acc := llm.NewAccumulator(p.Name(), r.Model)
		h := h
		if g.streamBus != nil {
			h = fanout.Handler(g.streamBus, p.Name(), r.ID, fanout.Meta{TenantID: r.TenantID, SessionID: r.SessionID, Model: r.Model, AgentID: r.AgentID, Priority: llm.PriorityOf(r)}, h)
		}
		delivered := false
		start := time.Now()
		err := llm.StreamWatched(ctx, p, r, g.cfg.StreamIdleTimeout, func(c llm.Chunk) error {
			acc.Add(c)
			switch c.Type {
			case llm.ChunkText, llm.ChunkToolStart, llm.ChunkToolDelta, llm.ChunkToolEnd:
				delivered = true
			}
			return h(c)
		})
		resp := acc.Response()
		resp.Latency = time.Since(start)
		return resp, delivered, err
	})
	return err
}

type callFunc func(ctx context.Context, p llm.Provider, req *llm.Request) (resp *llm.Response, delivered bool, err error)

func (g *Gate) do(ctx context.Context, in *llm.Request, call callFunc) (*llm.Response, error) {
	p, state, err := g.provider(ctx, in)
	if err != nil {
		return nil, err
	}
	return g.run(ctx, p, state, in, call, true)
}

// run is do on a chosen provider; fit says whether the request is fitted
// into the model's context window (embedding inputs are not a prompt).
func (g *Gate) run(ctx context.Context, p llm.Provider, state string, in *llm.Request, call callFunc, fit bool) (*llm.Response, error) {
	req := *in
	// Before anything else sees the prompt (fitting, estimates, the
	// provider): no secret goes further than here.
	if err := g.screen(ctx, &req); err != nil {
		return nil, err
	}
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	if req.CreatedAt.IsZero() {
		req.CreatedAt = g.now()
	}
	req.Model = p.Resolve(req.Model)
	if req.MaxTokens <= 0 {
		req.MaxTokens = g.maxTokens
	}
	maxContext := 0
	if g.fitter != nil && fit {
		m, _ := llm.LookupModel(p.Name(), req.Model)
		maxContext = m.MaxContext
		if err := g.fit(ctx, &req, maxContext); err != nil {
			return nil, err
		}
	}
	refitted := false
	estimate := int64(req.TokenEstimate)
	if estimate <= 0 {
		estimate = int64(float64(llm.EstimateRequest(&req))*g.cfg.EstimateMargin+0.999) + int64(req.MaxTokens)
		if estimate < 0 {
			// An enormous MaxTokens wrapped the sum round: it is as much
			// as a budget can hold, not nothing.
			estimate = math.MaxInt64
		}
	}
	prio := llm.PriorityOf(&req)
	user := req.UserInvoked || prio >= llm.PriorityUserInteractive
	class := "pipeline"
	if user {
		class = "user"
	}
	g.mu.Lock()
	g.seq++
	t := &ticket{prio: prio, seq: g.seq, index: -1, ready: make(chan struct{}, 1)}
	if user {
		g.userPending++
		// The victim's own goroutine re-queues it and publishes RequestPreempted.
		g.preemptLocked()
	}
	g.mu.Unlock()
	userLeft := false
	leaveUser := func() {
		if user && !userLeft {
			userLeft = true
			g.mu.Lock()
			g.userPending--
			g.dispatchLocked()
			g.mu.Unlock()
		}
	}
	defer leaveUser()
	// The provider budget is the state's: a tenant's own key neither uses up
	// nor is refused by the configured client's budget.
	scope := budget.Scope{Tenant: req.TenantID, Session: req.SessionID, Task: req.TaskID, Provider: state,
		SessionLimit: req.SessionBudget, TaskLimit: req.TaskBudget}
	submitted := time.Now()
	for n := 1; ; {
		if !user {
			if err := g.admit(ctx, t); err != nil {
				return nil, err
			}
		}
		resp, preempted, err := g.attempt(ctx, t, p, state, &req, scope, estimate, call, leaveUser, class, submitted)
		if !user {
			g.release(t)
		}
		if preempted {
			g.m.preempted.Inc()
			g.publish(ctx, &llmv1.Signal{Type: llmv1.SignalType_SIGNAL_TYPE_REQUEST_PREEMPTED, SessionId: req.SessionID, RequestId: req.ID,
				Provider: p.Name(), Reason: "preempted by a user request; re-queued"})
			continue
		}
		if err == nil {
			return resp, nil
		}
		var ae *attemptError
		if g.fitter != nil && fit && !refitted && errors.As(err, &ae) && ae.retryable && llm.IsContextOverflow(ae.err) {
			refitted = true
			before := llm.EstimateRequest(&req)
			if ferr := g.fit(ctx, &req, int(float64(maxContext)*llm.RefitFactor)); ferr != nil {
				return resp, ae.err
			}
			g.log.WarnContext(ctx, "provider rejected the prompt as too long; refitted to 85% of the window",
				slog.String("provider", p.Name()), slog.String("model", req.Model), slog.Int("estimated_tokens", before), slog.Int("max_context", maxContext))
			continue
		}
		if !errors.As(err, &ae) || !ae.retryable {
			return resp, unwrapAttempt(err)
		}
		wait, ok := g.retry.Next(ae.tier, n, ae.err)
		if !ok {
			return resp, ae.err
		}
		g.m.retries.WithLabelValues(ae.tier.String()).Inc()
		n++
		if ae.tier == llm.TierRateLimit {
			wait = 0 // the shared limiter holds every replica until the backoff ends
		}
		if wait > 0 {
			tm := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				tm.Stop()
				return resp, ae.err
			case <-tm.C:
			}
		}
	}
}

type attemptError struct {
	err       error
	tier      llm.Tier
	retryable bool
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

func unwrapAttempt(err error) error {
	var ae *attemptError
	if errors.As(err, &ae) {
		return ae.err
	}
	return err
}

// attempt runs one provider call with its budget reservation, rate-limit
// wait and breaker check. preempted reports a pipeline call cancelled for a
// user request.
func (g *Gate) attempt(ctx context.Context, t *ticket, p llm.Provider, state string, req *llm.Request, scope budget.Scope, estimate int64,
	call callFunc, leaveUser func(), class string, submitted time.Time) (resp *llm.Response, preempted bool, err error) {
	name := p.Name()
	adm, err := g.precheck(ctx, state, scope, estimate, leaveUser)
	if err != nil {
		return nil, false, err
	}
	// Settling is local: the lease takes back what the call did not use.
	settle := func(actual int64) { g.leases.Settle(adm.res, actual) }
	defer settle(0)

	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g.mu.Lock()
	t.cancel = cancel
	g.mu.Unlock()
	g.m.wait.WithLabelValues(class).Observe(time.Since(submitted).Seconds())
	start := time.Now()
	resp, delivered, err := call(actx, p, req)
	latency := time.Since(start)
	g.mu.Lock()
	t.cancel = nil
	g.mu.Unlock()
	if resp != nil && resp.Latency == 0 {
		resp.Latency = latency
	}

	var u llm.Usage
	if resp != nil {
		u = resp.Usage
	}
	rec := llm.UsageRecord{At: g.now().UTC(), RequestID: req.ID, Attribution: req.Attribution, Provider: name, Model: req.Model,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: llm.Cost(name, req.Model, u), Latency: latency}
	if resp != nil && resp.Model != "" {
		rec.Model = resp.Model
		rec.CostUSD = llm.Cost(name, resp.Model, u)
	}
	if err != nil {
		settle(int64(u.Total()))
	}
	g.m.duration.WithLabelValues(name).Observe(latency.Seconds())
	g.m.tokens.WithLabelValues(name, "input").Add(float64(u.InputTokens))
	g.m.tokens.WithLabelValues(name, "output").Add(float64(u.OutputTokens))
	g.m.cost.WithLabelValues(name).Add(rec.CostUSD)

	bctx := context.WithoutCancel(ctx)
	if err == nil {
		if resp.CostUSD == 0 {
			resp.CostUSD = rec.CostUSD
		}
		rec.Outcome = "ok"
		g.record(rec)
		g.m.requests.WithLabelValues(name, "ok").Inc()
		settle(int64(u.Total()))
		if adm.closed {
			// Batched: the next sync writes the limiter's success, the
			// soft-limit usage and the breaker's successes.
			g.view.succeeded(state, u.Total())
			return resp, false, nil
		}
		// A half-open probe (or a call after a backoff) reports at once, off
		// the caller's path. Close waits for it.
		g.bg.Add(1)
		go func() {
			defer g.bg.Done()
			if perr := g.postSuccess(bctx, state, u.Total()); perr != nil {
				g.log.WarnContext(bctx, "record call success", logx.Err(perr))
			}
		}()
		return resp, false, nil
	}

	// A half-open probe that ends without a verdict on the provider's
	// health (preempted, cancelled, refused for the request itself, rate
	// limited) hands the probe on, so that the next call probes at once
	// rather than every call failing fast until the probe times out.
	releaseProbe := func() {
		if adm.closed {
			return
		}
		if rerr := g.breakers.Release(bctx, state); rerr != nil {
			g.log.WarnContext(ctx, "release breaker probe", logx.Err(rerr))
		}
	}
	if ctx.Err() == nil && errors.Is(context.Cause(actx), ErrPreempted) {
		rec.Outcome = "preempted"
		g.record(rec)
		releaseProbe()
		return nil, true, nil
	}
	if ctx.Err() != nil {
		rec.Outcome = "cancelled"
		g.record(rec)
		g.m.requests.WithLabelValues(name, "cancelled").Inc()
		releaseProbe()
		return resp, false, context.Cause(ctx)
	}
	tier := g.classifier.Classify(err)
	rec.Outcome, rec.ErrorTier = "error", tier.String()
	g.record(rec)
	g.m.requests.WithLabelValues(name, "error").Inc()
	switch tier {
	case llm.TierRateLimit, llm.TierDegrading, llm.TierTransient:
		// Batched successes first, so that they do not land after this
		// failure and undo it; the view stops the fast path.
		g.sync(bctx, state, false)
		g.view.caution(state)
	}
	switch tier {
	case llm.TierRateLimit:
		releaseProbe()
		if _, _, lerr := g.limiter.OnRateLimit(bctx, state, llm.RetryAfterOf(err)); lerr != nil {
			g.log.WarnContext(ctx, "rate limiter 429", logx.Err(lerr))
		}
	case llm.TierDegrading, llm.TierTransient:
		if _, berr := g.breakers.Record(bctx, state, false); berr != nil {
			g.log.WarnContext(ctx, "record breaker failure", logx.Err(berr))
		}
	default:
		releaseProbe()
	}
	g.log.WarnContext(ctx, "model call failed", slog.String("provider", name), slog.String("tier", tier.String()), logx.Err(err))
	return resp, false, &attemptError{err: err, tier: tier, retryable: !delivered}
}

// Queued is the number of pipeline calls waiting for a slot.
func (g *Gate) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// provider picks the tenant's own client when it stored a key for the
// provider, else the configured one. state names the shared rate-limit,
// breaker and provider budget state the call reads and writes: the provider's for the
// configured client, the tenant's own for its client, so that the answers
// of one tenant's key (or endpoint) never pause or trip the provider for
// the others.
func (g *Gate) provider(ctx context.Context, req *llm.Request) (p llm.Provider, state string, err error) {
	name := req.Provider
	if name == "" {
		name = g.providers.Default().Name()
	}
	if g.tenants != nil && req.TenantID != "" {
		tp, ok, err := g.tenants.Get(ctx, req.TenantID, name)
		if err != nil {
			return nil, "", fmt.Errorf("tenant credentials for %s: %w", name, err)
		}
		if ok {
			return tp, TenantState(name, req.TenantID), nil
		}
	}
	p, err = g.providers.Get(name)
	if err != nil {
		return nil, "", err
	}
	return p, name, nil
}

// TenantState names the rate-limit, breaker and provider budget state of a
// tenant's own client for a provider: a digest of the tenant, so that its
// id never shapes a key.
func TenantState(provider, tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return provider + "@tenant-" + hex.EncodeToString(sum[:8])
}

// admission is what precheck grants a call.
type admission struct {
	res *budget.LeaseReservation
	// closed: the breaker was closed (not a half-open probe).
	closed bool
}

// precheck admits a call. While the local view trusts the provider (no
// backoff, breaker closed, read from Redis lately) it only reserves the
// budget from the local leases; otherwise it checks the shared rate limiter
// and the breaker in one Redis round trip, waiting out a rate-limit backoff
// (after which the user queue no longer holds pipeline calls back).
func (g *Gate) precheck(ctx context.Context, name string, scope budget.Scope, estimate int64, leaveUser func()) (admission, error) {
	for reloaded := false; ; {
		if g.view.fast(name, time.Now()) {
			g.m.admissions.WithLabelValues("local").Inc()
			leaveUser()
			res, err := g.leases.Reserve(ctx, scope, estimate)
			if err != nil {
				g.m.requests.WithLabelValues(name, "refused").Inc()
				return admission{}, err
			}
			return admission{res: res, closed: true}, nil
		}
		g.m.admissions.WithLabelValues("redis").Inc()
		gen := g.view.generation(name)
		pipe := g.rdb.Pipeline()
		proceed := g.limiter.ProceedCmd(ctx, pipe, name)
		allow := g.breakers.AllowCmd(ctx, pipe, name)
		_, _ = pipe.Exec(ctx) // each command's error is read below
		ok, _, perr := proceed()
		allowed, st, aerr := allow()
		if !reloaded && (isNoScript(perr) || isNoScript(aerr)) {
			reloaded = true
			if err := g.load(ctx); err != nil {
				return admission{}, err
			}
			continue
		}
		undo := func() {
			if aerr == nil && allowed && st == breaker.HalfOpen {
				if err := g.breakers.Release(context.WithoutCancel(ctx), name); err != nil {
					g.log.WarnContext(ctx, "release breaker probe", logx.Err(err))
				}
			}
		}
		if err := errors.Join(perr, aerr); err != nil {
			undo()
			return admission{}, err
		}
		if !ok {
			undo()
			if err := g.limiter.Wait(ctx, name); err != nil {
				return admission{}, err
			}
			continue
		}
		g.view.observed(name, gen, time.Now(), st == breaker.Closed)
		leaveUser()
		res, rerr := g.leases.Reserve(ctx, scope, estimate)
		if rerr != nil {
			undo()
			g.m.requests.WithLabelValues(name, "refused").Inc()
			return admission{}, rerr
		}
		if !allowed {
			g.leases.Settle(res, 0)
			g.m.requests.WithLabelValues(name, "refused").Inc()
			return admission{}, ErrCircuitOpen.Withf("llm gate: %v: %s", breaker.ErrOpen, name).With("provider", name)
		}
		return admission{res: res, closed: st == breaker.Closed}, nil
	}
}

// postSuccess records the breaker success and the limiter's success and
// soft-limit usage of one call in one round trip.
func (g *Gate) postSuccess(ctx context.Context, name string, tokens int) error {
	pipe := g.rdb.Pipeline()
	record := g.breakers.RecordCmd(ctx, pipe, name, true)
	success := g.limiter.BatchCmd(ctx, pipe, name, 1, 1, int64(tokens))
	_, _ = pipe.Exec(ctx)
	_, rerr := record()
	return errors.Join(rerr, success())
}

func (g *Gate) load(ctx context.Context) error {
	return errors.Join(g.limiter.Load(ctx), g.budgets.Load(ctx), g.leases.Load(ctx), g.breakers.Load(ctx))
}

func isNoScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}

func (g *Gate) fit(ctx context.Context, req *llm.Request, maxContext int) error {
	res, err := g.fitter.Fit(ctx, req, maxContext)
	if err != nil {
		return err
	}
	req.Messages = res.Messages
	return nil
}

// Package orchestrator runs DAGs durably: it accepts a DAG through the
// WorkflowService, persists the run and one row per node in Postgres, and
// dispatches each node to the workers through the JetStream task queues once
// its dependencies succeeded, at most max_concurrency at a time per run. It
// records the workers' results, skips the dependents of failed nodes, and
// reports progress on the run's session event stream.
package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/guidesession"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service is the Orchestrator.
type Service struct {
	orchestratorv1.UnimplementedWorkflowServiceServer
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal

	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	bus     *natsx.Bus
	metrics metrics
	// slots is the cluster-wide dispatch limit; nil without a global cap.
	slots *slotLimiter
	// sessions reads a new run's session from the Guide; nil without a
	// Guide peer (runs then name any session id).
	sessions *guidesession.Reader
	// ctx is Run's context, for work started by timers.
	ctx atomic.Pointer[context.Context]
	// carryDone is closed when the effects last handed to carryOutOrdered
	// have been carried out.
	carryMu   sync.Mutex
	carryDone chan struct{}
	// deliveryKick wakes the delivery loop when a run ended (delivery.go).
	deliveryKick chan struct{}
	// reviews serves the review API (review.go).
	reviews *reviewServer
	// audit records runs created and cancelled and branches pushed
	// (audit.go).
	audit *audit.Log
	// repos resolves the repositories requests name (repository.go).
	repos *repositories
	// claimMetrics counts the workers' claims of tasks (claims.go).
	claimMetrics claimMetrics
	// inflight counts the decisions being taken or carried out; a stop
	// waits for them before releasing the run leases (lifecycle.go).
	inflight inflight
	// released is set once a stop released the run leases (lifecycle.go).
	released atomic.Bool
	// claimsFrom is when this replica began answering claims (UnixNano).
	claimsFrom atomic.Int64
}

type metrics struct {
	dispatched   prometheus.Counter
	completions  prometheus.Counter
	retries      prometheus.Counter
	handoffs     prometheus.Counter
	recovered    prometheus.Counter
	runs         *prometheus.CounterVec
	nodeDuration prometheus.Histogram
	// resultBatch is the number of worker reports applied together (one
	// database round trip per run in a batch).
	resultBatch prometheus.Histogram
}

// runCtx is Run's context, or a done context before Run and after it.
func (s *Service) runCtx() context.Context {
	if p := s.ctx.Load(); p != nil {
		return *p
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Internal limits and timings.
const (
	// effectsTimeout bounds publishing a committed decision's effects.
	effectsTimeout      = 30 * time.Second
	maxStoredErrorBytes = 4 << 10
	// resyncBatch is how many unfinished runs one resync pass visits.
	resyncBatch           = 1000
	resultRedeliveryDelay = 2 * time.Second
	// maxWoken bounds the waiting runs re-examined after slots freed up.
	maxWoken            = 256
	unlimitedDeliveries = -1
)

// New builds the Orchestrator; it needs deps.DB (migrated) and deps.Bus.
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil || deps.Bus == nil {
		return nil, errors.New("orchestrator: a database and a NATS bus are required")
	}
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var slots *slotLimiter
	if cfg.GlobalMaxConcurrency > 0 {
		if deps.Redis == nil {
			return nil, errors.New("orchestrator: orchestrator.global-max-concurrency needs Redis")
		}
		slots = &slotLimiter{rc: deps.Redis, total: cfg.GlobalMaxConcurrency, reservePercent: cfg.UserReservePercent, ttl: 3 * cfg.LeaseTTL}
	}
	if cfg.GuideTimeout == 0 {
		cfg.GuideTimeout = 5 * time.Second
	}
	log = log.With(logx.KeyComponent, "orchestrator")
	sessions := guidesession.New(deps.Peers.Guide, cfg.GuideTimeout, log)
	if sessions == nil {
		log.Warn("no guide address configured: runs are not checked to be in the caller's own session")
	}
	s := &Service{
		slots:        slots,
		sessions:     sessions,
		cfg:          cfg,
		log:          log,
		db:           deps.DB,
		bus:          deps.Bus,
		audit:        deps.Audit,
		metrics:      newMetrics(promauto.With(reg)),
		claimMetrics: newClaimMetrics(promauto.With(reg)),
		deliveryKick: make(chan struct{}, 1),
	}
	s.repos = newRepositories(deps.Peers.Librarian, log)
	s.reviews = newReviewServer(s)
	return s, nil
}

// newMetrics registers the orchestrator's metrics with f.
func newMetrics(f promauto.Factory) metrics {
	return metrics{
		dispatched: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_nodes_dispatched_total",
			Help: "Node attempts dispatched to workers.",
		}),
		completions: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_node_results_applied_total",
			Help: "Worker results applied to a node attempt (each attempt at most once).",
		}),
		retries: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_node_retries_total",
			Help: "Failed node attempts scheduled for a retry.",
		}),
		handoffs: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_pipeline_handoffs_total",
			Help: "Pipelines that handed their state to a fresh pipeline of the same node (spec F-23).",
		}),
		recovered: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_orchestrator_runs_taken_over_total",
			Help: "Unfinished runs this replica claimed at start or from a replica whose lease expired.",
		}),
		runs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_orchestrator_runs_total",
			Help: "Runs that ended, by final state.",
		}, []string{"state"}),
		nodeDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sylk_orchestrator_node_duration_seconds",
			Help:    "Run time of node attempts as reported by workers.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}),
		resultBatch: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sylk_orchestrator_result_batch_size",
			Help:    "Worker reports applied together in one batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 8),
		}),
	}
}

// Register adds the WorkflowService and the ReviewService.
func (s *Service) Register(g *grpc.Server) {
	orchestratorv1.RegisterWorkflowServiceServer(g, s)
	orchestratorv1.RegisterReviewServiceServer(g, s.reviews)
}

// Run provisions the task and event streams, recovers unfinished runs, then
// applies worker results and periodically re-examines unfinished runs until
// ctx is done. It returns nil on a clean stop, which carries out what was
// committed and releases the replica's run leases to the other replicas
// (lifecycle.go).
func (s *Service) Run(ctx context.Context) error {
	err := s.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (s *Service) run(ctx context.Context) error {
	s.ctx.Store(&ctx)
	s.released.Store(false)
	if err := topology.EnsureTasks(ctx, s.bus); err != nil {
		return err
	}
	if err := topology.EnsureEvents(ctx, s.bus); err != nil {
		return err
	}
	sub, released, err := s.subscribeReleases()
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.recoverRuns(ctx, true); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.consumeResults(gctx) })
	g.Go(func() error { return s.serveClaims(gctx) })
	g.Go(func() error {
		s.takeOverReleased(gctx, released) // lifecycle.go
		return nil
	})
	g.Go(func() error {
		s.leases(gctx)
		return nil
	})
	g.Go(func() error {
		s.deliveries(gctx) // delivery.go
		return nil
	})
	g.Go(func() error {
		t := time.NewTicker(s.cfg.ResyncInterval)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				s.resync(gctx)
			}
		}
	})
	s.log.InfoContext(ctx, "orchestrator started")
	err = g.Wait()
	if ctx.Err() != nil {
		s.stop() // lifecycle.go
	}
	return err
}

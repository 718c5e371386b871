// Package librarian is the Librarian service: it registers a tenant's
// repositories from local paths, indexes their text files into line-window
// chunks with code-aware full-text search, answers SearchCode with ranked
// hits, and answers questions the Guide routes to its inbox.
package librarian

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/embed"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
)

// Service implements librarianv1.LibrarianServiceServer and the librarian's
// inbox consumer.
type Service struct {
	librarianv1.UnimplementedLibrarianServiceServer
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal

	cfg      Config
	log      *slog.Logger
	store    store
	bus      *natsx.Bus
	redis    *redisx.Client
	metrics  *metrics
	embedder embed.Embedder
	vectors  *vectorStore
	tools    toolCache
	// watchKick wakes the file watcher when a repository was indexed.
	watchKick chan struct{}
	// watching counts the repositories the file watcher watches.
	watching atomic.Int64
	// background tracks vector updates running after an index answered.
	background sync.WaitGroup
	// audit records repositories registered (audit.go).
	audit *audit.Log
	// ops are the index operations this process runs (operations.go).
	ops *operations
	// opSignals wakes WatchOperation streams when this process writes an
	// operation (operations_watch.go).
	opSignals opSignals
	// answers writes answers to routed questions with a model (answer.go).
	answers answerModel
}

var _ librarianv1.LibrarianServiceServer = (*Service)(nil)

// metrics are the librarian's own metrics.
type metrics struct {
	indexFiles     *prometheus.CounterVec
	searchDuration *prometheus.HistogramVec
	cache          *prometheus.CounterVec
	watchIndexes   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		indexFiles: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_librarian_index_files_total",
			Help: "Files seen by indexing, by result (indexed or the reason it was skipped).",
		}, []string{"result"}),
		searchDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sylk_librarian_search_duration_seconds",
			Help:    "Time to answer a code search, by origin (rpc or inbox).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10),
		}, []string{"origin"}),
		cache: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_librarian_search_cache_total",
			Help: "Search intent cache lookups, by result (hit or miss).",
		}, []string{"result"}),
		watchIndexes: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_librarian_watch_indexes_total",
			Help: "Index runs started by the file watcher.",
		}),
	}
}

// New builds the service. deps.DB is required; deps.Bus is needed by Run.
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil {
		return nil, errors.New("librarian: a database pool is required")
	}
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	emb, err := newEmbedder(cfg)
	if err != nil {
		return nil, err
	}
	st := store{db: deps.DB}
	return &Service{
		cfg:       cfg,
		log:       log.With(logx.KeyComponent, "librarian"),
		store:     st,
		bus:       deps.Bus,
		redis:     deps.Redis,
		metrics:   newMetrics(deps.Registerer),
		embedder:  emb,
		vectors:   newVectorStore(st, emb, cfg),
		tools:     toolCache{entries: map[string]toolCacheEntry{}},
		watchKick: make(chan struct{}, 1),
		audit:     deps.Audit,
		ops:       newOperations(),
	}, nil
}

// newEmbedder builds the configured embedder.
func newEmbedder(cfg Config) (embed.Embedder, error) {
	if cfg.EmbedProvider == "openai" {
		return embed.NewOpenAI(embed.OpenAIConfig{
			BaseURL: cfg.EmbedURL, APIKey: cfg.EmbedAPIKey, Model: cfg.EmbedModel, Dims: cfg.EmbedDims, Timeout: cfg.EmbedTimeout,
			Agent: "librarian",
		})
	}
	return embed.NewHashing(cfg.EmbedDims)
}

// SetLLMGate sends the embeddings endpoint's calls through g: the inputs
// through its secrets policy, the provider's shared limits and budgets, and
// a usage record with tokens and cost for each, like a completion's.
func (s *Service) SetLLMGate(g *gate.Gate) {
	if o, ok := s.embedder.(*embed.OpenAI); ok {
		o.SetGate(g)
	}
	s.answers.gate = g
}

// NeedsLLMGate: an embeddings endpoint, or a model (not the offline
// `local` rules) writing answers, has a use for a gate; the offline
// embedder and answers calls no one.
func (s *Service) NeedsLLMGate(defaultProvider string) bool {
	_, ok := s.embedder.(*embed.OpenAI)
	return ok || s.cfg.Answer.Model && defaultProvider != llm.Local
}

// publishNotice tells whoever listens on subject (the Guide, the other
// replicas) what happened to an index; failures are logged, as notices
// are advisory.
func (s *Service) publishNotice(ctx context.Context, subject string, n *librarianv1.IndexNotice) {
	if s.bus == nil {
		return
	}
	if err := s.bus.PublishCore(ctx, subject, n); err != nil {
		s.log.WarnContext(ctx, "publish index notice", slog.String("subject", subject), logx.Err(err))
	}
}

// Register adds LibrarianService to g.
func (s *Service) Register(g *grpc.Server) {
	librarianv1.RegisterLibrarianServiceServer(g, s)
}

// Run provisions the streams the librarian uses and answers its inbox until
// ctx is done.
func (s *Service) Run(ctx context.Context) error {
	if s.bus == nil {
		return errors.New("librarian: a NATS bus is required to run the inbox")
	}
	sub, err := s.followChanges(ctx)
	if err != nil {
		return fmt.Errorf("librarian: follow index changes: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Operations left running by a process that is gone are failed, now
	// and whenever one goes silent; this process's own are ended (recorded
	// as a shutdown) before Run returns.
	go s.sweepOperations(ctx)
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateUpdateTimeout)
		defer cancel()
		s.stopOperations(c)
	}()
	// Started once the inbox takes questions and the vectors are loaded
	// (semantic search is complete), or their load failed (said in the log).
	started := s.After(2)
	go func() {
		defer started[1]()
		if err := s.vectors.loadAll(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "load vectors", logx.Err(err))
		}
	}()
	if s.cfg.Watch {
		watched := make(chan struct{})
		wctx, stop := context.WithCancel(ctx)
		// The watcher and its index runs end before Run returns.
		defer func() { stop(); <-watched }()
		go func() {
			defer close(watched)
			if err := s.watch(wctx); err != nil && wctx.Err() == nil {
				s.log.ErrorContext(ctx, "file watcher", logx.Err(err))
			}
		}()
	}
	cfg := s.inboxConfig()
	cfg.Ready = started[0]
	if err := inbox.Run(ctx, s.bus, cfg, s.answer); err != nil {
		return fmt.Errorf("librarian: %w", err)
	}
	return nil
}

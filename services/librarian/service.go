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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service implements librarianv1.LibrarianServiceServer and the librarian's
// inbox consumer.
type Service struct {
	librarianv1.UnimplementedLibrarianServiceServer

	cfg     Config
	log     *slog.Logger
	store   store
	bus     *natsx.Bus
	metrics *metrics
}

var _ librarianv1.LibrarianServiceServer = (*Service)(nil)

// metrics are the librarian's own metrics.
type metrics struct {
	indexFiles     *prometheus.CounterVec
	searchDuration *prometheus.HistogramVec
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
	return &Service{
		cfg:     cfg,
		log:     log.With(logx.KeyComponent, "librarian"),
		store:   store{db: deps.DB},
		bus:     deps.Bus,
		metrics: newMetrics(deps.Registerer),
	}, nil
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
	if err := topology.EnsureAgents(ctx, s.bus); err != nil {
		return fmt.Errorf("librarian: %w", err)
	}
	if err := topology.EnsureEvents(ctx, s.bus); err != nil {
		return fmt.Errorf("librarian: %w", err)
	}
	spec := natsx.ConsumerSpec{
		Stream:         s.bus.Stream(topology.StreamAgents),
		Durable:        topology.AgentLibrarian,
		FilterSubjects: []string{topology.InboxSubject(s.bus, topology.AgentLibrarian)},
		AckWait:        s.cfg.InboxTimeout + s.cfg.InboxTimeout/2,
		MaxDeliver:     inboxMaxDeliver,
		NakDelay:       s.cfg.InboxRetryDelay,
	}
	s.log.InfoContext(ctx, "inbox consumer starting", slog.String("subject", spec.FilterSubjects[0]))
	if err := s.bus.Consume(ctx, spec, s.handleInbox); err != nil {
		return fmt.Errorf("librarian: %w", err)
	}
	return nil
}

// Package academic holds external knowledge: documents ingested as markdown
// or text, split into sections and searchable within a tenant. It serves
// AcademicService over gRPC and answers messages the Guide routes to its
// inbox.
package academic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grounding"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service is the academic.
type Service struct {
	academicv1.UnimplementedAcademicServiceServer
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal

	cfg     Config
	log     *slog.Logger
	store   *store
	bus     *natsx.Bus
	metrics *metrics
	// answers writes answers with a model (answer.go).
	answers grounding.Writer
}

type metrics struct {
	ingested       *prometheus.CounterVec
	sections       prometheus.Counter
	searchDuration prometheus.Histogram
	inbox          *prometheus.CounterVec
	expectations   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		ingested: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_academic_documents_ingested_total",
			Help: "Documents ingested, by format.",
		}, []string{"format"}),
		expectations: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_academic_domain_expectations_total",
			Help: "Domain expectation lookups answered for a known domain, by domain.",
		}, []string{"domain"}),
		sections: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_academic_sections_ingested_total",
			Help: "Sections stored from ingested documents.",
		}),
		searchDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sylk_academic_search_duration_seconds",
			Help:    "Time taken by document searches.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		inbox: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_academic_inbox_messages_total",
			Help: "Inbox messages handled, by outcome (answered, expired, rejected, failed).",
		}, []string{"outcome"}),
	}
}

// New builds the service. deps.DB must be migrated with migrations/academic;
// deps.Bus is needed by Run only.
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil {
		return nil, errors.New("academic: a database pool is required")
	}
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	return &Service{
		cfg:     cfg,
		log:     log.With(logx.KeyComponent, "academic"),
		store:   &store{db: deps.DB},
		bus:     deps.Bus,
		metrics: newMetrics(deps.Registerer),
	}, nil
}

// Register adds AcademicService to g.
func (s *Service) Register(g *grpc.Server) {
	academicv1.RegisterAcademicServiceServer(g, s)
}

// Run provisions the agent inboxes and the event stream, then answers the
// academic's inbox until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	if s.bus == nil {
		return errors.New("academic: a NATS bus is required to run the inbox")
	}
	cfg := inbox.Config{Agent: topology.AgentAcademic, Timeout: s.cfg.InboxTimeout, Outcomes: s.metrics.inbox, Log: s.log,
		Ready: s.MarkStarted, Confidence: answerConfidence}
	if err := inbox.Run(ctx, s.bus, cfg, s.answer); err != nil {
		return fmt.Errorf("academic: %w", err)
	}
	return nil
}

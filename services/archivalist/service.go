// Package archivalist keeps what was done: decisions, failures, outcomes and
// notes of every session, searchable within a session and, on request, across
// the sessions of a tenant (spec A-18). It serves ArchivalistService over gRPC
// and answers messages the Guide routes to its inbox.
package archivalist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/grounding"
	"sylk.dev/sylk/pkg/guidesession"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service is the archivalist.
type Service struct {
	archivalistv1.UnimplementedArchivalistServiceServer
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal

	cfg     Config
	log     *slog.Logger
	store   *store
	bus     *natsx.Bus
	metrics *metrics
	// sessions reads an entry's session from the Guide; nil without a
	// Guide peer (entries then name any session id).
	sessions *guidesession.Reader
	// llm serves the LLM usage and provider APIs (pkg/llm/api), when set.
	llm interface{ Register(*grpc.Server) }
	// answers writes answers with a model (answer.go).
	answers grounding.Writer
}

// SetLLM makes Register also serve the LLM usage and provider APIs; call it
// before Register.
func (s *Service) SetLLM(api interface{ Register(*grpc.Server) }) { s.llm = api }

type metrics struct {
	created        *prometheus.CounterVec
	searchDuration *prometheus.HistogramVec
	inbox          *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		created: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_archivalist_entries_created_total",
			Help: "Entries stored, by category.",
		}, []string{"category"}),
		searchDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sylk_archivalist_search_duration_seconds",
			Help:    "Time taken by entry searches, by scope (session or cross_session).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"scope"}),
		inbox: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_archivalist_inbox_messages_total",
			Help: "Inbox messages handled, by outcome (answered, stored, duplicate, expired, rejected, failed).",
		}, []string{"outcome"}),
	}
}

// New builds the service. deps.DB must be migrated with migrations/archivalist;
// deps.Bus is needed by Run only.
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil {
		return nil, errors.New("archivalist: a database pool is required")
	}
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	log = log.With(logx.KeyComponent, "archivalist")
	sessions := guidesession.New(deps.Peers.Guide, cfg.GuideTimeout, log)
	if sessions == nil {
		log.Warn("no guide address configured: entries are not checked to be in the caller's own session")
	}
	return &Service{
		cfg:      cfg,
		log:      log,
		store:    &store{db: deps.DB},
		bus:      deps.Bus,
		metrics:  newMetrics(deps.Registerer),
		sessions: sessions,
	}, nil
}

// Register adds ArchivalistService to g.
func (s *Service) Register(g *grpc.Server) {
	archivalistv1.RegisterArchivalistServiceServer(g, s)
	if s.llm != nil {
		s.llm.Register(g)
	}
}

// Run provisions the agent inboxes and the event stream, then answers the
// archivalist's inbox until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	if s.bus == nil {
		return errors.New("archivalist: a NATS bus is required to run the inbox")
	}
	cfg := inbox.Config{Agent: topology.AgentArchivalist, Timeout: s.cfg.InboxTimeout, Outcomes: s.metrics.inbox, Log: s.log,
		Ready: s.MarkStarted, Confidence: answerConfidence}
	if err := inbox.Run(ctx, s.bus, cfg, s.handleInbox); err != nil {
		return fmt.Errorf("archivalist: %w", err)
	}
	return nil
}

// Package guide is the Guide service: it owns sessions and their lifecycle,
// takes every user message, answers slash commands itself, routes everything
// else to the agent that owns it and records each step on the session's event
// stream.
package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service implements SessionService and GuideService.
type Service struct {
	cfg        Config
	log        *slog.Logger
	db         *pgxpool.Pool
	bus        *natsx.Bus
	classifier Classifier
	metrics    *metrics
	now        func() time.Time
}

type metrics struct {
	messages    *prometheus.CounterVec
	routing     prometheus.Histogram
	transitions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		messages: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_messages_total",
			Help: "User messages handled, by routing tier and target agent (\"none\" when the user was asked to clarify).",
		}, []string{"tier", "target"}),
		routing: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sylk_guide_routing_duration_seconds",
			Help:    "Time taken to decide how to handle a user message.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		transitions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_session_transitions_total",
			Help: "Session lifecycle transitions, by the state entered.",
		}, []string{"state"}),
	}
}

// New builds the Guide. It provisions the EVENTS and AGENTS streams before
// returning (bounded by Config.ProvisionTimeout), so that handlers can
// publish as soon as the server serves, even before Run has started.
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	if deps.DB == nil {
		errs = append(errs, errors.New("guide: a database pool is required"))
	}
	if deps.Bus == nil {
		errs = append(errs, errors.New("guide: a NATS bus is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := deps.Log
	if log == nil {
		log = logx.Discard()
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Service{
		cfg:        cfg.withDefaults(),
		log:        log.With(logx.KeyComponent, "guide"),
		db:         deps.DB,
		bus:        deps.Bus,
		classifier: newKeywordClassifier(),
		metrics:    newMetrics(reg),
		now:        func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ProvisionTimeout)
	defer cancel()
	if err := s.provision(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Service) provision(ctx context.Context) error {
	if err := topology.EnsureEvents(ctx, s.bus); err != nil {
		return fmt.Errorf("guide: %w", err)
	}
	if err := topology.EnsureAgents(ctx, s.bus); err != nil {
		return fmt.Errorf("guide: %w", err)
	}
	return nil
}

// Register adds SessionService and GuideService to g.
func (s *Service) Register(g *grpc.Server) {
	guidev1.RegisterSessionServiceServer(g, sessionAPI{s: s})
	guidev1.RegisterGuideServiceServer(g, guideAPI{s: s})
}

// Run provisions the streams again (idempotent: New already did) and then
// waits for ctx: the Guide has no background consumers yet.
func (s *Service) Run(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ProvisionTimeout)
	err := s.provision(pctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// sessionAPI adapts Service to the generated SessionService interface.
type sessionAPI struct {
	guidev1.UnimplementedSessionServiceServer
	s *Service
}

func (a sessionAPI) CreateSession(ctx context.Context, r *guidev1.CreateSessionRequest) (*guidev1.CreateSessionResponse, error) {
	return a.s.CreateSession(ctx, r)
}

func (a sessionAPI) GetSession(ctx context.Context, r *guidev1.GetSessionRequest) (*guidev1.GetSessionResponse, error) {
	return a.s.GetSession(ctx, r)
}

func (a sessionAPI) ListSessions(ctx context.Context, r *guidev1.ListSessionsRequest) (*guidev1.ListSessionsResponse, error) {
	return a.s.ListSessions(ctx, r)
}

func (a sessionAPI) SuspendSession(ctx context.Context, r *guidev1.SuspendSessionRequest) (*guidev1.SuspendSessionResponse, error) {
	return a.s.SuspendSession(ctx, r)
}

func (a sessionAPI) ResumeSession(ctx context.Context, r *guidev1.ResumeSessionRequest) (*guidev1.ResumeSessionResponse, error) {
	return a.s.ResumeSession(ctx, r)
}

func (a sessionAPI) CompleteSession(ctx context.Context, r *guidev1.CompleteSessionRequest) (*guidev1.CompleteSessionResponse, error) {
	return a.s.CompleteSession(ctx, r)
}

// guideAPI adapts Service to the generated GuideService interface.
type guideAPI struct {
	guidev1.UnimplementedGuideServiceServer
	s *Service
}

func (a guideAPI) SendMessage(ctx context.Context, r *guidev1.SendMessageRequest) (*guidev1.SendMessageResponse, error) {
	return a.s.SendMessage(ctx, r)
}

func (a guideAPI) ListMessages(ctx context.Context, r *guidev1.ListMessagesRequest) (*guidev1.ListMessagesResponse, error) {
	return a.s.ListMessages(ctx, r)
}

func (a guideAPI) ListEvents(ctx context.Context, r *guidev1.ListEventsRequest) (*guidev1.ListEventsResponse, error) {
	return a.s.ListEvents(ctx, r)
}

func (a guideAPI) StreamEvents(r *guidev1.StreamEventsRequest, st grpc.ServerStreamingServer[guidev1.StreamEventsResponse]) error {
	return a.s.StreamEvents(r, st)
}

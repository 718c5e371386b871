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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service implements SessionService and GuideService.
type Service struct {
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal
	cfg          Config
	log          *slog.Logger
	db           *pgxpool.Pool
	bus          *natsx.Bus
	cache        *routeCache
	classifier   Classifier
	orchestrator orchestratorv1.WorkflowServiceClient
	architect    architectv1.PlanServiceClient
	librarian    librarianv1.LibrarianServiceClient
	archivalist  archivalistv1.ArchivalistServiceClient
	metrics      *metrics
	reg          prometheus.Registerer
	now          func() time.Time

	sessions *sessionCache
	failures *failureIndex
	marks    *dispatchMarks
	writes   *groupCommitter
}

type metrics struct {
	messages    *prometheus.CounterVec
	routing     prometheus.Histogram
	transitions *prometheus.CounterVec
	tiers       *prometheus.CounterVec
	answerCache *prometheus.CounterVec
	failures    *prometheus.CounterVec
	// correction and failedConfidence describe the routing decisions
	// failures corrected, where known (spec A-33).
	correction       prometheus.Histogram
	failedConfidence *prometheus.CounterVec
	decisions        *prometheus.CounterVec
	inbox            *prometheus.CounterVec
	reroutes         *prometheus.CounterVec
	answered         *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	timeouts         *prometheus.CounterVec
	deadLetters      *prometheus.CounterVec
	replays          prometheus.Counter
	grouped          *prometheus.CounterVec
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
		tiers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_routing_tier_total",
			Help: "Routing decisions by the tier that made them (skill, cache, classifier).",
		}, []string{"tier"}),
		answerCache: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_answer_cache_total",
			Help: "Knowledge answer cache lookups, by agent and result (hit, miss).",
		}, []string{"agent", "result"}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_routing_failures_total",
			Help: "Routing failures by signal and misroute pair (spec A-33).",
		}, []string{"signal", "routed_to", "should_have_been"}),
		correction: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sylk_guide_routing_time_to_correction_seconds",
			Help:    "Time from a routing decision to the routing failure that corrected it (spec A-33).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600},
		}),
		failedConfidence: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_routing_failures_by_confidence_total",
			Help: "Routing failures by the tenth of confidence their decision had (\"0.8\" for 0.8 to 0.9); with sylk_guide_routing_decisions_by_confidence_total, the failure rate per confidence (spec A-33).",
		}, []string{"confidence"}),
		decisions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_routing_decisions_by_confidence_total",
			Help: "Routing decisions to an agent, by the tenth of their confidence.",
		}, []string{"confidence"}),
		inbox: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_inbox_messages_total",
			Help: "Envelopes agents sent the Guide, by outcome.",
		}, []string{"outcome"}),
		reroutes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_reroutes_total",
			Help: "Reroute requests, by what the Guide did (followed, escalated).",
		}, []string{"action"}),
		answered: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_requests_answered_total",
			Help: "Routed requests answered, by agent.",
		}, []string{"agent"}),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sylk_guide_request_answer_duration_seconds",
			Help:    "Time from routing a request to its answer, by agent.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"agent"}),
		timeouts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_request_timeouts_total",
			Help: "Routed requests that got no answer in time, by agent.",
		}, []string{"agent"}),
		deadLetters: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_dead_letters_total",
			Help: "Messages kept as dead letters, by target.",
		}, []string{"target"}),
		replays: f.NewCounter(prometheus.CounterOpts{
			Name: "sylk_guide_dead_letter_replays_total",
			Help: "Dead letters replayed.",
		}),
		grouped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_guide_group_commit_messages_total",
			Help: "Messages stored by group commits, by outcome: committed with their group, or run again alone because a member of their group failed.",
		}, []string{"outcome"}),
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
		classifier: newModelClassifier(),
		metrics:    newMetrics(reg),
		reg:        reg,
		now:        func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
	}
	s.cache = &routeCache{rc: deps.Redis, log: s.log, cfg: s.cfg}
	s.sessions = newSessionCache(s.cfg.LocalCacheTTL)
	s.failures = newFailureIndex(s.cfg.LocalCacheTTL)
	s.marks = newDispatchMarks()
	s.writes = newGroupCommitter(s.db, s.cfg.AsyncCommit, s.metrics.grouped)
	if deps.Peers.Orchestrator != nil {
		s.orchestrator = orchestratorv1.NewWorkflowServiceClient(deps.Peers.Orchestrator)
	}
	if deps.Peers.Librarian != nil {
		s.librarian = librarianv1.NewLibrarianServiceClient(deps.Peers.Librarian)
	}
	if deps.Peers.Archivalist != nil {
		s.archivalist = archivalistv1.NewArchivalistServiceClient(deps.Peers.Archivalist)
	}
	if deps.Peers.Architect != nil {
		s.architect = architectv1.NewPlanServiceClient(deps.Peers.Architect)
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

// SetClassifier replaces the offline keyword classifier, for example with
// a model-backed one. Call it before serving.
func (s *Service) SetClassifier(c Classifier) {
	if c != nil {
		s.classifier = c
	}
}

// NeedsLLMGate says whether the Guide has a use for a gate: only the model
// classifier uses one, and only with a provider other than the offline one.
func (s *Service) NeedsLLMGate(defaultProvider string) bool {
	return s.cfg.LLMClassifier && defaultProvider != llm.Local
}

// SetLLMGate gives the Guide the LLM gate. When a model provider is
// configured (anything but the offline local provider) and
// Config.LLMClassifier is on, messages are classified by the model through
// the gate, with the offline rules as the fallback. Call it before serving.
func (s *Service) SetLLMGate(g *gate.Gate) {
	if g == nil || !s.cfg.LLMClassifier || g.Providers().Default().Name() == llm.Local {
		return
	}
	s.SetClassifier(NewLLMClassifier(g, LLMClassifierConfig{Model: s.cfg.LLMClassifierModel, Timeout: s.cfg.LLMClassifierTimeout},
		s.log, s.reg))
	s.log.Info("classifying messages with the model provider", slog.String("provider", g.Providers().Default().Name()))
}

// Run provisions the streams again (idempotent: New already did), then
// consumes the Guide's inbox and the session event stream (correlation),
// runs the reaper and follows the librarian's index runs until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ProvisionTimeout)
	err := s.provision(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	started := s.After(2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return s.bus.Consume(gctx, topology.InboxConsumer(s.bus, topology.AgentGuide, natsx.ConsumerSpec{Ready: started[0]}), s.handleInbox)
	})
	// The correlator's consumer of every event, before events said their
	// origin, is replaced by one of the agents' events only.
	if err := s.bus.JS.DeleteConsumer(ctx, topology.EventsStream(s.bus), topology.DurableCorrelatorLegacy); err != nil &&
		!errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.WarnContext(ctx, "remove the former correlator consumer", logx.Err(err))
	}
	// The correlator takes the agents' events only: the Guide's own never
	// answer a request, and would double what the bus delivers here.
	g.Go(func() error {
		return s.bus.Consume(gctx, topology.AgentEventsConsumer(s.bus, natsx.ConsumerSpec{MaxAckPending: 1024, Ready: started[1]}), s.handleEvent)
	})
	g.Go(func() error { return s.reap(gctx) })
	g.Go(func() error { return s.relay(gctx) }) // outbox.go
	g.Go(func() error { return s.marks.run(gctx, s.db, s.log, s.now) })
	g.Go(func() error { return s.writes.start(gctx, defaultCommitWriters) })
	g.Go(func() error { return s.watchLibrarian(gctx) })
	g.Go(func() error { return s.watchUndeliverable(gctx) })
	return g.Wait()
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

func (a sessionAPI) ActivateSession(ctx context.Context, r *guidev1.ActivateSessionRequest) (*guidev1.ActivateSessionResponse, error) {
	return a.s.ActivateSession(ctx, r)
}

func (a sessionAPI) SwitchSession(ctx context.Context, r *guidev1.SwitchSessionRequest) (*guidev1.SwitchSessionResponse, error) {
	return a.s.SwitchSession(ctx, r)
}

func (a sessionAPI) GetActiveSession(ctx context.Context, r *guidev1.GetActiveSessionRequest) (*guidev1.GetActiveSessionResponse, error) {
	return a.s.GetActiveSession(ctx, r)
}

func (a sessionAPI) GetSessionContext(ctx context.Context, r *guidev1.GetSessionContextRequest) (*guidev1.GetSessionContextResponse, error) {
	return a.s.GetSessionContext(ctx, r)
}

func (a sessionAPI) UpdateSessionContext(ctx context.Context, r *guidev1.UpdateSessionContextRequest) (*guidev1.UpdateSessionContextResponse, error) {
	return a.s.UpdateSessionContext(ctx, r)
}

func (a sessionAPI) UpdateSession(ctx context.Context, r *guidev1.UpdateSessionRequest) (*guidev1.UpdateSessionResponse, error) {
	return a.s.UpdateSession(ctx, r)
}

func (a sessionAPI) GetSessionSnapshot(ctx context.Context, r *guidev1.GetSessionSnapshotRequest) (*guidev1.GetSessionSnapshotResponse, error) {
	return a.s.GetSessionSnapshot(ctx, r)
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

func (a guideAPI) ListClarifications(ctx context.Context, r *guidev1.ListClarificationsRequest) (*guidev1.ListClarificationsResponse, error) {
	return a.s.ListClarifications(ctx, r)
}

func (a guideAPI) RecordRoutingFailure(ctx context.Context, r *guidev1.RecordRoutingFailureRequest) (*guidev1.RecordRoutingFailureResponse, error) {
	return a.s.RecordRoutingFailure(ctx, r)
}

func (a guideAPI) ListRoutingFailures(ctx context.Context, r *guidev1.ListRoutingFailuresRequest) (*guidev1.ListRoutingFailuresResponse, error) {
	return a.s.ListRoutingFailures(ctx, r)
}

func (a guideAPI) GetRoutingAccuracy(ctx context.Context, r *guidev1.GetRoutingAccuracyRequest) (*guidev1.GetRoutingAccuracyResponse, error) {
	return a.s.GetRoutingAccuracy(ctx, r)
}

func (a guideAPI) ListDeadLetters(ctx context.Context, r *guidev1.ListDeadLettersRequest) (*guidev1.ListDeadLettersResponse, error) {
	return a.s.ListDeadLetters(ctx, r)
}

func (a guideAPI) ReplayDeadLetter(ctx context.Context, r *guidev1.ReplayDeadLetterRequest) (*guidev1.ReplayDeadLetterResponse, error) {
	return a.s.ReplayDeadLetter(ctx, r)
}

func (a guideAPI) StartRecording(ctx context.Context, r *guidev1.StartRecordingRequest) (*guidev1.StartRecordingResponse, error) {
	return a.s.StartRecording(ctx, r)
}

func (a guideAPI) StopRecording(ctx context.Context, r *guidev1.StopRecordingRequest) (*guidev1.StopRecordingResponse, error) {
	return a.s.StopRecording(ctx, r)
}

func (a guideAPI) ListRecordings(ctx context.Context, r *guidev1.ListRecordingsRequest) (*guidev1.ListRecordingsResponse, error) {
	return a.s.ListRecordings(ctx, r)
}

func (a guideAPI) GetRecording(ctx context.Context, r *guidev1.GetRecordingRequest) (*guidev1.GetRecordingResponse, error) {
	return a.s.GetRecording(ctx, r)
}

func (a guideAPI) ReplayRecording(ctx context.Context, r *guidev1.ReplayRecordingRequest) (*guidev1.ReplayRecordingResponse, error) {
	return a.s.ReplayRecording(ctx, r)
}

func (a guideAPI) StepReplay(ctx context.Context, r *guidev1.StepReplayRequest) (*guidev1.StepReplayResponse, error) {
	return a.s.StepReplay(ctx, r)
}

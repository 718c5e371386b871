// Package architect is the Architect service: it turns a request into a plan
// (a DAG of tasks) that waits for the user's approval, and on approval
// submits the DAG to the orchestrator. Requests arrive through PlanService or,
// routed by the Guide, through the architect's inbox.
package architect

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

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/guidesession"
	"sylk.dev/sylk/pkg/inbox"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Service implements PlanService and consumes the architect's inbox.
type Service struct {
	architectv1.UnimplementedPlanServiceServer
	// Readiness waits for Run to have provisioned its consumers.
	app.StartSignal

	cfg          Config
	log          *slog.Logger
	db           *pgxpool.Pool
	bus          *natsx.Bus
	orchestrator orchestratorv1.WorkflowServiceClient   // nil when no peer is configured
	sessions     *guidesession.Reader                   // nil when no peer is configured: plans run without session limits
	academic     academicv1.AcademicServiceClient       // nil when no peer is configured: plans keep only the user's criteria
	librarian    librarianv1.LibrarianServiceClient     // nil when no peer is configured: plans find no code, and no repository runs
	archivalist  archivalistv1.ArchivalistServiceClient // nil when no peer is configured: plans find no past failures or decisions
	planner      Planner
	metrics      *metrics
	audit        *audit.Log // approvals are recorded in it
	now          func() time.Time
}

type metrics struct {
	created      *prometheus.CounterVec
	decided      *prometheus.CounterVec
	inbox        *prometheus.CounterVec
	orchestrator prometheus.Histogram
	inference    *prometheus.CounterVec
	consulted    *prometheus.CounterVec
	revised      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		created: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_architect_plans_created_total",
			Help: "Plans created, by planner and origin (api or inbox).",
		}, []string{"planner", "origin"}),
		inference: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_architect_intent_inference_total",
			Help: "Plans whose feature domain was recognised, by how asking the academic for its expectations ended.",
		}, []string{"outcome"}),
		decided: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_architect_plan_decisions_total",
			Help: "Plans approved or rejected.",
		}, []string{"decision"}),
		inbox: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_architect_inbox_messages_total",
			Help: "Inbox messages handled, by result (drafted, duplicate, refused, expired, rejected, failed).",
		}, []string{"result"}),
		consulted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_architect_consultations_total",
			Help: "Consultations before planning, by agent (librarian, archivalist) and outcome (answered, unavailable).",
		}, []string{"agent", "outcome"}),
		revised: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_architect_plan_revisions_total",
			Help: "Plan versions made from feedback, by who revised (model or local) and whether the feedback was applied.",
		}, []string{"planner", "applied"}),
		orchestrator: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sylk_architect_orchestrator_request_duration_seconds",
			Help:    "Time taken by the orchestrator to accept an approved plan.",
			Buckets: prometheus.DefBuckets,
		}),
	}
}

// New builds the Architect. Like the Guide, it provisions the EVENTS and
// AGENTS streams before returning (bounded by Config.ProvisionTimeout), so
// that CreatePlan can publish before Run has started.
func New(cfg Config, deps app.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	if deps.DB == nil {
		errs = append(errs, errors.New("architect: a database pool is required"))
	}
	if deps.Bus == nil {
		errs = append(errs, errors.New("architect: a NATS bus is required"))
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
		cfg:     cfg.withDefaults(),
		log:     log.With(logx.KeyComponent, "architect"),
		db:      deps.DB,
		bus:     deps.Bus,
		planner: localPlanner{},
		metrics: newMetrics(reg),
		audit:   deps.Audit,
		now:     func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
	}
	if deps.Peers.Orchestrator != nil {
		s.orchestrator = orchestratorv1.NewWorkflowServiceClient(deps.Peers.Orchestrator)
	}
	if deps.Peers.Academic != nil {
		s.academic = academicv1.NewAcademicServiceClient(deps.Peers.Academic)
	} else {
		s.log.Warn("no academic address configured: plans keep only the criteria users state")
	}
	if deps.Peers.Librarian != nil {
		s.librarian = librarianv1.NewLibrarianServiceClient(deps.Peers.Librarian)
	} else {
		s.log.Warn("no librarian address configured: plans find no code, and plans on a repository cannot be approved")
	}
	if deps.Peers.Archivalist != nil {
		s.archivalist = archivalistv1.NewArchivalistServiceClient(deps.Peers.Archivalist)
	} else {
		s.log.Warn("no archivalist address configured: plans find no past failures or decisions")
	}
	s.sessions = guidesession.New(deps.Peers.Guide, s.cfg.GuideTimeout, s.log)
	if s.sessions == nil {
		s.log.Warn("no guide address configured: approved plans run without their session's limits")
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
		return fmt.Errorf("architect: %w", err)
	}
	if err := topology.EnsureAgents(ctx, s.bus); err != nil {
		return fmt.Errorf("architect: %w", err)
	}
	return nil
}

// Register adds PlanService to g.
func (s *Service) Register(g *grpc.Server) {
	architectv1.RegisterPlanServiceServer(g, s)
}

// Run provisions the streams (again: idempotent) and consumes the
// architect's inbox until ctx is done.
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
	return inbox.Run(ctx, s.bus, inbox.Config{Agent: topology.AgentArchitect, Timeout: s.cfg.InboxTimeout,
		Outcomes: s.metrics.inbox, Log: s.log, Ready: s.MarkStarted}, s.handleInbox)
}

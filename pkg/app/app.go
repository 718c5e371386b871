// Package app defines what a Sylk service is to the process that runs it:
// something that registers gRPC services and runs background consumers, built
// from explicit dependencies.
package app

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/redisx"
)

// Service is one deployable's behaviour.
type Service interface {
	// Register adds the service's gRPC services to s.
	Register(s *grpc.Server)
	// Run starts the service's background work (NATS consumers, reapers) and
	// returns once ctx is done and that work has stopped.
	Run(ctx context.Context) error
}

// Starter is a Service that says when it has started: its Run has
// provisioned its streams and consumers and loaded its state. The process
// running it reports it ready (grpc.health.v1 SERVING) only from then on. A
// Service that is not a Starter counts as started once its Run is entered.
type Starter interface {
	Service
	// Started is closed once Run has started.
	Started() <-chan struct{}
}

// StartSignal makes a Service that embeds it a Starter: its Run calls
// MarkStarted once it has started. The zero value is ready to use.
type StartSignal struct {
	init, done sync.Once
	ch         chan struct{}
}

func (s *StartSignal) c() chan struct{} {
	s.init.Do(func() { s.ch = make(chan struct{}) })
	return s.ch
}

// Started is closed by the first MarkStarted.
func (s *StartSignal) Started() <-chan struct{} { return s.c() }

// MarkStarted says the service has started; later calls do nothing.
func (s *StartSignal) MarkStarted() { s.done.Do(func() { close(s.c()) }) }

// After returns n functions, one for each part of a start (a consumer,
// loaded state): the service has started once every one was called. Each
// may be called more than once; n <= 0 marks it started at once.
func (s *StartSignal) After(n int) []func() {
	if n <= 0 {
		s.MarkStarted()
		return nil
	}
	var mu sync.Mutex
	left := n
	out := make([]func(), n)
	for i := range out {
		var once sync.Once
		out[i] = func() {
			once.Do(func() {
				mu.Lock()
				left--
				done := left == 0
				mu.Unlock()
				if done {
					s.MarkStarted()
				}
			})
		}
	}
	return out
}

// Deps are the shared resources a service is built from.
type Deps struct {
	Log *slog.Logger
	// DB is a pool whose search path is the service's schema (migrated).
	DB *pgxpool.Pool
	// Schema is the service's schema name.
	Schema string
	Redis  *redisx.Client
	Bus    *natsx.Bus
	// Registerer receives the service's metrics.
	Registerer prometheus.Registerer
	Peers      Peers
	// Audit is the audit log a service records security-relevant actions
	// in (pkg/audit), inside its own transaction where it has one.
	Audit *audit.Log
}

// Peers are client connections to the other services, nil where a service
// does not need one.
type Peers struct {
	Guide        grpc.ClientConnInterface
	Architect    grpc.ClientConnInterface
	Orchestrator grpc.ClientConnInterface
	Librarian    grpc.ClientConnInterface
	Archivalist  grpc.ClientConnInterface
	Academic     grpc.ClientConnInterface
}

// Package app defines what a Sylk service is to the process that runs it:
// something that registers gRPC services and runs background consumers, built
// from explicit dependencies.
package app

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

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

// Package mesh runs Sylk services: one per process (`sylk serve <service>`
// and the per-service binaries) or the whole mesh in one process (`sylk dev`).
package mesh

import (
	"errors"
	"flag"
	"fmt"
	"slices"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/meshtls"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/telemetry"
	"sylk.dev/sylk/services/academic"
	"sylk.dev/sylk/services/architect"
	"sylk.dev/sylk/services/archivalist"
	"sylk.dev/sylk/services/guide"
	"sylk.dev/sylk/services/librarian"
	"sylk.dev/sylk/services/orchestrator"
	"sylk.dev/sylk/services/worker"
)

// Version is set at build time with -ldflags "-X sylk.dev/sylk/internal/mesh.Version=...".
var Version = "dev"

// Service names.
const (
	Guide        = "guide"
	Architect    = "architect"
	Orchestrator = "orchestrator"
	Worker       = "worker"
	Librarian    = "librarian"
	Archivalist  = "archivalist"
	Academic     = "academic"
	Gateway      = "gateway"
)

// Services lists every gRPC service in start order (dependencies first).
var Services = []string{Librarian, Archivalist, Academic, Orchestrator, Worker, Architect, Guide}

// Schemas lists the Postgres schemas, one per service that keeps state, plus auth.
var Schemas = []string{Guide, Architect, Orchestrator, Librarian, Archivalist, Academic, "auth", LLMSchema}

// IsService reports whether name is a service that `serve` can run.
func IsService(name string) bool { return name == Gateway || slices.Contains(Services, name) }

// Common is the configuration every service process shares.
type Common struct {
	Log          logx.Config
	Server       grpcserver.Config
	Postgres     pgstore.Config
	SchemaPrefix string
	Redis        redisx.Config
	NATS         natsx.Config
	Telemetry    telemetry.Config
	Peers        PeerConfig
	// LLM configures the model providers (pkg/llm); LLMCredentials the
	// encryption of per-tenant provider keys. See docs/llm.md.
	LLM            llm.Config
	LLMCredentials creds.Config
	// LLMGate tunes the gate every service builds with gate.New.
	LLMGate gate.Config
	// Internal is the key with which services sign the caller identities
	// they pass to each other (identity.Signer).
	Internal identity.KeyConfig
	// Stores says whether stores without credentials are accepted.
	Stores StoresConfig
	// TLS secures gRPC between the services (meshtls).
	TLS meshtls.Config
}

// RegisterFlags registers the shared flags.
func (c *Common) RegisterFlags(fs *flag.FlagSet) {
	c.Log.RegisterFlags(fs)
	c.Server.RegisterFlags(fs)
	c.Postgres.RegisterFlags(fs)
	fs.StringVar(&c.SchemaPrefix, "postgres.schema-prefix", "", "prefix of every schema name (schemas are <prefix><service>)")
	c.Redis.RegisterFlags(fs)
	c.NATS.RegisterFlags(fs)
	c.Telemetry.RegisterFlags(fs)
	c.Peers.RegisterFlags(fs)
	c.LLM.RegisterFlags(fs)
	c.LLMCredentials.RegisterFlags(fs)
	c.LLMGate.RegisterFlags(fs)
	c.Internal.RegisterFlags(fs)
	c.Stores.RegisterFlags(fs)
	c.TLS.RegisterFlags(fs)
}

// Validate joins every problem.
func (c Common) Validate() error {
	var errs []error
	for _, v := range []interface{ Validate() error }{c.Log, c.Server, c.Postgres, c.Redis, c.NATS, c.Telemetry, c.LLM, c.LLMCredentials, c.LLMGate, c.Internal, c.TLS} {
		if err := v.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.SchemaPrefix != "" && !pgstore.ValidSchema(c.SchemaPrefix+"x") {
		errs = append(errs, fmt.Errorf("postgres.schema-prefix %q: lower-case letters, digits and '_' only", c.SchemaPrefix))
	}
	return errors.Join(errs...)
}

// Schema is the schema name of service under prefix.
func Schema(prefix, service string) string { return prefix + service }

// PeerConfig holds the addresses of the other services.
type PeerConfig struct {
	Guide, Architect, Orchestrator, Librarian, Archivalist, Academic string
}

// RegisterFlags registers -peer.<service>.
func (p *PeerConfig) RegisterFlags(fs *flag.FlagSet) {
	for _, x := range []struct {
		dst  *string
		name string
	}{{&p.Guide, Guide}, {&p.Architect, Architect}, {&p.Orchestrator, Orchestrator}, {&p.Librarian, Librarian}, {&p.Archivalist, Archivalist}, {&p.Academic, Academic}} {
		fs.StringVar(x.dst, "peer."+x.name, "", "gRPC address (host:port) of the "+x.name+" service")
	}
}

// required returns an error naming each peer address service needs but lacks.
func (p PeerConfig) required(service string) error {
	need := map[string][]string{
		// Both check sessions through the Guide: that a run is in the
		// caller's own open session, and the session's limits.
		Architect:    {Orchestrator, Guide},
		Orchestrator: {Guide},
		Gateway:      {Guide, Architect, Orchestrator, Librarian, Archivalist, Academic},
	}[service]
	addr := map[string]string{Guide: p.Guide, Architect: p.Architect, Orchestrator: p.Orchestrator, Librarian: p.Librarian, Archivalist: p.Archivalist, Academic: p.Academic}
	var errs []error
	for _, n := range need {
		if addr[n] == "" {
			errs = append(errs, fmt.Errorf("%s needs -peer.%s (env SYLK_PEER_%s)", service, n, upper(n)))
		}
	}
	return errors.Join(errs...)
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// ServiceConfigs holds every service's own configuration.
type ServiceConfigs struct {
	Guide        guide.Config
	Architect    architect.Config
	Orchestrator orchestrator.Config
	Worker       worker.Config
	Librarian    librarian.Config
	Archivalist  archivalist.Config
	Academic     academic.Config
	Gateway      gateway.Config
}

// RegisterFlags registers the flags of the named services.
func (s *ServiceConfigs) RegisterFlags(fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		switch n {
		case Guide:
			s.Guide.RegisterFlags(fs)
		case Architect:
			s.Architect.RegisterFlags(fs)
		case Orchestrator:
			s.Orchestrator.RegisterFlags(fs)
		case Worker:
			s.Worker.RegisterFlags(fs)
		case Librarian:
			s.Librarian.RegisterFlags(fs)
		case Archivalist:
			s.Archivalist.RegisterFlags(fs)
		case Academic:
			s.Academic.RegisterFlags(fs)
		case Gateway:
			s.Gateway.RegisterFlags(fs)
		}
	}
}

// Validate checks the named services' configurations.
func (s ServiceConfigs) Validate(names ...string) error {
	var errs []error
	for _, n := range names {
		var err error
		switch n {
		case Guide:
			err = s.Guide.Validate()
		case Architect:
			err = s.Architect.Validate()
		case Orchestrator:
			err = s.Orchestrator.Validate()
		case Worker:
			err = s.Worker.Validate()
		case Librarian:
			err = s.Librarian.Validate()
		case Archivalist:
			err = s.Archivalist.Validate()
		case Academic:
			err = s.Academic.Validate()
		case Gateway:
			err = s.Gateway.Validate()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

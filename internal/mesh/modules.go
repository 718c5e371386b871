package mesh

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"google.golang.org/grpc"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/services/academic"
	"sylk.dev/sylk/services/architect"
	"sylk.dev/sylk/services/archivalist"
	"sylk.dev/sylk/services/guide"
	"sylk.dev/sylk/services/librarian"
	"sylk.dev/sylk/services/orchestrator"
	"sylk.dev/sylk/services/worker"
)

// Module names.
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

// A module is one deployable of the mesh: a gRPC service or the REST
// gateway. The table below is the one place that says what each needs;
// `sylk serve`, `sylk dev`, `sylk healthcheck` and the gateway's
// connections all read it.
type module struct {
	name string
	// needs are the modules it calls and cannot run without: their
	// addresses are required (-peer.<name>).
	needs []string
	// uses are the modules it calls when their addresses are given.
	uses []string
	// schema is the Postgres schema that holds its state; "" for none.
	schema string
	// llm is what it takes from pkg/llm.
	llm llmAttachment
	// rest marks the gateway: it serves REST over HTTP, is no app.Service,
	// and uses no NATS (Redis only for its failed-authentication counts).
	rest bool
	// config is its configuration within the process's.
	config func(*ServiceConfigs) flagConfig
	// build makes the service (nil for the gateway).
	build func(*ServiceConfigs, app.Deps) (app.Service, error)
	// client puts a connection to it where its callers and the gateway
	// find it; nil for a module no one calls.
	client func(*app.Peers, *gateway.Conns, *grpc.ClientConn)
}

// llmAttachment says what a module takes from pkg/llm.
type llmAttachment int

// The attachments are bits: a module may take both.
const (
	llmNone llmAttachment = 0
	// llmGate: its model calls go through a gate (SetLLMGate), unless it
	// says it has no use for one (NeedsLLMGate).
	llmGate llmAttachment = 1 << (iota - 1)
	// llmAPI: it serves the usage and provider APIs (SetLLM).
	llmAPI
)

// flagConfig is a module's configuration.
type flagConfig interface {
	RegisterFlags(fs *flag.FlagSet)
	Validate() error
}

// modules lists the gRPC services in start order, then the gateway.
var modules = []module{
	{
		name: Librarian, schema: Librarian, llm: llmGate,
		config: func(s *ServiceConfigs) flagConfig { return &s.Librarian },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return librarian.New(s.Librarian, d) },
		client: func(p *app.Peers, g *gateway.Conns, c *grpc.ClientConn) { p.Librarian, g.Librarian = c, c },
	},
	{
		// Its answers are written through a gate.
		name: Archivalist, schema: Archivalist, llm: llmAPI | llmGate,
		// Consultations logged to it are checked against the caller's session.
		uses:   []string{Guide},
		config: func(s *ServiceConfigs) flagConfig { return &s.Archivalist },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return archivalist.New(s.Archivalist, d) },
		client: func(p *app.Peers, g *gateway.Conns, c *grpc.ClientConn) { p.Archivalist, g.Archivalist = c, c },
	},
	{
		name: Academic, schema: Academic, llm: llmGate,
		config: func(s *ServiceConfigs) flagConfig { return &s.Academic },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return academic.New(s.Academic, d) },
		client: func(p *app.Peers, g *gateway.Conns, c *grpc.ClientConn) { p.Academic, g.Academic = c, c },
	},
	{
		name: Orchestrator, schema: Orchestrator,
		// It checks through the Guide that a run is in the caller's own
		// open session, and the session's limits; through the Librarian
		// that a repository to review is registered in the tenant.
		needs:  []string{Guide},
		uses:   []string{Librarian},
		config: func(s *ServiceConfigs) flagConfig { return &s.Orchestrator },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return orchestrator.New(s.Orchestrator, d) },
		client: func(p *app.Peers, g *gateway.Conns, c *grpc.ClientConn) { p.Orchestrator, g.Orchestrator = c, c },
	},
	{
		name: Worker, llm: llmGate,
		// Its agents search the run's repository through the Librarian and
		// consult the history and the documents.
		uses:   []string{Librarian, Archivalist, Academic},
		config: func(s *ServiceConfigs) flagConfig { return &s.Worker },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return worker.New(s.Worker, d) },
	},
	{
		name: Architect, schema: Architect, llm: llmGate,
		// It starts runs, and checks sessions as the Orchestrator does; it
		// consults the Librarian and the Archivalist before planning.
		needs:  []string{Orchestrator, Guide},
		uses:   []string{Academic, Librarian, Archivalist},
		config: func(s *ServiceConfigs) flagConfig { return &s.Architect },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return architect.New(s.Architect, d) },
		client: func(p *app.Peers, g *gateway.Conns, c *grpc.ClientConn) { p.Architect, g.Architect = c, c },
	},
	{
		name: Guide, schema: Guide, llm: llmGate,
		uses:   []string{Orchestrator, Librarian, Archivalist, Architect},
		config: func(s *ServiceConfigs) flagConfig { return &s.Guide },
		build:  func(s *ServiceConfigs, d app.Deps) (app.Service, error) { return guide.New(s.Guide, d) },
		client: func(p *app.Peers, g *gateway.Conns, c *grpc.ClientConn) { p.Guide, g.Guide = c, c },
	},
	{
		// The gateway routes the REST API to every service that has one,
		// and keeps API keys in the auth schema.
		name: Gateway, schema: authSchema, rest: true,
		needs:  []string{Guide, Architect, Orchestrator, Librarian, Archivalist, Academic},
		config: func(s *ServiceConfigs) flagConfig { return &s.Gateway },
	},
}

// ServiceConfigs holds every module's own configuration.
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

// RegisterFlags registers the flags of ms.
func (s *ServiceConfigs) RegisterFlags(fs *flag.FlagSet, ms ...*module) {
	for _, m := range ms {
		m.config(s).RegisterFlags(fs)
	}
}

// Validate checks the configurations of ms.
func (s *ServiceConfigs) Validate(ms ...*module) error {
	var errs []error
	for _, m := range ms {
		if err := m.config(s).Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// authSchema holds the gateway's users and API keys.
const authSchema = "auth"

// Schemas lists the Postgres schemas: the modules', then the LLM records'
// and the audit log's.
var Schemas = schemaNames()

func schemaNames() []string {
	var out []string
	for _, m := range modules {
		if m.schema != "" {
			out = append(out, m.schema)
		}
	}
	return append(out, LLMSchema, audit.Schema)
}

// lookup returns the module named name.
func lookup(name string) (*module, error) {
	for i := range modules {
		if modules[i].name == name {
			return &modules[i], nil
		}
	}
	return nil, fmt.Errorf("unknown service %q (want one of %s)", name, strings.Join(moduleNames(), ", "))
}

// moduleNames lists every module's name in table order.
func moduleNames() []string {
	out := make([]string, len(modules))
	for i, m := range modules {
		out[i] = m.name
	}
	return out
}

// allModules returns every module.
func allModules() []*module {
	out := make([]*module, len(modules))
	for i := range modules {
		out[i] = &modules[i]
	}
	return out
}

// services returns the modules that are gRPC services, in start order.
func services() []*module {
	var out []*module
	for i := range modules {
		if !modules[i].rest {
			out = append(out, &modules[i])
		}
	}
	return out
}

// IsService reports whether name is a module that `serve` can run.
func IsService(name string) bool {
	_, err := lookup(name)
	return err == nil
}

// peers lists the modules m calls: those it needs, then those it uses.
func (m *module) peers() []string { return append(append([]string(nil), m.needs...), m.uses...) }

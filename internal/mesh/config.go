// Package mesh runs Sylk services: one per process (`sylk serve <service>`
// and the per-service binaries) or the whole mesh in one process (`sylk dev`).
package mesh

import (
	"errors"
	"flag"
	"fmt"

	"sylk.dev/sylk/pkg/config"
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
)

// Version is set at build time with -ldflags "-X sylk.dev/sylk/internal/mesh.Version=...".
var Version = "dev"

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

// Schema is the name of schema under prefix.
func Schema(prefix, schema string) string { return prefix + schema }

// PeerConfig holds the gRPC addresses of the other modules, by name.
type PeerConfig map[string]string

// RegisterFlags registers -peer.<module> for every module others call.
func (p *PeerConfig) RegisterFlags(fs *flag.FlagSet) {
	if *p == nil {
		*p = PeerConfig{}
	}
	for _, m := range modules {
		if m.client != nil {
			fs.Var(peerFlag{*p, m.name}, "peer."+m.name, "gRPC address (host:port) of the "+m.name+" service, whose name may resolve to every replica, or a comma-separated list of its replicas' host:port; calls are balanced round-robin")
		}
	}
}

// peerFlag is the -peer.<name> flag.
type peerFlag struct {
	p    PeerConfig
	name string
}

func (f peerFlag) String() string { return f.p[f.name] }

func (f peerFlag) Set(v string) error {
	f.p[f.name] = v
	return nil
}

// required returns an error naming each peer address m needs but lacks.
func (p PeerConfig) required(m *module) error {
	var errs []error
	for _, n := range m.needs {
		if p[n] == "" {
			errs = append(errs, fmt.Errorf("%s needs -peer.%s (env %s)", m.name, n, config.EnvName("peer."+n)))
		}
	}
	return errors.Join(errs...)
}

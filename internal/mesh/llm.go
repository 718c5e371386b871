package mesh

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/llm"
	llmapi "sylk.dev/sylk/pkg/llm/api"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/llm/signal"
	llmusage "sylk.dev/sylk/pkg/llm/usage"
	"sylk.dev/sylk/services/archivalist"
)

// LLMSchema holds usage records and stored provider credentials (pkg/llm).
const LLMSchema = "llm"

// llmGated is a service whose model calls go through an LLM gate (the
// Architect's planner; any service can opt in by implementing it).
type llmGated interface {
	SetLLMGate(g *gate.Gate)
}

// llmOptional is a gated service that may have no use for a gate: it says
// whether it needs one given the configured default provider, so that a
// service that would ignore the offline provider opens no pool for it.
type llmOptional interface {
	NeedsLLMGate(defaultProvider string) bool
}

// needsGate reports whether svc gets a gate.
func needsGate(svc app.Service, common Common) (bool, error) {
	if _, ok := svc.(llmGated); !ok {
		return false, nil
	}
	o, ok := svc.(llmOptional)
	if !ok {
		return true, nil
	}
	reg, err := provider.New(common.LLM)
	if err != nil {
		return false, err
	}
	return o.NeedsLLMGate(reg.Default().Name()), nil
}

// attachLLM gives the archivalist, which owns usage and audit records, the
// LLM usage and provider APIs on a pool of the llm schema, and every service
// that makes model calls its gate (configured providers, or `local`; shared
// state in Redis, signals on NATS, usage records in the llm schema). The
// returned function closes what it opened.
func attachLLM(ctx context.Context, name string, svc app.Service, common Common, deps app.Deps, log *slog.Logger) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if a, ok := svc.(*archivalist.Service); ok && name == Archivalist {
		pool, err := OpenSchema(ctx, common.Postgres, common.SchemaPrefix, LLMSchema)
		if err != nil {
			return nil, err
		}
		closers = append(closers, pool.Close)
		api, err := llmapi.New(common.LLM, common.LLMCredentials, pool, log)
		if err != nil {
			closeAll()
			return nil, err
		}
		a.SetLLM(api)
	}
	need, err := needsGate(svc, common)
	if err != nil {
		closeAll()
		return nil, err
	}
	if s, ok := svc.(llmGated); ok && need {
		pool, err := OpenSchema(ctx, common.Postgres, common.SchemaPrefix, LLMSchema)
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, pool.Close)
		g, closeGate, err := newGate(ctx, common, deps, pool, log)
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, closeGate)
		s.SetLLMGate(g)
	}
	return closeAll, nil
}

// newGate builds a service's gate on a pool of the llm schema: configured
// providers, and, when an encryption key is configured, each tenant's own
// stored keys (a tenant's call to a provider it stored a key for uses that
// key, other calls the configured one). Decrypted keys only ever live in
// the cached provider clients; a key stored or deleted through the API drops
// that tenant's cached clients in every process (creds.Providers.Listen),
// and the cache TTL bounds staleness if a notification is lost.
func newGate(ctx context.Context, common Common, deps app.Deps, pool *pgxpool.Pool, log *slog.Logger) (*gate.Gate, func(), error) {
	reg, err := provider.New(common.LLM)
	if err != nil {
		return nil, nil, err
	}
	d := gate.Deps{
		Providers: reg, Redis: deps.Redis, Signals: signal.NewNATS(deps.Bus), Usage: llmusage.New(pool),
		Log: log, Registerer: deps.Registerer, MaxTokens: common.LLM.MaxTokens,
	}
	stop := func() {}
	store, err := creds.New(common.LLMCredentials, pool)
	if err != nil {
		return nil, nil, err
	}
	if store.CanStore() {
		tenants := creds.NewProviders(store, provider.Build, func(name string) llm.ProviderOptions {
			// A provider the server has no key for still gets its aliases
			// and limits; the tenant's key and URL go on top.
			o, err := common.LLM.OptionsFor(name)
			if err != nil {
				p := common.LLM.For(name)
				o = llm.ProviderOptions{BaseURL: p.BaseURL, Aliases: p.Aliases(name), MaxTokens: common.LLM.MaxTokens}
			}
			return o
		}, common.LLMCredentials)
		if stop, err = tenants.Listen(ctx, pool.Config().ConnConfig, log); err != nil {
			return nil, nil, err
		}
		d.Tenants = tenants
	}
	g, err := gate.New(common.LLMGate, d)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return g, func() { g.Close(); stop() }, nil
}

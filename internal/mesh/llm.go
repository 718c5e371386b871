package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/llm"
	llmapi "sylk.dev/sylk/pkg/llm/api"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/llm/gate"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/llm/signal"
	llmusage "sylk.dev/sylk/pkg/llm/usage"
)

// LLMSchema holds usage records and stored provider credentials (pkg/llm).
const LLMSchema = "llm"

// llmGated is a service whose model calls go through an LLM gate.
type llmGated interface {
	SetLLMGate(g *gate.Gate)
}

// llmOptional is a gated service that may have no use for a gate: it says
// whether it needs one given the configured default provider, so that a
// service that would ignore the offline provider opens no pool for it.
type llmOptional interface {
	NeedsLLMGate(defaultProvider string) bool
}

// llmServing is a service that serves the LLM usage and provider APIs.
type llmServing interface {
	SetLLM(api interface{ Register(*grpc.Server) })
}

// attachLLM gives svc what its module takes from pkg/llm (see the module
// table): the usage and provider APIs on a pool of the llm schema, or a
// gate (configured providers, or `local`; shared state in Redis, signals
// on NATS, usage records in the llm schema). The returned function closes
// what it opened.
func attachLLM(ctx context.Context, m *module, svc app.Service, common Common, deps app.Deps, log *slog.Logger) (func(), error) {
	closers := []func(){}
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	if m.llm&llmAPI != 0 {
		s, ok := svc.(llmServing)
		if !ok {
			return nil, fmt.Errorf("%s serves the LLM APIs in the module table but has no SetLLM", m.name)
		}
		c, err := attachAPI(ctx, s, common, deps, log)
		if err != nil {
			return nil, err
		}
		closers = append(closers, c)
	}
	if m.llm&llmGate != 0 {
		s, ok := svc.(llmGated)
		if !ok {
			closeAll()
			return nil, fmt.Errorf("%s takes an LLM gate in the module table but has no SetLLMGate", m.name)
		}
		need, err := needsGate(svc, common)
		if err == nil && need {
			var c func()
			if c, err = attachGate(ctx, s, common, deps, log); err == nil {
				closers = append(closers, c)
			}
		}
		if err != nil {
			closeAll()
			return nil, err
		}
	}
	return closeAll, nil
}

// needsGate reports whether svc, which takes a gate, has a use for one.
func needsGate(svc app.Service, common Common) (bool, error) {
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

// attachAPI gives s the usage and provider APIs on a pool of the llm schema,
// recording stored credentials in the audit log.
func attachAPI(ctx context.Context, s llmServing, common Common, deps app.Deps, log *slog.Logger) (func(), error) {
	pool, err := OpenSchema(ctx, common.Postgres, common.SchemaPrefix, LLMSchema)
	if err != nil {
		return nil, err
	}
	api, err := llmapi.New(common.LLM, common.LLMCredentials, pool, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	api.SetAudit(deps.Audit)
	s.SetLLM(api)
	return pool.Close, nil
}

// attachGate gives s a gate on a pool of the llm schema.
func attachGate(ctx context.Context, s llmGated, common Common, deps app.Deps, log *slog.Logger) (func(), error) {
	pool, err := OpenSchema(ctx, common.Postgres, common.SchemaPrefix, LLMSchema)
	if err != nil {
		return nil, err
	}
	g, closeGate, err := newGate(ctx, common, deps, pool, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.SetLLMGate(g)
	return func() { closeGate(); pool.Close() }, nil
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
